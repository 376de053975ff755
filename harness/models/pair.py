"""The records of a model pair (no imports of other harness modules: pair providers and the registry
both depend on this file, never on each other)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


def always_available() -> tuple[bool, str]:
    return True, ""


@dataclasses.dataclass
class ModelPair:
    """A target/draft pair sharing one vocabulary."""

    name: str
    target: Any  # transformers PreTrainedModel (causal LM), the model whose law must be preserved
    draft: Any  # transformers PreTrainedModel (causal LM), proposes tokens
    vocab_size: int  # tokens both models may emit (tokenizer size; embedding padding is sliced off)
    description: str = ""
    tokenizer: Any = None  # None for toy pairs (token ids are the text)
    eos_token_id: int | None = None
    prompts: list[list[int]] | None = None  # default prompts as token ids
    meta: dict = dataclasses.field(default_factory=dict)  # e.g. analytic alpha, synthetic cost
    # meta["prompt_set"]: the text catalogue `prompts` encode (e.g. suites/prompts/prompts.jsonl); without it a
    # pair's prompts are taken for synthetic (random token ids) and the bench reports say so


@dataclasses.dataclass(frozen=True)
class PairSpec:
    name: str
    factory: Callable[..., ModelPair]  # factory(device=..., dtype=..., **options) -> ModelPair
    description: str
    available: Callable[[], tuple[bool, str]]  # -> (available here?, why not / how to install)
    tags: tuple[str, ...] = ()
