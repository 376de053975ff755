"""The planner: reproduces the playbook's numbers and agrees with simulation of the tests it plans."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom, binomtest, kstest

from harness.stats.categorical import nucleus_mask_top_p, pooled_pearson
from harness.stats.power import (
    detectable_binomial_shift,
    detectable_kolmogorov,
    detectable_tv,
    identity_testing_floor,
    noncentrality_needed,
    power_against,
    samples_needed,
    samples_needed_against,
    samples_needed_binomial,
)

SIM_ALPHA = 1e-3
SIM_POWER = 0.8
SIM_DRAWS = 400
SIM_TOLERANCE = 0.1  # measured |simulated − predicted| ≤ 0.03 on every case below; 0.1 is ~5 SE


def zipf(k: int, s: float) -> np.ndarray:
    weights = np.arange(1, k + 1, dtype=np.float64) ** -s
    return weights / weights.sum()


def uniform_mix(p: np.ndarray, delta: float) -> np.ndarray:
    return (1 - delta) * p + delta / len(p)


def top_to_second(p: np.ndarray, fraction: float) -> np.ndarray:
    q = p.copy()
    q[0], q[1] = p[0] * (1 - fraction), p[1] + p[0] * fraction
    return q


def tempered(p: np.ndarray, exponent: float) -> np.ndarray:
    q = p**exponent
    return q / q.sum()


def drop_tail(p: np.ndarray) -> np.ndarray:
    q = np.where(nucleus_mask_top_p(p), p, 0.0)
    return q / q.sum()


ZIPF50 = zipf(50, 1.1)
ZIPF2000 = zipf(2000, 1.1)
ALTERNATIVES = {
    "mix 10% uniform": (ZIPF50, uniform_mix(ZIPF50, 0.10)),
    "10% of top moved to 2nd": (ZIPF50, top_to_second(ZIPF50, 0.10)),
    "tempered p^0.8": (ZIPF50, tempered(ZIPF50, 0.8)),
    "sharpened p^1.15": (ZIPF50, tempered(ZIPF50, 1.15)),
    "tail beyond top-p 0.99 dropped": (ZIPF50, drop_tail(ZIPF50)),
    "k=2000, tempered p^0.9": (ZIPF2000, tempered(ZIPF2000, 0.9)),
}


def simulated_rejection_rate(q: np.ndarray, p: np.ndarray, n: int, draws: int, seed: int) -> float:
    counts = np.random.default_rng(seed).multinomial(n, q, size=draws)  # (draws, k)
    return float(np.mean([pooled_pearson(c, p).p_value <= SIM_ALPHA for c in counts]))


# ---------------------------------------------------------------------------------------------------
# Playbook numbers
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("df", "expected"), [(1, 24.4), (9, 38.7), (99, 86.0), (999, 231.5), (9999, 689.6)])
def test_noncentrality_needed_matches_playbook_table(df, expected):
    assert noncentrality_needed(df, 1e-3, 0.95) == pytest.approx(expected, abs=0.05)


@pytest.mark.parametrize(
    ("tv", "k", "expected"),
    [
        (0.05, 10, 3.9e3),
        (0.05, 100, 8.6e3),
        (0.05, 1000, 23e3),
        (0.01, 10, 97e3),
        (0.01, 100, 215e3),
        (0.01, 1000, 579e3),
    ],
)
def test_samples_needed_matches_playbook_worst_case_table(tv, k, expected):
    assert samples_needed(tv, k - 1, 1e-3, 0.95) == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("df", [1, 9, 99, 999, 9999])
def test_smaller_alpha_costs_at_most_75_percent_more_noncentrality(df):
    ratio = noncentrality_needed(df, 1e-6, 0.95) / noncentrality_needed(df, 1e-3, 0.95)
    assert 1.3 < ratio < 1.76


@settings(derandomize=True, max_examples=60, deadline=None)
@given(tv=st.floats(0.005, 0.5), df=st.integers(1, 5000))
def test_detectable_tv_inverts_samples_needed(tv, df):
    n = samples_needed(tv, df)
    assert detectable_tv(n, df) <= tv  # ceil can only overshoot n
    assert detectable_tv(n - 1, df) > tv or n == 1


def test_detectable_tv_promises_nothing_without_data_or_freedom():
    assert detectable_tv(0, 10) == math.inf
    assert detectable_tv(1000, 0) == math.inf
    assert detectable_tv(1, 999) == math.inf  # the bound would exceed TV's maximum of 1


# ---------------------------------------------------------------------------------------------------
# Planner versus simulation
# ---------------------------------------------------------------------------------------------------


def test_power_against_p_itself_is_the_false_alarm_rate():
    assert power_against(ZIPF50, ZIPF50, 1000, SIM_ALPHA) == pytest.approx(SIM_ALPHA, rel=1e-6)


@pytest.mark.parametrize("case", list(ALTERNATIVES))
def test_planned_n_reaches_predicted_power_in_simulation(case):
    p, q = ALTERNATIVES[case]
    n = samples_needed_against(q, p, SIM_ALPHA, SIM_POWER)
    predicted = power_against(q, p, n, SIM_ALPHA)
    simulated = simulated_rejection_rate(q, p, n, SIM_DRAWS, seed=1)
    assert predicted == pytest.approx(SIM_POWER, abs=0.01)
    assert abs(simulated - predicted) <= SIM_TOLERANCE, (case, n, predicted, simulated)


@pytest.mark.parametrize("case", ["mix 10% uniform", "sharpened p^1.15", "k=2000, tempered p^0.9"])
def test_worst_case_plan_at_the_alternatives_tv_reaches_power(case):
    p, q = ALTERNATIVES[case]
    tv = 0.5 * np.abs(q - p).sum()
    n = samples_needed(tv, len(p) - 1, SIM_ALPHA, SIM_POWER)
    assert simulated_rejection_rate(q, p, n, 200, seed=2) >= SIM_POWER - SIM_TOLERANCE


# ---------------------------------------------------------------------------------------------------
# Binomial, Kolmogorov, theory floor
# ---------------------------------------------------------------------------------------------------


def exact_binomial_power(n: int, p0: float, p1: float, alpha: float) -> float:
    """Power of scipy's two-sided exact binomtest against p1.

    Its p-value rises towards the mode n·p0 from either side, so the rejection region is
    {h <= low} ∪ {h >= high}; both ends are found by bisection.
    """
    mode = int(n * p0)

    def rejects(h: int) -> bool:
        return binomtest(h, n, p0).pvalue <= alpha

    def last_rejected(start: int, stop: int) -> int:  # start rejects (or is a sentinel), stop does not
        while abs(stop - start) > 1:
            mid = (start + stop) // 2
            start, stop = (mid, stop) if rejects(mid) else (start, mid)
        return start

    low = last_rejected(0 if rejects(0) else -1, mode)  # -1 / n+1: sentinels for "nothing rejects"
    high = last_rejected(n if rejects(n) else n + 1, mode)
    return float(binom.cdf(low, n, p1) + binom.sf(high - 1, n, p1))


@pytest.mark.parametrize(("p0", "p1"), [(0.01, 0.02), (0.3, 0.33), (0.5, 0.45), (0.9, 0.95)])
def test_binomial_planner_matches_exact_binomial_power(p0, p1):
    n = samples_needed_binomial(p0, p1, 1e-3, 0.95)
    assert exact_binomial_power(n, p0, p1, 1e-3) == pytest.approx(0.95, abs=0.03)
    assert detectable_binomial_shift(n, p0, 1e-3, 0.95) == pytest.approx(abs(p1 - p0), rel=0.2)


def test_zero_probability_event_plan_is_exact():
    n = samples_needed_binomial(0.0, 0.003, 1e-3, 0.95)
    assert (1 - 0.003) ** n <= 0.05 < (1 - 0.003) ** (n - 1)
    assert detectable_binomial_shift(n, 0.0, 1e-3, 0.95) <= 0.003


def test_downward_shift_larger_than_p0_cannot_exist():
    # 2 expected hits cannot tell 0.002 from 0; the promise then covers only upward shifts beyond 0.002
    assert detectable_binomial_shift(1000, 0.002, alternative="less") == math.inf
    assert detectable_binomial_shift(1000, 0.002) >= 0.002


def test_detectable_kolmogorov_shift_is_caught_in_simulation():
    n, rng = 500, np.random.default_rng(3)
    shift = detectable_kolmogorov(n, 1e-3, 0.95)
    # U(shift, 1) sits exactly `shift` from U(0, 1) in Kolmogorov distance, at x = shift
    samples = shift + (1 - shift) * rng.random((200, n))
    detected = np.mean([kstest(s, "uniform").pvalue <= 1e-3 for s in samples])
    assert detected >= 0.95


def test_identity_testing_floor_is_sqrt_k_over_tv_squared_and_below_plans():
    for k in (10, 100, 1000, 10_000):
        floor = identity_testing_floor(k, 0.05)
        assert floor == pytest.approx(math.sqrt(k) / 0.0025)
        assert samples_needed(0.05, k - 1) > floor
