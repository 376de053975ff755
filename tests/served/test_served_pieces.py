"""harness.served.pieces: token ids from llama-cpp-python's text pieces, and the coarsened law it is scored under.

- the piece table (byte-level BPE bytes, special tokens as nothing, classes of ids sharing a piece);
- rows cut at their first shared piece, a dropped BOS refused (exit 2), an unknown piece refused;
- the client: one request per continuation with seed + i, the prompt's ids sent as checked text;
- the statistics: rows cut at a shared piece and scored under the coarsened law keep the PIT uniform
  (measured false-alarm rate), while scoring the same rows without coarsening, or dropping the rows that
  hold a shared piece, is rejected (the biases the rule exists to avoid).
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import torch

from harness.check.exact_laws import coarsen
from harness.check.pit import pit_tests, pit_values
from harness.check.settings import Setting
from harness.errors import HarnessError
from harness.served.pieces import SHARED_PIECE, PiecesClient, PieceTable, UnresolvedPieces, ids_from_pieces


class FakeByteLevelTokenizer:
    """Byte-level BPE ids: 0 a special token, then ASCII words, a space with a stray byte, two byte tokens."""

    tokens = ["<|im_end|>", "red", "Ġapple", ",", "Ġ", "Ġâ", "æĹ", "¥", "Ġpear"]  # Ġ = space, â = 0xE2

    def __len__(self):
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids):
        return [self.tokens[i] for i in ids]

    all_special_ids = [0]
    added_tokens_decoder: dict = {}

    def decode(self, ids, skip_special_tokens=False):
        return b"".join(PieceTable.from_tokenizer(self).token_bytes[i] for i in ids).decode("utf-8", "ignore")


def test_the_table_renders_bytes_as_llama_cpp_and_groups_ids_sharing_a_piece():
    table = PieceTable.from_tokenizer(FakeByteLevelTokenizer())
    assert table.token_bytes[:6] == [b"", b"red", b" apple", b",", b" ", b" \xe2"]
    assert table.token_bytes[6:8] == [b"\xe6\x97", b"\xa5"]  # 日 = e6 97 a5, split in two byte tokens
    assert table.by_piece[" "] == [4, 5]  # " \xe2" decodes (errors ignored) to " " as well
    assert table.by_piece[""] == [0, 6, 7]  # the special token and the two byte tokens render as ""
    assert table.classes.tolist() == [0, 1, 2, 3, 4, 4, 0, 0, 8]
    assert table.ambiguous() == 5


def test_a_row_ends_at_its_first_shared_piece_on_its_class_representative():
    table = PieceTable.from_tokenizer(FakeByteLevelTokenizer())
    assert ids_from_pieces(["red", " apple", ",", " pear"], table, 4) == ([1, 2, 3, 8], False)
    assert ids_from_pieces(["red", " ", "", " pear"], table, 4) == ([1, 4], True)  # cut: the rest is not read
    assert ids_from_pieces(["", "red"], table) == ([0], True)
    with pytest.raises(UnresolvedPieces, match="BOS"):
        ids_from_pieces(["red", " apple"], table, 3)  # the server left a generated token out of its pieces
    with pytest.raises(UnresolvedPieces, match="no token of the local tokenizer"):
        ids_from_pieces(["red", "apple!"], table)
    assert isinstance(UnresolvedPieces("x"), HarnessError)  # exit 2: the run cannot be done


@pytest.mark.end_to_end
def test_the_real_tokenizer_table_matches_its_own_decoding():
    from harness.models.smollm2 import smollm2_available

    ok, why = smollm2_available()
    if not ok:
        pytest.skip(why)
    from harness.check.api import load_pair

    tokenizer = load_pair("smollm2").tokenizer
    table = PieceTable.from_tokenizer(tokenizer)
    assert len(table.token_bytes) == len(tokenizer) == 49_152
    assert table.ambiguous() == 380  # SmolLM2: 338 ids render as "" (47 of them longer than 32 bytes), 38 as " ", two pairs of letters
    assert PieceTable.from_tokenizer(tokenizer, max_piece_bytes=None).ambiguous() == 333
    text = "Hello world, naïve café 🐱 3.14!"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert b"".join(table.token_bytes[i] for i in ids).decode() == text
    full = PieceTable.from_tokenizer(tokenizer, max_piece_bytes=None)
    assert sum(len(b) > 32 for b in full.token_bytes) == 47 and all(len(b) <= 32 for b in table.token_bytes)
    for i in range(0, len(tokenizer), 97):  # every 97th id: the bytes decode as the tokenizer decodes them
        if table.token_bytes[i]:
            assert table.token_bytes[i].decode("utf-8", "replace") == tokenizer.decode([i]), i


def _fake_server(record: list, pieces_of):
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        record.append((request.url.path, body))
        if request.url.path == "/extras/tokenize":
            return httpx.Response(200, json={"tokens": [1, 2]})
        pieces = pieces_of(body)
        return httpx.Response(200, json={"choices": [{"text": "".join(pieces), "finish_reason": "length",
                                                      "logprobs": {"tokens": pieces}}],
                                         "usage": {"completion_tokens": len(pieces)}})
    return handler


def test_the_client_sends_one_seeded_request_per_continuation_and_returns_ids():
    record: list = []
    pieces = {10: ["red", " apple"], 11: ["red", " ", "red"], 12: [",", " pear"]}
    client = PiecesClient("http://fake/v1", transport=httpx.MockTransport(_fake_server(record, lambda b: pieces[b["seed"]])))
    with pytest.raises(HarnessError, match="--pair"):
        client.post("/v1/completions", {"prompt": "x", "n": 1})  # no tokenizer attached yet
    client.attach(FakeByteLevelTokenizer())
    reply = client.post("/v1/completions", {"model": "m", "prompt": [1, 2], "n": 3, "seed": 10, "max_tokens": 2,
                                            "return_token_ids": True, "temperature": 1.0})
    assert [c["token_ids"] for c in reply["choices"]] == [[1, 2], [1, 4], [3, 8]]
    assert [c["finish_reason"] for c in reply["choices"]] == ["length", SHARED_PIECE, "length"]
    sent = [b for path, b in record if path == "/v1/completions"]
    assert [b["seed"] for b in sent] == [10, 11, 12] and all(b["logprobs"] == 0 and "n" not in b for b in sent)
    assert all(b["prompt"] == "red apple" and "return_token_ids" not in b for b in sent)  # ids sent as their text
    assert [path for path, _ in record].count("/extras/tokenize") == 1  # the prompt's text checked once
    with pytest.raises(HarnessError, match="top logprobs"):
        client.post("/v1/completions", {"prompt": "x", "logprobs": 5})
    assert client.classes.tolist() == PieceTable.from_tokenizer(FakeByteLevelTokenizer()).classes.tolist()


def test_a_prompt_the_server_tokenizes_otherwise_is_refused():
    record: list = []
    client = PiecesClient("http://fake", transport=httpx.MockTransport(_fake_server(record, lambda b: ["red"])))
    client.attach(FakeByteLevelTokenizer())
    with pytest.raises(HarnessError, match="tokenizes the prompt"):
        client.post("/v1/completions", {"prompt": [3, 8], "n": 1, "seed": 0})  # the fake tokenizes into [1, 2]


# ------------------------------------------------------------------------------- the coarsened law, measured

CLASSES_OF_TOY = ((0, 1, 2), (5, 7))  # ids merged into one class each (the toy target puts mass on all of them)


def _toy():
    from harness.check.exact_laws import target64
    from harness.pairs import get_pair

    pair = get_pair("toy")
    return pair, target64(pair)


def _rows(pair, n: int, length: int, seed: int):
    from specdec_ref.adapters import cache_strategy
    from specdec_ref.generate import autoregressive_generate

    prompt = list(pair.prompts[0])
    ids = torch.tensor([prompt] * n)  # one batched pass per token (the toy is tiny): the same law as per-row caches
    out = autoregressive_generate(pair.target, ids, max_new_tokens=length, temperature=1.0, seed=seed,
                                  cache=cache_strategy(ids, length, pair.target))
    return prompt, out.tokens.tolist()


def _classes(vocab: int) -> torch.Tensor:
    classes = torch.arange(vocab)
    for members in CLASSES_OF_TOY:
        classes[list(members)] = members[0]
    return classes


def _cut(rows, classes):
    out = []
    for r in rows:
        kept = []
        for t in r:
            if t < 0:
                break
            kept.append(int(classes[t]))
            if int((classes == classes[t]).sum()) > 1:  # the client's rule: a shared piece ends the row
                break
        out.append(kept)
    return out


def _pooled_p(model, prompt, rows, vocab, classes, seed):
    width = max(map(len, rows))
    tokens = torch.tensor([r + [-1] * (width - len(r)) for r in rows])
    rng = np.random.default_rng(seed)
    u, pos, seq, off = pit_values(model, prompt, tokens, Setting(1.0), vocab, rng, classes=classes)
    tests = pit_tests(u, pos, seq, off, 1e-3, 0.99, "t")
    return next(t for t in tests if t.name == "t/pit_uniform").p_value, off


def test_coarsen_moves_each_class_mass_onto_its_representative():
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    assert coarsen(probs, torch.tensor([0, 0, 2]))[0].tolist() == pytest.approx([0.3, 0.0, 0.3, 0.4])  # id 3: itself
    assert coarsen(probs, None) is probs


@pytest.mark.stochastic(false_alarm=0.001, seed=1)  # the correct scoring's p > 1e-3 (the shortcuts' p < 1e-6: gross errors, not counted)
def test_cut_rows_scored_under_the_coarsened_law_are_uniform_and_the_two_shortcuts_are_rejected():
    pair, model = _toy()
    vocab, classes = pair.vocab_size, _classes(pair.vocab_size)
    prompt, rows = _rows(pair, 3000, 6, seed=1)
    cut = _cut(rows, classes)
    assert sum(len(r) < 6 for r in cut) > 300  # the classes carry real mass: many rows end on one
    p, off = _pooled_p(model, prompt, cut, vocab, classes, 0)
    assert p > 1e-3 and off == 0
    # shortcut 1: the same cut rows scored as if the representative were the token (no coarsening)
    p_plain, _ = _pooled_p(model, prompt, cut, vocab, None, 0)
    assert p_plain < 1e-6
    # shortcut 2: the rows holding a shared token dropped, the others scored as they are
    members = {t for m in CLASSES_OF_TOY for t in m}
    kept = [[t for t in r if t >= 0] for r in rows if not members & set(r)]
    p_drop, _ = _pooled_p(model, prompt, kept, vocab, None, 0)
    assert p_drop < 1e-6


@pytest.mark.stochastic(false_alarm=0.003, seed='100..119')  # P(Binomial(20, 0.05) > 4)
def test_the_coarsened_pit_false_alarm_rate_is_at_its_level():
    """20 independent runs of 600 rows at rate 0.05: the number rejected is what a correct test gives."""
    pair, model = _toy()
    vocab, classes = pair.vocab_size, _classes(pair.vocab_size)
    rejected = 0
    for run in range(20):
        prompt, rows = _rows(pair, 600, 6, seed=100 + run)
        p, _ = _pooled_p(model, prompt, _cut(rows, classes), vocab, classes, run)
        rejected += p <= 0.05
    assert rejected <= 4  # Binomial(20, 0.05): P(more than 4) < 0.003


def test_the_table_equals_llama_cpps_own_pieces_for_every_id():
    """What the server reports: `detokenize([id])` of llama.cpp itself (needs llama-cpp-python: nox -s engines)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from harness.check.api import load_pair
    from harness.models.smollm2 import gguf_path

    table = PieceTable.from_tokenizer(load_pair("smollm2").tokenizer)
    llama = llama_cpp.Llama(model_path=str(gguf_path()), vocab_only=True, verbose=False)
    differ = [i for i in range(len(table.token_bytes)) if llama.detokenize([i]) != table.token_bytes[i]]
    assert differ == []


