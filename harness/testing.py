"""`assert_lossless` for users' own test suites (also exposed as pytest fixtures by the plugin).

    from harness.testing import assert_lossless
    def test_my_sampler_is_lossless():
        assert_lossless(my_verify)                       # sampler level (CONTRACT §1a)
        assert_lossless_generation(my_generate, pair="toy")  # generation level (§1b)

Each call runs the same battery as `specdec verify` and raises AssertionError with the rejected
tests (name, statistic, p-value) if losslessness is rejected at the suite false-alarm rate.
"""

from __future__ import annotations

from collections.abc import Callable


def _raise_if_failed(report) -> None:
    if report.verdict == "pass":
        return
    lines = [f"{report.impl} is not lossless ({report.level} level, family-wise false-alarm rate "
             f"{report.false_alarm_rate:g}, seed {report.seed}):"]
    for t in report.tests:
        if t.reject:
            message = t.details.get("message", "")
            lines.append(f"  {t.name}: statistic {t.statistic:.4g}, p = {t.p_value:.3g} {message}".rstrip())
    raise AssertionError("\n".join(lines))


def assert_lossless(verify: Callable | str, *, alpha: float = 1e-3, tv: float = 0.02, power: float = 0.99,
                    seed: int = 0, samples: int | None = None, cases: list[str] | None = None):
    """Sampler-level check of a §1a `verify`; returns the CheckReport when it passes."""
    from harness.check.api import VerifyConfig, run_verify

    report = run_verify(VerifyConfig(impl=verify, level="sampler", alpha=alpha, tv=tv, power=power, seed=seed,
                                     samples=samples, cases=cases))
    _raise_if_failed(report)
    return report


def assert_lossless_generation(generate: Callable | str, *, pair: str = "toy", alpha: float = 1e-3,
                               power: float = 0.99, seed: int = 0, samples: int | None = None, gamma: int = 3):
    """Generation-level check of a §1b `generate` on a registered pair; returns the CheckReport."""
    from harness.check.api import VerifyConfig, run_verify

    report = run_verify(VerifyConfig(impl=generate, level="generation", pair=pair, alpha=alpha, power=power,
                                     seed=seed, samples=samples, gamma=gamma))
    _raise_if_failed(report)
    return report
