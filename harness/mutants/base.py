"""What a zoo entry is: `Implementation`, and the `register` decorator that declares one.

This module imports nothing of the zoo: the mutant modules depend on it, and the catalogue
(harness.mutants.registry) depends on them — an acyclic graph; declaring an implementation has
no side effect beyond marking the function.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

CONTRACTS = ("sampler", "generation", "tree", "draft_step")  # the contract an entry implements: sampler: §1a verify;
# generation: §1b generate; tree: docs/CONTRACT-tree.md; draft_step: the implementation draws its own drafts
# (specdec_ref/draft_step.py)
KINDS = ("mutant", "equivalent", "wasteful", "control")


@dataclasses.dataclass(frozen=True)
class Implementation:
    """One named implementation of the §1a or §1b contract, with what it models."""

    name: str  # unique across contracts, e.g. "residual_from_p"
    contract: str  # CONTRACTS: "sampler" (§1a verify) | "generation" (§1b generate) | "tree" | "draft_step"
    fn: Callable  # the contract callable itself
    kind: str  # "mutant" | "equivalent" | "wasteful" | "control"
    models: str  # the BUGS.md row (public record) or failure mode it stands for
    description: str  # one line: what the implementation does differently
    # exact_law(p [γ+1, V], q [γ, V]) -> [V]: law of the first emitted token of one row (None: not analytic).
    # Rows may sum to < 1 when some mass leaves the vocabulary (an out-of-range id).
    exact_law: Callable | None = None
    # position_laws(p, q) -> [γ+1, V]: law of the token emitted at position j given that j is reached.
    position_laws: Callable | None = None
    # exact_acceptance(p, q) -> [γ]: P(draft j accepted | position j reached).
    exact_acceptance: Callable | None = None
    needs: tuple[str, ...] = ()  # what a test needs to be able to catch it (mutants), or run it (controls)
    pair: str | None = None  # generation entries: the registered pair that meets `needs` (None: any toy pair)
    # sampler entries: opt-in cases (suites/catalogues/sampler.py OPT_IN_CASES) its check adds to the default plan,
    # the only cases that can see it (the deep-tail probes for RNG-resolution bugs)
    cases: tuple[str, ...] = ()

    @property
    def spec(self) -> str:
        """`MODULE:CALLABLE`, as `specdec verify --impl` takes it."""
        return f"{self.fn.__module__}:{self.fn.__qualname__}"

    @property
    def must_pass(self) -> bool:
        """True for everything a correct harness must accept as lossless."""
        return self.kind != "mutant"


def declare(fn: Callable, name: str | None = None, *, contract: str, kind: str, models: str,
            description: str | None = None, position_laws: Callable | None = None, exact_law: Callable | None = None,
            exact_acceptance: Callable | None = None, needs: tuple[str, ...] = (),
            pair: str | None = None, cases: tuple[str, ...] = ()) -> Implementation:
    """The zoo entry for `fn` under `name` (default: its __name__). Assign it to a module-level name of a
    catalogue module (for a callable defined elsewhere, e.g. the reference), or use `register`.

    `description` defaults to the docstring's first paragraph. Give `position_laws` (per-position
    conditional laws) and the first-token `exact_law` is derived from it.
    """
    if contract not in CONTRACTS:
        raise ValueError(f"contract must be one of {CONTRACTS}, got {contract!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    key = name or fn.__name__
    doc = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())  # first paragraph, one line
    first_token = exact_law
    if first_token is None and position_laws is not None:
        first_token = _first_row(position_laws)
    return Implementation(name=key, contract=contract, fn=fn, kind=kind, models=models, description=description or doc or key,
                          exact_law=first_token, position_laws=position_laws, exact_acceptance=exact_acceptance,
                          needs=tuple(needs), pair=pair, cases=tuple(cases))


def register(name: str | None = None, **fields):
    """Decorator: declare the decorated function as a zoo entry (`declare`'s fields); the catalogue of
    harness.mutants.registry collects the declarations of the modules it lists."""
    if fields.get("contract") not in CONTRACTS:
        raise ValueError(f"contract must be one of {CONTRACTS}, got {fields.get('contract')!r}")
    if fields.get("kind") not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {fields.get('kind')!r}")

    def deco(fn: Callable) -> Callable:
        fn.specdec_implementation = declare(fn, name, **fields)
        return fn

    return deco


def _first_row(position_laws: Callable) -> Callable:
    def exact_law(p, q):
        return position_laws(p, q)[0]

    return exact_law