def test_greedy_rows_and_the_format_check_read_a_cut_row_as_far_as_it_is_known():
    from harness.served.draws import format_result
    from harness.served.greedy import compared_up_to_classes

    classes = PieceTable.from_tokenizer(FakeByteLevelTokenizer()).classes
    # the engine's row was cut at its shared piece (4, class of {4, 5}); the local greedy row has 5 there
    assert compared_up_to_classes([1, 5, 8], [1, 4], None, SHARED_PIECE, classes) == ([1, 4], [1, 4])
    assert compared_up_to_classes([1, 2, 8], [1, 4], None, SHARED_PIECE, classes) == ([1, 2], [1, 4])  # a divergence
    assert compared_up_to_classes([1, 2], [1, 3], None, "length", classes) == ([1, 2], [1, 3])
    ok = format_result("c", [[1, 4], [1, 2, 3]], [SHARED_PIECE, "length"], 3, None)
    bad = format_result("c", [[1, 4], [1, 2, 3]], ["length", "length"], 3, None)
    assert ok.p_value == 1.0 and bad.p_value == 0.0


def test_a_dropped_bos_from_a_served_reply_is_a_run_that_cannot_be_done():
    """The server's usage counts a token its pieces leave out: UnresolvedPieces (a HarnessError: exit 2), never rows."""
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"text": "red", "finish_reason": "length",
                                                      "logprobs": {"tokens": ["red"]}}],
                                         "usage": {"completion_tokens": 2}})
    client = PiecesClient("http://fake", transport=httpx.MockTransport(handler))
    client.attach(FakeByteLevelTokenizer())
    with pytest.raises(UnresolvedPieces, match="BOS"):
        client.post("/v1/completions", {"prompt": "x", "n": 1, "seed": 0})


