"""Registry of model pairs (target p, draft q) that verification and benchmarks run on.

A pair is named on the command line (`--pair NAME`) or built from two checkpoints
(`--target NAME_OR_PATH --draft NAME_OR_PATH`). Built-in pairs are declared by the modules in
`PROVIDERS` (each has a `PAIRS` list); users add their own with `@register_pair`. `get_pair` builds
one, `list_pairs` says which are available here.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from harness.errors import HarnessError, UnknownNameError
from harness.models.pair import ModelPair, PairSpec, always_available

__all__ = ["ModelPair", "PairSpec", "get_pair", "list_pairs", "pair_specs", "register_pair"]


# Modules that declare built-in pairs (a module-level `PAIRS: list[PairSpec]`), read on first use. They
# import only harness.models.pair, never this module: the catalogue is a declaration, not an import side effect.
PROVIDERS = ("harness.models.toy_pairs", "harness.models.smollm2")
# Modules of the installed policy (harness.policy, e.g. the default one's suites/) that declare pairs the same way: the tiny
# architecture pairs, one per cache family (suites/catalogues/architectures.py).
POLICY_PROVIDERS = ("catalogues.architectures",)
_USER: dict[str, PairSpec] = {}  # pairs users add with `register_pair`


def register_pair(name: str, description: str, available: Callable[[], tuple[bool, str]] = always_available,
                  tags: tuple[str, ...] = ()):
    """Decorator for users' own pairs: register `factory(device, dtype, **options) -> ModelPair` under `name`."""

    def deco(factory):
        if name in pair_specs():
            raise ValueError(f"pair {name!r} registered twice")
        _USER[name] = PairSpec(name, factory, description, available, tags)
        return factory

    return deco


@functools.cache
def _declared() -> dict[str, PairSpec]:
    from harness.policy import load

    specs: dict[str, PairSpec] = {}
    modules = [importlib.import_module(m) for m in PROVIDERS] + [load(m, "pair catalogue") for m in POLICY_PROVIDERS]
    for module in modules:
        for spec in module.PAIRS:
            if spec.name in specs:
                raise ValueError(f"pair {spec.name!r} declared twice")
            specs[spec.name] = spec
    return specs


def pair_specs() -> dict[str, PairSpec]:
    return {**_declared(), **_USER}


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
