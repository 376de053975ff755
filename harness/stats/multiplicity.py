"""Multiple-testing corrections for a suite of checks.

A suite runs many tests; gating on each at rate α would fail a correct implementation far more often
than α. `holm` (Holm 1979, "A simple sequentially rejective multiple test procedure") controls the
family-wise error rate at α under any dependence between the tests, and is uniformly more powerful than
Bonferroni. It is the only gate. `benjamini_hochberg` (Benjamini & Hochberg 1995) controls the false
discovery rate and is for reports only: pointing at which contexts look off, never deciding a verdict.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from harness.stats.result import TestResult


def _check_rate(rate: float) -> None:
    if not 0.0 < rate < 1.0:
        raise ValueError(f"rate must be in (0, 1), got {rate}")


def holm_adjusted(pvalues: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values (m,): reject H_i at family-wise rate α iff adjusted_i ≤ α.

    Sorted ascending, adjusted_(i) = max_{j ≤ i} min(1, (m − j)·p_(j)) with 0-based j, which is the
    step-down rule "reject while p_(j) ≤ α/(m − j)" written as one number per test.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    if np.any(np.isnan(p)):
        raise ValueError("a p-value is nan: a check is broken, refusing to gate on it")
    m = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def holm(results: list[TestResult], false_alarm_rate: float) -> list[TestResult]:
    """Copies of `results` (same order) with `reject` set by Holm's step-down at family-wise false-alarm rate `false_alarm_rate`.

    Each copy also gets ``details["p_holm"]``, the adjusted p-value.
    """
    _check_rate(false_alarm_rate)
    adjusted = holm_adjusted([r.p_value for r in results])
    return [
        dataclasses.replace(r, reject=bool(a <= false_alarm_rate), details={**r.details, "p_holm": float(a)})
        for r, a in zip(results, adjusted, strict=True)
    ]


def benjamini_hochberg(pvalues: np.ndarray, q: float) -> np.ndarray:
    """Boolean (m,) mask of discoveries at false discovery rate q (step-up). For reporting, not gating."""
    _check_rate(q)
    p = np.asarray(pvalues, dtype=np.float64)
    m = len(p)
    order = np.argsort(p, kind="stable")
    below = p[order] <= q * np.arange(1, m + 1) / m
    discoveries = np.zeros(m, dtype=bool)
    if below.any():
        discoveries[order[: np.flatnonzero(below)[-1] + 1]] = True  # all up to the largest passing rank
    return discoveries