# ------------------------------------------------------------- specdec serve --dialect llama-cpp-python

def _openai_row(url: str, prompt: list[int], seed: int) -> list[int]:
    reply = httpx.post(f"{url}/v1/completions", json={"model": "toy-pieces", "prompt": prompt, "max_tokens": 12,
                                                      "seed": seed, "temperature": 1.0, "return_token_ids": True})
    return reply.json()["choices"][0]["token_ids"]


@pytest.mark.end_to_end
def test_the_dialect_read_back_gives_the_served_ids_cut_at_their_first_shared_piece():
    """The same generate() and seed behind both dialects: the ids PiecesClient recovers from the text pieces are
    the ids the openai dialect returns, cut at their first shared piece, which holds its class's representative."""
    from harness.models.toy_pairs import pieces_tokenizer
    from harness.pairs import get_pair
    from harness.served.serve import serving
    from specdec_ref.adapters import generate

    pair, tokenizer = get_pair("toy-pieces"), pieces_tokenizer()
    table = PieceTable.from_tokenizer(tokenizer)
    assert table.ambiguous() == 5 and table.classes.tolist()[10:14] == [0, 11, 11, 11]
    prompt = pair.prompts[0]
    with serving(generate, pair) as plain, serving(generate, pair, dialect="llama-cpp-python") as pieces:
        client = PiecesClient(f"{pieces.url}/v1")
        client.attach(tokenizer)
        cuts = 0
        for seed in range(24):
            full = _openai_row(plain.url, prompt, seed)
            reply = client.post("/v1/completions", {"model": "toy-pieces", "prompt": prompt, "max_tokens": 12,
                                                    "seed": seed, "temperature": 1.0, "n": 1})
            (choice,) = reply["choices"]
            want, cut = [], False
            for t in full:
                want.append(int(table.classes[t]))
                if len(table.by_piece[table.token_bytes[t].decode("utf-8", "ignore")]) > 1:
                    cut = True
                    break
            assert choice["token_ids"] == want, seed
            assert (choice["finish_reason"] == SHARED_PIECE) == cut
            cuts += cut
        assert 0 < cuts < 24  # both kinds of row were read
        for body, why in (({"prompt": prompt}, "string"), ({"prompt": "abc", "n": 2}, "n must be")):
            refused = httpx.post(f"{pieces.url}/v1/completions", json={"model": "toy-pieces", "max_tokens": 2, **body})
            assert refused.status_code == 400 and why in refused.json()["error"]["message"]
        assert httpx.post(f"{pieces.url}/tokenize", json={"prompt": "abc"}).status_code == 404
        assert httpx.post(f"{pieces.url}/extras/tokenize", json={"input": "abc"}).json() == {"tokens": [0, 1, 2]}


def test_the_dialect_needs_a_pair_with_a_real_tokenizer():
    from harness.pairs import get_pair
    from harness.served.serve import GenerationBackend
    from specdec_ref.adapters import generate

    with pytest.raises(HarnessError, match="own tokenizer"):
        GenerationBackend(generate, get_pair("toy"), dialect="llama-cpp-python")
