"""Prompts of the real-model pairs: the policy's prompt set (suites/prompts/prompts.jsonl, read through
harness.policy) as `Prompt`s, and their token ids; the bench's catalogue by category
(suites/prompts/bench.jsonl), encoded once per tokenizer (`encode_catalogue`).

Kept free of torch imports: listing prompts must stay cheap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.policy import catalogue

PROMPT_KINDS = ("chat", "qa", "code", "summarize", "rewrite")
PROMPT_SET = "suites/prompts/prompts.jsonl"  # what load_prompts reads (a pair's meta["prompt_set"])


@dataclasses.dataclass(frozen=True)
class Prompt:
    id: str  # stable name, e.g. "code-fizzbuzz"
    kind: str  # one of PROMPT_KINDS
    text: str  # the user message


def load_prompts(kind: str | None = None) -> list[Prompt]:
    """All prompts in file order, or only those of `kind`."""
    if kind is not None and kind not in PROMPT_KINDS:
        raise HarnessError(f"unknown prompt kind {kind!r}; known: {', '.join(PROMPT_KINDS)}")
    text = catalogue("prompts").text()
    prompts = [Prompt(**json.loads(line)) for line in text.splitlines() if line.strip()]
    return [p for p in prompts if kind is None or p.kind == kind]


def encode_prompts(tokenizer: Any, prompts: list[Prompt], *, chat: bool = True) -> list[list[int]]:
    """Token ids of each prompt: one user turn plus the assistant header when the tokenizer has a chat
    template (and `chat`), else the plain text with the tokenizer's usual special tokens."""
    templated = chat and getattr(tokenizer, "chat_template", None)
    ids = []
    for p in prompts:
        if templated:
            text = tokenizer.apply_chat_template([{"role": "user", "content": p.text}],
                                                 add_generation_prompt=True, tokenize=False)
            # The template already wrote the special tokens; encoding must not add a second BOS.
            ids.append(list(tokenizer(text, add_special_tokens=False).input_ids))
        else:
            ids.append(list(tokenizer(p.text).input_ids))
    return ids


# ------------------------------------------------------------------------------------------ the bench catalogue

_ENCODED: dict[str, dict[str, list[int]]] = {}  # encode_catalogue's memory: key -> {prompt id: token ids}


def load_catalogue(categories: tuple[str, ...] | None = None, per_category: int | None = None) -> list[Prompt]:
    """The bench's prompt catalogue by category (suites/prompts/bench.jsonl, read through the policy's
    suites.http_bench) as `Prompt`s whose `kind` is the category: every category when none is named (those sent over
    HTTP by default are the policy's choice, not this one's)."""
    from harness.policy import load

    http_bench = load("http_bench")
    return [Prompt(r["id"], r["category"], r["text"])
            for r in http_bench.catalogue(categories or tuple(http_bench.CATEGORIES), per_category)]


def tokenizer_key(tokenizer: Any) -> str:
    """A name for what a tokenizer does: its class, name, size, chat template and the ids of a probe text
    (two tokenizers that encode the probe alike and share the rest are taken to be the same)."""
    probe = "Speculative decoding: 12 × 3 = 36, naïve café.\n  def f(x):"
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    parts = [type(tokenizer).__name__, str(getattr(tokenizer, "name_or_path", "")), str(size),
             str(getattr(tokenizer, "chat_template", None)), json.dumps(list(tokenizer(probe).input_ids))]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def encode_catalogue(tokenizer: Any, prompts: list[Prompt] | None = None, *, chat: bool = False,
                     cache_dir: str | Path | None = None) -> dict[str, list[int]]:
    """{prompt id: token ids} of the catalogue (default: all of suites/prompts/bench.jsonl), encoded once per
    tokenizer: kept in memory for the process and, with `cache_dir`, in cache_dir/prompts-KEY.json for later
    processes. KEY covers the tokenizer (`tokenizer_key`), the prompts' ids and texts and `chat`, so an edited
    catalogue or another tokenizer is encoded afresh. `chat=False` (the default) encodes the plain text, as a
    server's /v1/completions receives it; `chat=True` wraps it as one user turn (`encode_prompts`)."""
    prompts = load_catalogue() if prompts is None else prompts
    body = json.dumps([[p.id, p.text] for p in prompts])
    key = hashlib.sha256(f"{tokenizer_key(tokenizer)}\0{int(chat)}\0{body}".encode()).hexdigest()[:20]
    if key in _ENCODED:
        return {k: list(v) for k, v in _ENCODED[key].items()}
    path = Path(cache_dir) / f"prompts-{key}.json" if cache_dir is not None else None
    encoded = None
    if path is not None and path.is_file():
        try:
            encoded = {str(k): [int(t) for t in v] for k, v in json.loads(path.read_text()).items()}
        except (ValueError, TypeError, AttributeError):
            encoded = None  # a damaged cache file is rewritten below
        if encoded is not None and set(encoded) != {p.id for p in prompts}:
            encoded = None
    if encoded is None:
        encoded = dict(zip((p.id for p in prompts), encode_prompts(tokenizer, prompts, chat=chat), strict=True))
        if path is not None:
            from harness.records import atomic_write_text

            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(encoded))
    _ENCODED[key] = encoded
    return {k: list(v) for k, v in encoded.items()}


def pair_catalogue(pair: Any, categories: tuple[str, ...] | None = None, per_category: int | None = None,
                   *, cache_dir: str | Path | None = None) -> list[tuple[Prompt, list[int]]] | None:
    """The catalogue pre-tokenized for `pair`: [(prompt, token ids)] in file order, encoded once per tokenizer
    (`encode_catalogue`); None for a pair without a tokenizer (its token ids are no text)."""
    tokenizer = getattr(pair, "tokenizer", None)
    if tokenizer is None:
        return None
    chosen = load_catalogue(categories, per_category)
    encoded = encode_catalogue(tokenizer, load_catalogue(), cache_dir=cache_dir)  # one entry per tokenizer
    return [(p, encoded[p.id]) for p in chosen]
