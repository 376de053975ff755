"""Tests that observed counts of one categorical come from a known distribution p.

Inputs are always counts (k,) of non-negative integers and p (k,) float64 summing to 1. The battery
reflects that different statistics catch different bugs, so run

* a support check (no statistics: a draw where p = 0 is a failure),
* pooled Pearson X² and pooled G (cells with expected count < 5 merged, so the asymptotic χ² p-value is
  honest; G with Williams' 1976 correction; Cressie & Read 1984 for the power-divergence family). The
  statistics are two lines of numpy, checked in tests against `scipy.stats.power_divergence`, whose
  wrapper costs ~2 ms a call, too much for simulations that run thousands of tests,
* targeted binomial event tests: top-1 frequency and "outside the 99 % nucleus" (a dropped tail moves
  ~1 % of mass that pooling hides from the omnibus tests),

and gate on the family with `multiplicity.holm`. Where pooling would throw away too much, the
un-pooled Pearson statistic can be calibrated by Monte Carlo from the exact multinomial
(`pearson_mc`), with the Phipson & Smyth (2010) p-value (b+1)/(B+1), which never reports zero.

Every result carries `detectable_tv` from `power` so a pass states what it rules out.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.special import chdtrc, xlogy
from scipy.stats import binomtest

from harness.stats.pooling import DEFAULT_MIN_EXPECTED, pool_cells
from harness.stats.power import (
    DEFAULT_POWER,
    DEFAULT_RATE,
    detectable_binomial_shift,
    detectable_tv,
)
from harness.stats.result import TestResult

__all__ = [
    "binomial_event_test",
    "monte_carlo_pvalue",
    "nucleus_mask_top_p",
    "pearson_mc",
    "pearson_statistic",
    "pool_cells",
    "pooled_gtest",
    "pooled_pearson",
    "support_check",
]

NUCLEUS_MASS = 0.99
_SUM_TOLERANCE = 1e-8


def _validated(counts: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(counts as int64, p renormalized) after checking shapes, signs and Σp = 1."""
    counts_arr, p_arr = np.asarray(counts), np.asarray(p, dtype=np.float64)
    if p_arr.ndim != 1 or counts_arr.shape != p_arr.shape or p_arr.size == 0:
        raise ValueError(f"counts {counts_arr.shape} and p {p_arr.shape} must be equal non-empty 1-D shapes")
    if np.any(p_arr < 0) or abs(p_arr.sum() - 1.0) > _SUM_TOLERANCE:
        raise ValueError(f"p must be non-negative and sum to 1 (sum = {p_arr.sum():.12g})")
    if np.any(counts_arr < 0) or np.any(counts_arr != np.round(counts_arr)):
        raise ValueError("counts must be non-negative integers")
    return counts_arr.astype(np.int64), p_arr / p_arr.sum()


# ---------------------------------------------------------------------------------------------------
# Support
# ---------------------------------------------------------------------------------------------------


def support_check(
    counts: np.ndarray, p: np.ndarray, name: str = "support", *, power: float = DEFAULT_POWER
) -> TestResult:
    """Fail with certainty (p_value 0) if any draw landed where p = 0; statistic = number of such draws.

    Not a statistical test, so its false-alarm rate is 0. It catches an alternative with off-support
    mass m with probability 1 − (1−m)^n, reported as ``details["detectable_offsupport_mass"]``.
    """
    counts, p = _validated(counts, p)
    n = int(counts.sum())
    off_support = int(counts[p == 0].sum())
    detectable = 1.0 - (1.0 - power) ** (1.0 / n) if n > 0 else math.inf
    return TestResult(
        name,
        float(off_support),
        0.0 if off_support else 1.0,
        n=n,
        detectable_tv=None,
        details={"detectable_offsupport_mass": detectable, "detectable_metric": "off-support mass"},
    )


# ---------------------------------------------------------------------------------------------------
# Pooled Pearson and G
# ---------------------------------------------------------------------------------------------------


