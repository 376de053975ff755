"""Categorical checks: exact mechanics, false-alarm rates, and the planted bug each one catches."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest, chisquare, power_divergence

from harness.stats.categorical import (
    binomial_event_test,
    monte_carlo_pvalue,
    nucleus_mask_top_p,
    pearson_mc,
    pearson_statistic,
    pool_cells,
    pooled_gtest,
    pooled_pearson,
    support_check,
)
from harness.stats.multiplicity import holm
from harness.stats.power import samples_needed_against

SEEDS = range(20)  # mutant detection is measured over >= 20 seeds (playbook)


def zipf(k: int, s: float) -> np.ndarray:
    weights = np.arange(1, k + 1, dtype=np.float64) ** -s
    return weights / weights.sum()


def drop_tail(p: np.ndarray) -> np.ndarray:
    q = np.where(nucleus_mask_top_p(p), p, 0.0)
    return q / q.sum()


def rate_interval(hits: int, trials: int) -> tuple[float, float]:
    """Clopper–Pearson 95 % interval of a measured rate."""
    ci = binomtest(hits, trials).proportion_ci(0.95)
    return ci.low, ci.high


def rejections(pvalues, alpha: float) -> int:
    return int(np.sum(np.asarray(pvalues) <= alpha))


ZIPF2000 = zipf(2000, 1.1)


# ---------------------------------------------------------------------------------------------------
# Mechanics
# ---------------------------------------------------------------------------------------------------


@settings(derandomize=True, max_examples=80, deadline=None)
@given(
    weights=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40).filter(lambda w: sum(w) > 0),
    n=st.integers(0, 3000),
    seed=st.integers(0, 2**32 - 1),
)
def test_pool_cells_keeps_totals_and_fills_every_cell(weights, n, seed):
    p = np.asarray(weights) / np.sum(weights)
    counts = np.random.default_rng(seed).multinomial(n, p)
    pooled_counts, pooled_p = pool_cells(counts, p)
    assert pooled_counts.sum() == n
    assert pooled_p.sum() == pytest.approx(1.0)
    if len(pooled_p) > 1:  # with one cell there is nothing to fill
        assert np.all(n * pooled_p >= 5.0 - 1e-9)


def test_pool_cells_merges_small_rest_into_smallest_kept_cell():
    p = np.array([0.5, 0.3, 0.19, 0.005, 0.005])
    pooled_counts, pooled_p = pool_cells(np.array([50, 30, 19, 1, 0]), p)  # rest expects 1 < 5
    np.testing.assert_allclose(pooled_p, [0.5, 0.3, 0.2])
    np.testing.assert_array_equal(pooled_counts, [50, 30, 20])


def test_pooled_statistics_match_scipy_power_divergence():
    rng = np.random.default_rng(0)
    counts = rng.multinomial(5000, ZIPF2000)
    pooled_counts, pooled_p = pool_cells(counts, ZIPF2000)
    expected = 5000 * pooled_p
    pearson = pooled_pearson(counts, ZIPF2000)
    reference = power_divergence(pooled_counts, expected, lambda_="pearson")
    assert pearson.statistic == pytest.approx(reference.statistic, rel=1e-10)
    assert pearson.p_value == pytest.approx(reference.pvalue, rel=1e-8)
    g = pooled_gtest(counts, ZIPF2000)
    df = len(pooled_p) - 1
    williams = 1 + (np.sum(1 / pooled_p) - 1) / (6 * 5000 * df)
    g_reference = power_divergence(pooled_counts, expected, lambda_="log-likelihood").statistic
    assert g.statistic == pytest.approx(g_reference / williams, rel=1e-10)
    assert g.df == pearson.df == df


def test_pooled_pearson_without_pooling_is_plain_chisquare():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    counts = np.array([12, 18, 33, 37])
    result = pooled_pearson(counts, p)
    assert result.p_value == pytest.approx(chisquare(counts, 100 * p).pvalue)
    assert result.df == 3 and result.n == 100
    assert 0 < result.detectable_tv < 1


def test_pooled_tests_with_one_pooled_cell_say_nothing():
    result = pooled_pearson(np.array([1, 0, 0]), np.array([0.4, 0.3, 0.3]))
    assert (result.p_value, result.df, result.detectable_tv) == (1.0, 0, math.inf)


@pytest.mark.parametrize(
    ("counts", "p"),
    [
        ([1, 2], [0.5, 0.6]),  # does not sum to 1
        ([1, -2], [0.5, 0.5]),  # negative count
        ([1, 2, 3], [0.5, 0.5]),  # shape mismatch
        ([1.5, 2], [0.5, 0.5]),  # fractional count
    ],
)
def test_invalid_inputs_are_refused(counts, p):
    with pytest.raises(ValueError):
        pooled_pearson(np.array(counts), np.array(p))


def test_nucleus_is_smallest_top_p_set_with_ties_by_index():
    p = np.array([0.195, 0.3, 0.005, 0.5])
    np.testing.assert_array_equal(nucleus_mask_top_p(p, 0.99), [True, True, False, True])
    np.testing.assert_array_equal(nucleus_mask_top_p(np.full(4, 0.25), 0.5), [True, True, False, False])


def test_binomial_event_test_matches_scipy_and_handles_impossible_events():
    result = binomial_event_test(30, 1000, 0.02, "event")
    assert result.p_value == pytest.approx(binomtest(30, 1000, 0.02).pvalue)
    assert binomial_event_test(1, 10_000, 0.0, "never").p_value == 0.0
    assert binomial_event_test(0, 10_000, 0.0, "never").p_value == 1.0
    assert binomial_event_test(9_999, 10_000, 1.0, "always").p_value == 0.0


def test_monte_carlo_pvalue_floor_is_one_over_b_plus_one():
    p = np.full(10, 0.1)
    extreme = np.array([100, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    assert monte_carlo_pvalue(pearson_statistic, extreme, p, 199, rng=0) == pytest.approx(1 / 200)


def test_pearson_mc_agrees_with_asymptotics_where_cells_are_full():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    counts = np.array([110, 190, 270, 430])  # every expected count >= 100
    mc = pearson_mc(counts, p, n_resamples=4999, rng=1)
    assert mc.p_value == pytest.approx(chisquare(counts, 1000 * p).pvalue, abs=0.02)


# ---------------------------------------------------------------------------------------------------
# False alarms
# ---------------------------------------------------------------------------------------------------

FALSE_ALARM_DRAWS = 400


@pytest.fixture(scope="module")
def zipf2000_null_counts() -> np.ndarray:
    """(400, 2000) multinomial counts, n = 5000, from the true p: a sparse table (~107 pooled cells)."""
    return np.random.default_rng(2024).multinomial(5000, ZIPF2000, size=FALSE_ALARM_DRAWS)


@pytest.mark.parametrize("test", [pooled_pearson, pooled_gtest])
def test_pooled_false_alarm_rate_is_nominal_on_sparse_zipf(test, zipf2000_null_counts):
    hits = rejections([test(c, ZIPF2000).p_value for c in zipf2000_null_counts], 0.05)
    low, high = rate_interval(hits, FALSE_ALARM_DRAWS)
    assert low <= 0.05 <= high, hits / FALSE_ALARM_DRAWS


def test_unpooled_asymptotic_pearson_cries_wolf_on_sparse_zipf(zipf2000_null_counts):
    # why pooling exists: the χ² tail is too light for X² over cells expecting 0.2 draws
    hits = rejections([chisquare(c, 5000 * ZIPF2000).pvalue for c in zipf2000_null_counts], 0.05)
    low, _ = rate_interval(hits, FALSE_ALARM_DRAWS)
    assert low > 0.05, hits / FALSE_ALARM_DRAWS


@pytest.mark.parametrize("test", [pooled_pearson, pooled_gtest])
def test_pooled_false_alarm_rate_is_bounded_at_minimal_expected_counts(test):
    # n = 300 over Zipf(50): cells expecting 5–10 draws, where the χ² approximation is at its weakest
    p = zipf(50, 1.1)
    counts = np.random.default_rng(7).multinomial(300, p, size=FALSE_ALARM_DRAWS)
    hits = rejections([test(c, p).p_value for c in counts], 0.05)
    assert hits / FALSE_ALARM_DRAWS <= 0.08


@pytest.mark.stochastic(false_alarm=0.025, seed='11 (counts), 0..299 (resamples)')  # one-sided 95 % Clopper-Pearson bound
def test_pearson_mc_false_alarm_rate_is_at_most_nominal():
    p = zipf(100, 1.1)  # n = 200: most cells expect < 1 draw
    counts = np.random.default_rng(11).multinomial(200, p, size=300)
    pvalues = [pearson_mc(c, p, n_resamples=199, rng=i).p_value for i, c in enumerate(counts)]
    low, _ = rate_interval(rejections(pvalues, 0.05), 300)
    assert low <= 0.05


def _sampler_battery(counts, p, alpha=1e-3, power=0.95):
    """The sampler check's per-position tests (harness.check.sampler_tests.position_tests): support, pooled X² and G, top-1 and
    the mass outside the 99 % nucleus, each planned at alpha / 5."""
    n, top, outside = int(counts.sum()), int(np.argmax(p)), ~nucleus_mask_top_p(p)
    plan = {"rate": alpha / 5, "power": power}
    return [support_check(counts, p, "support", power=power), pooled_pearson(counts, p, "pooled_pearson", **plan),
            pooled_gtest(counts, p, "pooled_g", **plan),
            binomial_event_test(int(counts[top]), n, float(p[top]), "top1", **plan),
            binomial_event_test(int(counts[outside].sum()), n, float(p[outside].sum()), "outside_nucleus", **plan)]


def test_battery_on_correct_samples_rejects_nothing_after_holm():
    counts = np.random.default_rng(5).multinomial(20_000, ZIPF2000)
    results = holm(_sampler_battery(counts, ZIPF2000), 1e-3)
    assert not any(r.reject for r in results)


# ---------------------------------------------------------------------------------------------------
# Planted bugs
# ---------------------------------------------------------------------------------------------------


def test_support_violation_is_caught_with_certainty():
    p = np.array([0.5, 0.5, 0.0])
    assert support_check(np.array([500, 500, 0]), p).p_value == 1.0
    result = support_check(np.array([500, 499, 1]), p)
    assert (result.p_value, result.statistic) == (0.0, 1.0)


def test_uniform_mix_in_of_two_percent_is_caught_by_pooled_pearson_and_g():
    q = 0.98 * ZIPF2000 + 0.02 / len(ZIPF2000)
    n = samples_needed_against(q, ZIPF2000, 1e-3, 0.95)  # ≈ 90k draws for pooled Pearson
    rng = np.random.default_rng(8)
    pearson_hits = rejections([pooled_pearson(rng.multinomial(n, q), ZIPF2000).p_value for _ in SEEDS], 1e-3)
    # G spends its power on deficits, and a mix-in is an excess: measured 0.53 power at n, 0.98 at 2n
    g_hits = rejections([pooled_gtest(rng.multinomial(2 * n, q), ZIPF2000).p_value for _ in SEEDS], 1e-3)
    assert pearson_hits >= 17 and g_hits >= 17, (pearson_hits, g_hits)


@pytest.mark.slow
def test_uniform_mix_in_is_caught_unpooled_long_before_pooled():
    # playbook: the mix-in lands in cells the pooled test merges; un-pooled X², calibrated by Monte Carlo,
    # sees it with a quarter of the draws. Measured (20 seeds, α = 0.01): Monte Carlo 18/20, pooled 5/20
    # (planner: pooled power 0.14 at this n).
    q = 0.98 * ZIPF2000 + 0.02 / len(ZIPF2000)
    n = samples_needed_against(q, ZIPF2000, 1e-3, 0.95) // 4
    rng = np.random.default_rng(9)
    samples = [rng.multinomial(n, q) for _ in SEEDS]
    mc_pvalues = [pearson_mc(c, ZIPF2000, n_resamples=499, rng=i).p_value for i, c in enumerate(samples)]
    pooled_hits = rejections([pooled_pearson(c, ZIPF2000).p_value for c in samples], 0.01)
    assert rejections(mc_pvalues, 0.01) >= 12 and pooled_hits <= 8, (mc_pvalues, pooled_hits)


def test_dropped_tail_is_caught_by_the_event_test_and_missed_by_omnibus_tests():
    q = drop_tail(ZIPF2000)  # top-p 0.99 truncation: 1 % of mass over ~240 tail tokens removed
    rng = np.random.default_rng(10)
    batteries = [_sampler_battery(rng.multinomial(5000, q), ZIPF2000) for _ in SEEDS]
    by_name = {r.name: [] for r in batteries[0]}
    for battery in batteries:
        for r in holm(battery, 1e-3):
            by_name[r.name].append(r.reject)
    assert all(by_name["outside_nucleus"])
    assert sum(by_name["pooled_pearson"]) <= 2 and sum(by_name["pooled_g"]) <= 2


