"""Campaign statistics, one way each: a rate's confidence interval and a run's family p-value."""

from __future__ import annotations

import math

from scipy.stats import binomtest


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper–Pearson) interval for a rate of k events in n runs; (nan, nan) for n = 0."""
    if n == 0:
        return (math.nan, math.nan)
    ci = binomtest(k, n).proportion_ci(confidence, method="exact")
    return float(ci.low), float(ci.high)


def family_p(report) -> float:
    """Smallest Holm-adjusted p-value of a report's gating tests: the family rejects at family-wise rate a iff this is ≤ a
    (Holm's first step is Bonferroni's: m · min p)."""
    if not report.tests:
        return 1.0
    m = len(report.tests)
    return float(min(1.0, m * min(t.p_value for t in report.tests)))


def rate_text(k: int, n: int, confidence: float = 0.95) -> str:
    """'k/n (lo–hi %)': a count of events with its Clopper–Pearson interval, as every campaign report writes it."""
    if n == 0:
        return "0/0 (no runs)"
    lo, hi = clopper_pearson(k, n, confidence)
    return f"{k}/{n} ({100 * lo:.1f}%–{100 * hi:.1f}%)"
