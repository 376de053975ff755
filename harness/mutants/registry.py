"""Registry of the mutant zoo and the correct controls.

Every entry is an `Implementation`: a callable with a contract signature (docs/CONTRACT.md §1a
`verify` or §1b `generate`), a kind that says what a correct harness must conclude about it, and the
real bug class (docs/BUGS.md) or failure mode it models:

- `mutant`: lossy; a harness that passes it has missed a real bug;
- `equivalent`: a code change that cannot alter the output law; must pass, and is excluded from power claims;
- `wasteful`: lossless but with acceptance below Σ min(p, q); must pass, and be reported as wasteful;
- `control`: an independent correct formulation; must pass (a failure is a false alarm).

Sampler-level entries may carry exact laws (`harness.mutants.laws`), so power can be planned from
the exact total variation instead of simulation.
"""

from __future__ import annotations

import functools
import importlib

from harness.errors import HarnessError, UnknownNameError
from harness.mutants.base import CONTRACTS, KINDS, Implementation, register

__all__ = ["CATALOGUE", "CONTRACTS", "KINDS", "Implementation", "get", "implementations", "register"]

# The modules whose `@register`-declared implementations make up the zoo, in report order.
CATALOGUE = ("harness.mutants.batched", "harness.mutants.controls", "harness.mutants.generation",
             "harness.mutants.sampler", "harness.mutants.tree", "harness.mutants.families",
             "harness.mutants.structured", "harness.mutants.architectures")


@functools.cache
def _catalogue() -> dict[str, Implementation]:
    entries: dict[str, Implementation] = {}
    for module in CATALOGUE:
        for value in vars(importlib.import_module(module)).values():
            # declared here: an Implementation (`declare`) or a function of this module marked by `register`
            impl = value if isinstance(value, Implementation) else getattr(value, "specdec_implementation", None)
            if impl is None or (impl is not value and getattr(value, "__module__", None) != module):
                continue
            if impl.name in entries:
                raise ValueError(f"implementation {impl.name!r} declared twice")
            entries[impl.name] = impl
    return entries


def implementations(kind: str | None = None, contract: str | None = None) -> list[Implementation]:
    """Registered implementations, in registration order, optionally filtered by kind and contract."""
    if kind is not None and kind not in KINDS:
        raise HarnessError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if contract is not None and contract not in CONTRACTS:
        raise HarnessError(f"contract must be one of {', '.join(CONTRACTS)}, got {contract!r}")
    return [impl for impl in _catalogue().values()
            if (kind is None or impl.kind == kind) and (contract is None or impl.contract == contract)]


def get(name: str) -> Implementation:
    """The implementation registered as `name`; UnknownNameError with close matches otherwise."""
    try:
        return _catalogue()[name]
    except KeyError:
        raise UnknownNameError("implementation", name, list(_catalogue())) from None
