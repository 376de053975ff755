"""Registry of the mutant zoo and the correct controls.

Every entry is an `Implementation`: a callable with a contract signature (shared/CONTRACT.md §1a
`verify` or §1b `generate`), a kind that says what a correct harness must conclude about it, and the
real bug class (shared/BUGS.md) or failure mode it models:

- `mutant`: lossy; a harness that passes it has missed a real bug;
- `equivalent`: a code change that cannot alter the output law; must pass, and is excluded from power claims;
- `wasteful`: lossless but with acceptance below Σ min(p, q); must pass, and be reported as wasteful;
- `control`: an independent correct formulation; must pass (a failure is a false alarm).

Sampler-level entries may carry exact laws (`harness.mutants.laws`), so power can be planned from
the exact total variation instead of simulation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from harness.errors import HarnessError, UnknownNameError

LEVELS = ("sampler", "generation")
KINDS = ("mutant", "equivalent", "wasteful", "control")


@dataclasses.dataclass(frozen=True)
class Implementation:
    """One named implementation of the §1a or §1b contract, with what it models."""

    name: str  # unique across levels, e.g. "residual_from_p"
    level: str  # "sampler" (§1a verify) | "generation" (§1b generate)
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
    pair: str | None = None  # generation level: the registered pair that meets `needs` (None: any toy pair)

    @property
    def spec(self) -> str:
        """`MODULE:CALLABLE`, as `specdec verify --impl` takes it."""
        return f"{self.fn.__module__}:{self.fn.__qualname__}"

    @property
    def must_pass(self) -> bool:
        """True for everything a correct harness must accept as lossless."""
        return self.kind != "mutant"


_REGISTRY: dict[str, Implementation] = {}


def register(name: str | None = None, *, level: str, kind: str, models: str, description: str | None = None,
             position_laws: Callable | None = None, exact_law: Callable | None = None,
             exact_acceptance: Callable | None = None, needs: tuple[str, ...] = (), pair: str | None = None):
    """Decorator: register `fn` under `name` (default: its __name__).

    `description` defaults to the docstring's first paragraph. Give `position_laws` (per-position
    conditional laws) and the first-token `exact_law` is derived from it.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")

    def deco(fn: Callable) -> Callable:
        key = name or fn.__name__
        if key in _REGISTRY:
            raise ValueError(f"implementation {key!r} registered twice")
        doc = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())  # first paragraph, one line
        first_token = exact_law
        if first_token is None and position_laws is not None:
            first_token = _first_row(position_laws)
        _REGISTRY[key] = Implementation(
            name=key, level=level, fn=fn, kind=kind, models=models,
            description=description or doc or key,
            exact_law=first_token, position_laws=position_laws, exact_acceptance=exact_acceptance,
            needs=tuple(needs), pair=pair,
        )
        return fn

    return deco


def _first_row(position_laws: Callable) -> Callable:
    def exact_law(p, q):
        return position_laws(p, q)[0]

    return exact_law


def _load_builtin() -> None:
    # Imported lazily: each module registers its implementations on import.
    import harness.mutants.batched  # noqa: F401
    import harness.mutants.controls  # noqa: F401
    import harness.mutants.generation  # noqa: F401
    import harness.mutants.sampler  # noqa: F401


def implementations(kind: str | None = None, level: str | None = None) -> list[Implementation]:
    """Registered implementations, in registration order, optionally filtered by kind and level."""
    if kind is not None and kind not in KINDS:
        raise HarnessError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if level is not None and level not in LEVELS:
        raise HarnessError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    _load_builtin()
    return [impl for impl in _REGISTRY.values()
            if (kind is None or impl.kind == kind) and (level is None or impl.level == level)]


def get(name: str) -> Implementation:
    """The implementation registered as `name`; UnknownNameError with close matches otherwise."""
    _load_builtin()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownNameError("implementation", name, list(_REGISTRY)) from None
