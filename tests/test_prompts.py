"""harness.prompts.encode_catalogue: the bench catalogue encoded once per tokenizer, in memory and on disk."""

from __future__ import annotations

import dataclasses
import types

import pytest

from harness import prompts as P


class FakeTokenizer:
    """Word ids from a growing table (no chat template); counts the texts it encodes."""

    def __init__(self, name="fake", offset=0):
        self.name_or_path, self.offset, self.calls, self.table = name, offset, [], {}

    def __call__(self, text, add_special_tokens=True):
        self.calls.append(text)
        ids = [self.offset + self.table.setdefault(w, len(self.table)) for w in text.split()]
        return types.SimpleNamespace(input_ids=ids)


@pytest.fixture(autouse=True)
def _fresh_memory(monkeypatch):
    monkeypatch.setattr(P, "_ENCODED", {})


def _encoded(tok, calls_before):
    return [t for t in tok.calls[calls_before:] if t != tok.calls[0]]  # the key's probe text aside


def test_the_catalogue_is_encoded_once_per_tokenizer():
    catalogue = P.load_catalogue()  # every category, code-edit too (the HTTP bench's default leaves it out)
    assert {p.kind for p in catalogue} >= {"chat", "translation", "summarization", "qa", "math", "rag", "code-edit"}
    tok = FakeTokenizer()
    first = P.encode_catalogue(tok)
    assert set(first) == {p.id for p in catalogue} and all(first.values())
    assert len(_encoded(tok, 0)) == len(catalogue)
    n = len(tok.calls)
    again = P.encode_catalogue(tok)
    assert again == first and _encoded(tok, n) == []  # from memory: only the probe was encoded
    other = FakeTokenizer("other", offset=1000)
    assert P.encode_catalogue(other) != first and len(_encoded(other, 0)) == len(catalogue)


def test_ids_match_a_direct_encoding_and_a_subset_or_chat_is_its_own_entry():
    tok = FakeTokenizer()
    rag = P.load_catalogue(("rag",))
    got = P.encode_catalogue(tok, rag)
    assert list(got) == [p.id for p in rag]
    assert got == {p.id: list(tok(p.text).input_ids) for p in rag}
    n = len(tok.calls)
    P.encode_catalogue(tok, rag[:3])  # another prompt list: encoded afresh
    assert len(_encoded(tok, n)) == 3


def test_the_disk_cache_serves_a_later_process_and_an_edit_re_encodes(tmp_path):
    math = P.load_catalogue(("math",), per_category=4)
    first = P.encode_catalogue(FakeTokenizer(), math, cache_dir=tmp_path)
    files = list(tmp_path.glob("prompts-*.json"))
    assert len(files) == 1
    P._ENCODED.clear()  # a new process: memory empty, the file stays
    tok = FakeTokenizer()
    assert P.encode_catalogue(tok, math, cache_dir=tmp_path) == first
    assert _encoded(tok, 0) == []  # read from disk
    edited = [dataclasses.replace(math[0], text=math[0].text + " twice"), *math[1:]]
    n = len(tok.calls)
    P.encode_catalogue(tok, edited, cache_dir=tmp_path)
    assert len(_encoded(tok, n)) == 4 and len(list(tmp_path.glob("prompts-*.json"))) == 2


def test_a_damaged_cache_file_is_rewritten(tmp_path):
    qa = P.load_catalogue(("qa",), per_category=2)
    first = P.encode_catalogue(FakeTokenizer(), qa, cache_dir=tmp_path)
    (path,) = tmp_path.glob("prompts-*.json")
    path.write_text("{not json")
    P._ENCODED.clear()
    assert P.encode_catalogue(FakeTokenizer(), qa, cache_dir=tmp_path) == first
    assert path.read_text().startswith("{\"")


def test_a_pair_gets_the_catalogue_pre_tokenized_once_and_a_pair_without_tokenizer_none():
    pair = types.SimpleNamespace(tokenizer=FakeTokenizer())
    assert P.pair_catalogue(types.SimpleNamespace(tokenizer=None)) is None
    rag = P.pair_catalogue(pair, ("rag",), per_category=5)
    assert [p.kind for p, _ in rag] == ["rag"] * 5 and all(ids for _, ids in rag)
    n = len(pair.tokenizer.calls)
    summ = P.pair_catalogue(pair, ("summarization",))
    assert len(summ) >= 20 and _encoded(pair.tokenizer, n) == []  # the whole catalogue was encoded the first time


def test_toy_pieces_byte_tokenizer_encodes_the_whole_catalogue_inside_its_vocabulary():
    from harness.pairs import get_pair

    pair = get_pair("toy-pieces")
    rows = P.pair_catalogue(pair)
    assert len(rows) == len(P.load_catalogue())
    assert all(ids and max(ids) < pair.vocab_size for _, ids in rows)
