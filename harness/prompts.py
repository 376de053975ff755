"""Prompts of the real-model pairs: the policy's prompt set (suites/prompts/prompts.jsonl, read through
harness.policy) as `Prompt`s, and their token ids.

Kept free of torch imports: listing prompts must stay cheap.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from harness.errors import HarnessError
from harness.policy import catalogue

PROMPT_KINDS = ("chat", "qa", "code", "summarize", "rewrite")


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
