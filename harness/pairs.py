"""Registry of model pairs (target p, draft q) that verification and benchmarks run on.

A pair is named on the command line (`--pair NAME`) or built from two checkpoints
(`--target NAME_OR_PATH --draft NAME_OR_PATH`). Factories register themselves with
`@register_pair`; `get_pair` builds one, `list_pairs` says which are available here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from harness.errors import HarnessError, UnknownNameError


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


@dataclasses.dataclass(frozen=True)
class PairSpec:
    name: str
    factory: Callable[..., ModelPair]  # factory(device=..., dtype=..., **options) -> ModelPair
    description: str
    available: Callable[[], tuple[bool, str]]  # -> (available here?, why not / how to install)
    tags: tuple[str, ...] = ()


_REGISTRY: dict[str, PairSpec] = {}
_BUILTINS_LOADED = False


def _always() -> tuple[bool, str]:
    return True, ""


def register_pair(name: str, description: str, available: Callable[[], tuple[bool, str]] = _always,
                  tags: tuple[str, ...] = ()):
    """Decorator: register `factory(device, dtype, **options) -> ModelPair` under `name`."""

    def deco(factory):
        if name in _REGISTRY:
            raise ValueError(f"pair {name!r} registered twice")
        _REGISTRY[name] = PairSpec(name, factory, description, available, tags)
        return factory

    return deco


def _load_builtin_pairs() -> None:
    # Imported lazily so that `import harness.pairs` stays light; each module registers on import.
    import harness.models.smollm2  # noqa: F401  (the wheel itself is checked by each pair's `available`)
    import harness.models.toy_pairs  # noqa: F401


def pair_specs() -> dict[str, PairSpec]:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:  # a flag, not "registry empty": importing one pair module first must not hide the rest
        _load_builtin_pairs()
        _BUILTINS_LOADED = True
    return dict(_REGISTRY)


def list_pairs() -> list[dict]:
    """Rows for `specdec pairs`: name, description, available, why-not."""
    rows = []
    for spec in pair_specs().values():
        ok, why = spec.available()
        rows.append({"name": spec.name, "description": spec.description, "available": ok, "note": why,
                     "tags": list(spec.tags)})
    return rows


def get_pair(name: str, *, device: str = "cpu", dtype: Any = None, **options) -> ModelPair:
    """Build the registered pair `name`; unknown names get a "Did you mean" error."""
    specs = pair_specs()
    if name not in specs:
        raise UnknownNameError("pair", name, list(specs))
    spec = specs[name]
    ok, why = spec.available()
    if not ok:
        raise HarnessError(f"pair {name!r} is not available here: {why}")
    return spec.factory(device=device, dtype=dtype, **options)
