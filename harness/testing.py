"""`assert_lossless` for users' own test suites (also exposed as pytest fixtures by the plugin). Users import
these from the public API, `specdec`:

    from specdec import assert_lossless, assert_lossless_block, assert_lossless_generation, assert_lossless_tree
    def test_my_sampler_is_lossless():
        assert_lossless(my_verify)                          # sampler level, chain family (contract §1a)
        assert_lossless_block(my_block_verify)              # block verification, same signature
        assert_lossless_tree(my_tree_verify)                # one step over a token tree (CONTRACT-tree.md)
        assert_lossless_generation(my_generate, pair="toy") # generation level (§1b)

Each call runs the same battery as `specdec verify` and raises AssertionError with the failure summary
and the rejected tests (name, statistic, p-value) unless the verdict is PASS: an INCONCLUSIVE run (a plan
too small to see a useful error) fails too, saying so. An implementation that raises, hangs or returns no
output fails the same way: the AssertionError names what it did and where (file:line of its own code).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from harness.check.config import DEFAULT_FALSE_ALARM_RATE, DEFAULT_GAMMA, DEFAULT_POWER


def _check(config):
    """The report of `config`'s check; AssertionError unless it passed."""
    __tracebackhide__ = True  # pytest shows the user's call, not these frames
    from harness.check.raised import verify_reporting

    report = verify_reporting(config)
    _raise_unless_passed(report)
    return report


def inconclusive_line(report) -> str:
    """Why a non-failing run is INCONCLUSIVE, in words (never "inf": too few draws to promise any TV)."""
    tv = report.detectable_tv
    if math.isinf(tv):
        return (f"too few samples ({report.samples:,} in all) for any test to detect even the largest discrepancy "
                f"at power {report.power:g}")
    return (f"achieved detectable TV {tv:.3g} is above the ceiling {report.inconclusive_tv:g}: this run could not "
            "have seen a useful error")


def _raise_unless_passed(report) -> None:
    __tracebackhide__ = True
    if report.verdict == "pass":
        return
    if report.verdict == "inconclusive":
        raise AssertionError(f"{report.impl}: INCONCLUSIVE ({report.level} level): {inconclusive_line(report)}; "
                             "give more samples (or leave them to the plan)")
    from harness.check.raised import ImplementationFailure

    if isinstance(report, ImplementationFailure):  # it raised, hung or returned no output: that one line says so
        raise AssertionError(f"{report.impl} is not lossless ({report.level} level): {report.error}")
    lines = [f"{report.impl} is not lossless ({report.level} level, family-wise false-alarm rate "
             f"{report.false_alarm_rate:g}, seed {report.seed}):", *("  " + s for s in report.failure_summary())]
    for t in report.tests:
        if t.reject:
            message = t.details.get("message", "")
            lines.append(f"  {t.name}: statistic {t.statistic:.4g}, p = {t.p_value:.3g} {message}".rstrip())
    raise AssertionError("\n".join(lines))


def assert_lossless(verify: Callable | str, *, false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE,
                    tv: float | None = None, power: float = DEFAULT_POWER, seed: int = 0, samples: int | None = None,
                    cases: list[str] | None = None, family: str = "chain"):
    """Sampler-level check of a §1a `verify` (or a tree verifier with family="tree"); returns the report.
    `tv` None: the family's default detectable TV (CheckConfig)."""
    __tracebackhide__ = True
    from harness.check.config import CheckConfig

    return _check(CheckConfig(impl=verify, level="sampler", family=family, false_alarm_rate=false_alarm_rate, tv=tv,
                              power=power, seed=seed, samples=samples, cases=cases))


def assert_lossless_block(verify: Callable | str, **options):
    """`assert_lossless` of a block verifier (§1a signature, the block family's acceptance gate)."""
    __tracebackhide__ = True
    return assert_lossless(verify, family="block", **options)


def assert_lossless_tree(tree_verify: Callable | str, **options):
    """`assert_lossless` of a tree verifier (docs/CONTRACT-tree.md)."""
    __tracebackhide__ = True
    return assert_lossless(tree_verify, family="tree", **options)


def assert_lossless_generation(generate: Callable | str, *, pair: str = "toy",
                               false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE, power: float = DEFAULT_POWER,
                               seed: int = 0, samples: int | None = None, gamma: int = DEFAULT_GAMMA):
    """Generation-level check of a §1b `generate` on a registered pair; returns the CheckReport."""
    __tracebackhide__ = True
    from harness.check.config import CheckConfig

    return _check(CheckConfig(impl=generate, level="generation", pair=pair, false_alarm_rate=false_alarm_rate,
                              power=power, seed=seed, samples=samples, gamma=gamma))
