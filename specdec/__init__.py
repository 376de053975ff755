"""specdec: prove that a speculative decoding implementation is lossless, and measure what it buys.

The public Python API. Everything a user imports comes from here (`harness` and `suites` are internal):

Run a check and read its report
    verify(impl, level=..., **fields) -> Report   one check at one level (sampler, generation, engine)
    CheckConfig                                    every setting of a sampler- or generation-level check
    EngineConfig                                   every setting of a check of a served engine (OpenAI API)
    Report                                         the result: .verdict ("pass" | "fail" | "inconclusive"),
                                                   .tests, .detectable_tv, .failure_summary(), .to_dict()

Assert in a test suite (also pytest fixtures of the same names, registered when specdec is installed)
    assert_lossless(verify)                        a chain verifier (contract §1a)
    assert_lossless_block(verify)                  a block verifier (same signature)
    assert_lossless_tree(tree_verify)              a tree verifier (CONTRACT-tree.md)
    assert_lossless_generation(generate, pair=)    a whole generate() (§1b)

Model pairs
    register_pair(name, description)               decorator: add your own target/draft pair
    ModelPair                                      what a pair factory returns

The contract types (typing Protocols of the signatures in docs/CONTRACT.md §1)
    VerifyFn, DraftAndVerifyFn, TreeVerifyFn, GenerateFn

Errors
    HarnessError                                   bad usage or input (the CLI's exit code 2)

Names load on first use, so `import specdec` does not import torch; `help(specdec.NAME)` documents each.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from specdec import _policy

_policy.install()  # the default policy (suites/) handed to the mechanism: issue 56, item 2

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors
    from harness.check.config import CheckConfig
    from harness.check.report import CheckReport as Report
    from harness.contracts import DraftAndVerifyFn, GenerateFn, TreeVerifyFn, VerifyFn
    from harness.errors import HarnessError
    from harness.models.pair import ModelPair
    from harness.pairs import register_pair
    from harness.served.config import EngineConfig
    from harness.testing import (
        assert_lossless,
        assert_lossless_block,
        assert_lossless_generation,
        assert_lossless_tree,
    )

__all__ = [
    "CheckConfig",
    "DraftAndVerifyFn",
    "EngineConfig",
    "GenerateFn",
    "HarnessError",
    "ModelPair",
    "Report",
    "TreeVerifyFn",
    "VerifyFn",
    "assert_lossless",
    "assert_lossless_block",
    "assert_lossless_generation",
    "assert_lossless_tree",
    "register_pair",
    "verify",
]

# public name -> (internal module, its name there); imported on first access (PEP 562)
_LAZY = {
    "CheckConfig": ("harness.check.config", "CheckConfig"),
    "EngineConfig": ("harness.served.config", "EngineConfig"),
    "Report": ("harness.check.report", "CheckReport"),
    "assert_lossless": ("harness.testing", "assert_lossless"),
    "assert_lossless_block": ("harness.testing", "assert_lossless_block"),
    "assert_lossless_tree": ("harness.testing", "assert_lossless_tree"),
    "assert_lossless_generation": ("harness.testing", "assert_lossless_generation"),
    "register_pair": ("harness.pairs", "register_pair"),
    "ModelPair": ("harness.models.pair", "ModelPair"),
    "VerifyFn": ("harness.contracts", "VerifyFn"),
    "DraftAndVerifyFn": ("harness.contracts", "DraftAndVerifyFn"),
    "TreeVerifyFn": ("harness.contracts", "TreeVerifyFn"),
    "GenerateFn": ("harness.contracts", "GenerateFn"),
    "HarnessError": ("harness.errors", "HarnessError"),
}


# Not cached in the module's namespace, so `dir(specdec)` holds the module's own names only and `help(specdec)` is
# the docstring above (every public name, one line each), `verify` and `__all__`: about 60 lines, not the full
# documentation of every class it would load (800 lines); `help(specdec.CheckConfig)` gives a class's.
def __getattr__(name: str) -> Any:
    """A public name, loaded on use (PEP 562): `import specdec` stays light."""
    if name not in _LAZY:
        raise AttributeError(f"module 'specdec' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    return getattr(importlib.import_module(module), attribute)


def _unknown_fields(cls, fields: dict) -> None:
    known = [f.name for f in dataclasses.fields(cls)]
    for name in fields:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise TypeError(f"verify() got {name!r}, which is not a field of {cls.__name__}.{hint}")


def verify(impl: Any = None, /, *, level: str | None = None, endpoint: str | None = None,
           progress: Callable[[int], None] | bool | None = None, **fields: Any) -> Report:
    """Run one losslessness check and return its Report (a FAIL is a report, never an exception).

    `impl` is the implementation under test, a callable or "MODULE:CALLABLE", or a whole CheckConfig /
    EngineConfig (then `fields` replace some of its fields). `level` is the tier: "sampler" (one
    verification step, the default), "generation" (a whole generate() on a model pair) or "engine" (a
    served engine at `endpoint`, an OpenAI-compatible URL). `fields` are CheckConfig fields (EngineConfig
    fields at the engine level), e.g. family="block", pair="toy", seed=1, tv=0.05, samples=2_000.

        report = verify(my_verify)                                     # sampler level, chain family
        report = verify(my_generate, level="generation", pair="toy")   # a whole generate()
        report = verify(endpoint="http://127.0.0.1:8000/v1", pair="smollm2")   # a served engine
        report.verdict   # "pass" | "fail" | "inconclusive"

    An implementation that raises, hangs (`timeout_s=`) or returns something that is not an output is not
    lossless: the report's verdict is "fail" and `failure_summary()` names what it did and where (file:line of
    its own code). Bad settings raise HarnessError before any work; an unknown field raises TypeError.
    Progress: by default (`progress=None`) one line on stderr, redrawn in place, while stderr is a terminal
    (nothing otherwise: a notebook, a log file): the phase (the sampler case; generation, context or greedy
    cells; the engine's law, API battery or logprobs cells), the plan's total and an ETA that weighs every
    step by its cost. `progress=False` prints nothing; a callable is called with the number of trials (at the
    engine level: replies) finished since its last call; a harness.progress.Progress also gets the plan.
    """
    from harness.check.config import CheckConfig
    from harness.check.raised import verify_reporting
    from harness.errors import HarnessError
    from harness.served.config import EngineConfig

    if isinstance(impl, (CheckConfig, EngineConfig)):
        config = impl
        if level is not None and level != config.level:
            raise HarnessError(f"level={level!r} contradicts the {type(config).__name__}'s level {config.level!r}")
        if endpoint is not None:
            fields["endpoint"] = endpoint
        _unknown_fields(type(config), fields)
        config = dataclasses.replace(config, **fields)
    elif level == "engine" or endpoint is not None:
        if level not in (None, "engine"):
            raise HarnessError(f"endpoint= is the engine level's; got level={level!r}")
        if impl is not None:
            raise HarnessError("the engine level checks a served engine at endpoint=URL, not an implementation")
        if endpoint is None:
            raise HarnessError("the engine level needs endpoint=URL (an OpenAI-compatible server, e.g. "
                               "http://127.0.0.1:8000/v1)")
        _unknown_fields(EngineConfig, fields)
        config = EngineConfig(endpoint=endpoint, **fields)
    else:
        _unknown_fields(CheckConfig, fields)
        config = CheckConfig(impl=impl, level=level or "sampler", **fields)
    from harness.progress import api_display

    with api_display(progress, config.level) as shown:
        return verify_reporting(config, progress=shown)