def pooled_pearson(
    counts: np.ndarray,
    p: np.ndarray,
    name: str = "pooled_pearson",
    *,
    rate: float = DEFAULT_RATE,
    power: float = DEFAULT_POWER,
    min_expected: float = DEFAULT_MIN_EXPECTED,
) -> TestResult:
    """Pearson X² after pooling cells with expected count < min_expected; asymptotic χ² p-value."""
    return _pooled_power_divergence(counts, p, name, pearson_x2, rate, power, min_expected)


def pooled_gtest(
    counts: np.ndarray,
    p: np.ndarray,
    name: str = "pooled_g",
    *,
    rate: float = DEFAULT_RATE,
    power: float = DEFAULT_POWER,
    min_expected: float = DEFAULT_MIN_EXPECTED,
) -> TestResult:
    """Log-likelihood-ratio G (Williams-corrected) after pooling; shares Pearson's noncentral limit and planner."""
    return _pooled_power_divergence(counts, p, name, williams_g, rate, power, min_expected)


def _pooled_power_divergence(
    counts: np.ndarray,
    p: np.ndarray,
    name: str,
    statistic_fn: Callable[[np.ndarray, np.ndarray], float],
    rate: float,
    power: float,
    min_expected: float,
) -> TestResult:
    counts, p = _validated(counts, p)
    n = int(counts.sum())
    pooled_counts, pooled_p = pool_cells(counts, p, min_expected)
    df = len(pooled_counts) - 1
    details = {
        "cells": len(p),
        "pooled_cells": len(pooled_counts),
        "min_expected": min_expected,
        "detectable_metric": "TV between pooled laws",
    }
    if df < 1:  # one pooled cell: nothing to compare
        # A one-token law is fully tested by the support check (any other token is off-support): nothing is
        # left undetected here. Otherwise too few draws to fill two cells: no promise at all.
        tv = 0.0 if int((p > 0).sum()) <= 1 else math.inf
        return TestResult(name, 0.0, 1.0, n=n, df=0, detectable_tv=tv, details=details)
    statistic = statistic_fn(pooled_counts, pooled_p)
    return TestResult(
        name,
        statistic,
        float(chdtrc(df, statistic)),  # chi2.sf without the rv_continuous overhead
        n=n,
        df=df,
        detectable_tv=detectable_tv(n, df, rate, power),
        details=details,
    )


def pearson_x2(counts: np.ndarray, p: np.ndarray) -> float:
    """Pearson X² = Σ(N − np)²/(np); counts (m,), p (m,) > 0."""
    expected = counts.sum() * p
    return float(np.sum((counts - expected) ** 2 / expected))


def williams_g(counts: np.ndarray, p: np.ndarray) -> float:
    """G = 2ΣN·log(N/np) divided by Williams' (1976) factor 1 + (Σ1/p − 1)/(6n·df).

    Uncorrected G has null mean ≈ df + (Σ1/p − 1)/(6n): with pooled cells of expected count ~5 that is
    a few per cent too high, and measured false alarms at nominal 0.05 run ≈ 0.065. The factor removes
    the first-order bias; Pearson X² needs none (its null mean is exactly df).
    """
    n, df = counts.sum(), len(p) - 1
    g = 2.0 * float(np.sum(xlogy(counts, counts / (n * p))))
    return g / (1.0 + (np.sum(1.0 / p) - 1.0) / (6.0 * n * df))


# ---------------------------------------------------------------------------------------------------
# Monte Carlo calibration
# ---------------------------------------------------------------------------------------------------

StatisticFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def pearson_statistic(counts: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Un-pooled Pearson X² over the support of p; counts (..., k) → (...). Vectorized for Monte Carlo."""
    support = p > 0
    n = counts.sum(axis=-1, keepdims=True)
    expected = n * p[support]
    return np.sum((counts[..., support] - expected) ** 2 / expected, axis=-1)


def monte_carlo_pvalue(
    statistic_fn: StatisticFn,
    counts: np.ndarray,
    p: np.ndarray,
    n_resamples: int,
    rng: np.random.Generator | int,
    *,
    batch_cells: int = 2**22,
) -> float:
    """Exact-multinomial Monte Carlo p-value (b+1)/(B+1) (Phipson & Smyth 2010) for a right-tailed statistic.

    statistic_fn(counts_batch (B, k), p (k,)) -> (B,) must be vectorized over the leading axis. Ties with
    the observed value count as "at least as extreme" (a relative 1e-12 slack absorbs float round-off), so
    the p-value is valid for discrete statistics: P(p_value ≤ α) ≤ α under the null. The smallest
    attainable p-value is 1/(B+1), so choose B ≫ 1/α.
    """
    counts, p = _validated(counts, p)
    rng = np.random.default_rng(rng)
    n = int(counts.sum())
    observed = float(statistic_fn(counts[None, :], p)[0])
    threshold = observed - 1e-12 * max(1.0, abs(observed))
    batch = max(1, batch_cells // len(p))  # bound memory at ~batch_cells int64 cells
    at_least_as_extreme = 0
    for start in range(0, n_resamples, batch):
        draws = rng.multinomial(n, p, size=min(batch, n_resamples - start))  # (b, k)
        at_least_as_extreme += int(np.sum(statistic_fn(draws, p) >= threshold))
    return (at_least_as_extreme + 1) / (n_resamples + 1)


def pearson_mc(
    counts: np.ndarray,
    p: np.ndarray,
    name: str = "pearson_mc",
    *,
    n_resamples: int | None = None,
    rng: np.random.Generator | int = 0,
    rate: float = DEFAULT_RATE,
) -> TestResult:
    """Un-pooled Pearson X² with a Monte Carlo p-value: keeps the power of sparse cells.

    n_resamples defaults to 20/α, so α sits well above the p-value floor 1/(B+1). No closed-form
    planner applies to the sparse regime, so detectable_tv is None: simulate mutants instead.
    """
    counts, p = _validated(counts, p)
    n_resamples = n_resamples if n_resamples is not None else math.ceil(20 / rate)
    statistic = float(pearson_statistic(counts[None, :], p)[0])
    p_value = monte_carlo_pvalue(pearson_statistic, counts, p, n_resamples, rng)
    return TestResult(
        name,
        statistic,
        p_value,
        n=int(counts.sum()),
        df=int(np.count_nonzero(p)) - 1,
        details={"n_resamples": n_resamples, "p_value_floor": 1.0 / (n_resamples + 1)},
    )


# ---------------------------------------------------------------------------------------------------
# Targeted event tests
# ---------------------------------------------------------------------------------------------------


def binomial_event_test(
    hits: int,
    n: int,
    p_event: float,
    name: str,
    alternative: str = "two-sided",
    *,
    rate: float = DEFAULT_RATE,
    power: float = DEFAULT_POWER,
) -> TestResult:
    """Exact binomial test that an event has probability p_event, from `hits` out of `n` trials.

    p_event = 0 (or 1) is allowed: then any hit (miss) is impossible under the null and rejects with
    p_value 0. detectable_tv is the smallest shift of the event probability caught at `power`.
    """
    if not 0 <= hits <= n or not 0.0 <= p_event <= 1.0:
        raise ValueError(f"need 0 <= hits <= n and p_event in [0, 1], got {hits}, {n}, {p_event}")
    if n == 0:
        p_value = 1.0
    elif p_event in (0.0, 1.0):
        impossible = hits > 0 if p_event == 0.0 else hits < n
        p_value = 0.0 if impossible else 1.0
    else:
        p_value = float(binomtest(int(hits), int(n), p_event, alternative=alternative).pvalue)
    return TestResult(
        name,
        float(hits),
        p_value,
        n=int(n),
        detectable_tv=detectable_binomial_shift(n, p_event, rate, power, alternative),
        details={
            "p_event": p_event,
            "observed_rate": hits / n if n else math.nan,
            "alternative": alternative,
            "detectable_metric": "shift of event probability",
        },
    )


def nucleus_mask_top_p(p: np.ndarray, mass: float = NUCLEUS_MASS) -> np.ndarray:
    """Boolean (k,) mask of the smallest set of cells holding ≥ `mass` of p (descending p, ties by index)."""
    p = np.asarray(p, dtype=np.float64)
    order = np.argsort(-p, kind="stable")  # stable sort keeps lower index first among ties
    cumulative_before = np.cumsum(p[order]) - p[order]
    mask = np.zeros(p.shape, dtype=bool)
    mask[order[cumulative_before < mass]] = True
    return mask
