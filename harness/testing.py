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
too small to see a useful error) fails too, saying so.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.check.config import DEFAULT_FALSE_ALARM_RATE, DEFAULT_GAMMA, DEFAULT_POWER


def _raise_unless_passed(report) -> None:
    if report.verdict == "pass":
        return
    if report.verdict == "inconclusive":
        raise AssertionError(f"{report.impl}: INCONCLUSIVE ({report.level} level): achieved detectable TV "
                             f"{report.detectable_tv:.3g} is above {report.inconclusive_tv:g}; give more samples")
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
    from harness.check.api import run_verify
    from harness.check.config import CheckConfig

    report = run_verify(CheckConfig(impl=verify, level="sampler", family=family,
                                    false_alarm_rate=false_alarm_rate, tv=tv,
                                    power=power, seed=seed, samples=samples, cases=cases))
    _raise_unless_passed(report)
    return report


def assert_lossless_block(verify: Callable | str, **options):
    """`assert_lossless` of a block verifier (§1a signature, the block family's acceptance gate)."""
    return assert_lossless(verify, family="block", **options)


def assert_lossless_tree(tree_verify: Callable | str, **options):
    """`assert_lossless` of a tree verifier (docs/CONTRACT-tree.md)."""
    return assert_lossless(tree_verify, family="tree", **options)


def assert_lossless_generation(generate: Callable | str, *, pair: str = "toy",
                               false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE, power: float = DEFAULT_POWER,
                               seed: int = 0, samples: int | None = None, gamma: int = DEFAULT_GAMMA):
    """Generation-level check of a §1b `generate` on a registered pair; returns the CheckReport."""
    from harness.check.api import run_verify
    from harness.check.config import CheckConfig

    report = run_verify(CheckConfig(impl=generate, level="generation", pair=pair,
                                    false_alarm_rate=false_alarm_rate, power=power, seed=seed, samples=samples, gamma=gamma))
    _raise_unless_passed(report)
    return report
