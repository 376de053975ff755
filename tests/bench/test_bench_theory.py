"""Leviathan's formulas (harness.bench.theory): limits, the accepted-count law, the best γ."""

import math

import pytest

from harness.bench import theory


@pytest.mark.parametrize("gamma", [0, 1, 4, 8])
def test_expected_tokens_limits_alpha_one_gives_gamma_plus_one_alpha_zero_gives_one(gamma):
    assert theory.expected_tokens_per_call(1.0, gamma) == gamma + 1
    assert theory.expected_tokens_per_call(1 - 1e-9, gamma) == pytest.approx(gamma + 1, rel=1e-6)
    assert theory.expected_tokens_per_call(0.0, gamma) == 1.0


def test_expected_tokens_known_value_and_monotone():
    assert theory.expected_tokens_per_call(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    values = [theory.expected_tokens_per_call(0.7, g) for g in range(1, 9)]
    assert values == sorted(values)


@pytest.mark.parametrize("alpha,gamma", [(0.0, 3), (0.2, 1), (0.6, 5), (0.95, 8), (1.0, 4)])
def test_accepted_count_pmf_sums_to_one_and_has_the_formula_as_mean(alpha, gamma):
    pmf = theory.accepted_count_pmf(alpha, gamma)
    assert len(pmf) == gamma + 1
    assert math.fsum(pmf) == pytest.approx(1.0)
    assert math.fsum((k + 1) * p for k, p in enumerate(pmf)) == pytest.approx(
        theory.expected_tokens_per_call(alpha, gamma))


def test_predicted_speedup_is_tokens_over_step_cost():
    assert theory.predicted_speedup(0.8, 4, 0.0) == theory.expected_tokens_per_call(0.8, 4)
    assert theory.predicted_speedup(0.8, 4, 0.1) == pytest.approx(theory.expected_tokens_per_call(0.8, 4) / 1.4)
    assert theory.predicted_speedup(0.0, 3, 0.5) == pytest.approx(1 / 2.5)  # nothing accepted: a slowdown


def test_optimal_gamma_grows_with_alpha_and_shrinks_with_cost():
    assert theory.optimal_gamma(0.95, 0.0, 8) == 8
    assert theory.optimal_gamma(0.2, 0.5, 8) == 1
    assert theory.optimal_gamma(0.9, 0.05) > theory.optimal_gamma(0.6, 0.05)


@pytest.mark.parametrize("alpha,gamma", [(-0.1, 2), (1.5, 2), (float("nan"), 2), (0.5, -1), (0.5, 1.5)])
def test_theory_rejects_out_of_range_inputs(alpha, gamma):
    with pytest.raises(ValueError):
        theory.expected_tokens_per_call(alpha, gamma)
