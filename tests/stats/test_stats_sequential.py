"""Anytime-valid e-processes: E[e] = 1 under H0, Ville under per-draw monitoring, growth under planted bugs."""

import itertools
import math

import numpy as np
import pytest
from scipy.stats import binom, multinomial

from harness.stats.sequential import (
    BernoulliAboveEProcess,
    CategoricalEProcess,
    SerialEProcess,
    UniformityEProcess,
    crossing_log_threshold,
    eprocess_result,
)

P4 = np.array([0.5, 0.3, 0.15, 0.05])
EDGES = np.array([0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0])
THRESHOLD = crossing_log_threshold(300, 1e-3)  # a battery of the sampler check's size


def _compositions(n: int, k: int):
    for cut in itertools.combinations(range(n + k - 1), k - 1):
        edges = (-1, *cut, n + k - 1)
        yield np.array([edges[i + 1] - edges[i] - 1 for i in range(k)])


def test_categorical_expectation_is_exactly_one_under_h0():
    """Σ over every count vector of P0(counts)·e(counts) = 1: the mixture is a likelihood ratio."""
    total = sum(multinomial.pmf(c, 9, P4) * CategoricalEProcess(P4).update(c).e_value for c in _compositions(9, 4))
    assert total == pytest.approx(1.0, abs=1e-9)


def _mc_mean_is_one(values: np.ndarray) -> None:
    mean, se = values.mean(), values.std(ddof=1) / math.sqrt(len(values))
    assert abs(mean - 1.0) < 5 * se + 1e-3, (mean, se)


@pytest.mark.stochastic(false_alarm=2.3e-06, seed=1)  # 4 means within 5 standard errors, normal approximation
def test_expectation_one_monte_carlo():
    rng = np.random.default_rng(1)
    _mc_mean_is_one(np.array([CategoricalEProcess(P4).update(rng.multinomial(12, P4)).e_value for _ in range(2000)]))
    _mc_mean_is_one(np.array([UniformityEProcess(EDGES).update(rng.random(12)).e_value for _ in range(2000)]))
    _mc_mean_is_one(np.array([SerialEProcess().update(rng.random(10)).e_value for _ in range(2000)]))
    _mc_mean_is_one(np.array([BernoulliAboveEProcess(0.6).update((rng.binomial(12, 0.6), 12)).e_value
                              for _ in range(2000)]))


@pytest.mark.parametrize("theta", [0.6, 0.45, 0.0])
def test_bernoulli_above_is_a_supermartingale_on_the_whole_null(theta):
    """E[e] = 1 at the bound and < 1 below it (the null is composite: wasteful rules accept less)."""
    n = 25
    mean = sum(binom.pmf(h, n, theta) * BernoulliAboveEProcess(0.6).update((h, n)).e_value for h in range(n + 1))
    assert mean == pytest.approx(1.0, abs=1e-9) if theta == 0.6 else mean < 1.0


@pytest.mark.slow
def test_ville_under_per_draw_monitoring():
    """Watched after every single draw, sup e ≥ 1/a happens in at most a fraction a of null runs."""
    rng = np.random.default_rng(2)
    a, runs, draws = 0.1, 200, 120
    crossed = 0
    for _ in range(runs):
        cat, bern = CategoricalEProcess(P4), BernoulliAboveEProcess(0.3)
        for x in rng.choice(4, size=draws, p=P4):
            cat.update(np.eye(4, dtype=np.int64)[x])
            bern.update((int(rng.random() < 0.3), 1))
        crossed += max(cat.max_log_e, bern.max_log_e) >= math.log(2 / a)  # Bonferroni over the two
    assert crossed <= binom.ppf(0.999, runs, a)  # ≤ a in law; observed: well below
    assert crossed < runs * a


def test_batches_are_order_free():
    """A batch update equals the same draws fed one at a time (the processes are functions of counts)."""
    rng = np.random.default_rng(3)
    draws = rng.choice(4, size=200, p=P4)
    whole = CategoricalEProcess(P4).update(np.bincount(draws, minlength=4))
    single = CategoricalEProcess(P4)
    for x in draws:
        single.update(np.bincount([x], minlength=4))
    assert whole.log_e == pytest.approx(single.log_e, rel=1e-10)
    u = rng.random(101)
    split = SerialEProcess().update(u[:40]).update(u[40:])  # rows split across calls stay paired
    assert split.log_e == pytest.approx(SerialEProcess().update(u).log_e, rel=1e-10)


def test_planted_temperature_bug_grows_the_categorical_process():
    """Planted bug: draws from p at temperature 0.9 (TV ≈ 0.04 here) instead of p."""
    q = P4 ** (1 / 0.9) / np.sum(P4 ** (1 / 0.9))
    rng = np.random.default_rng(4)
    e = CategoricalEProcess(P4)
    for _ in range(40):
        e.update(rng.multinomial(500, q))
    assert e.max_log_e > THRESHOLD
    assert CategoricalEProcess(P4).update(rng.multinomial(20_000, P4)).log_e < 0  # the null drifts down


def test_planted_excess_acceptance_grows_the_bernoulli_process():
    """Planted bug: acceptance 0.65 where the optimum is 0.6 (always impossible for a lossless rule)."""
    rng = np.random.default_rng(5)
    bug, wasteful = BernoulliAboveEProcess(0.6), BernoulliAboveEProcess(0.6)
    for _ in range(20):
        bug.update((rng.binomial(500, 0.65), 500))
        wasteful.update((rng.binomial(500, 0.5), 500))
    assert bug.max_log_e > THRESHOLD
    assert wasteful.log_e < 0 and wasteful.p_value == 1.0


def test_planted_truncated_tail_grows_the_uniformity_process():
    """Planted bug: PIT values of a sampler that drops the last 5 % of mass (u never above 0.95)."""
    rng = np.random.default_rng(6)
    e = UniformityEProcess(EDGES).update(0.95 * rng.random(3000))
    assert e.max_log_e > THRESHOLD


def test_planted_reused_uniforms_grow_the_serial_process():
    """Planted bug: half the values repeat their predecessor's (random numbers reused); marginals stay U(0, 1)."""
    rng = np.random.default_rng(7)
    u = rng.random(4000)
    repeat = rng.random(4000) < 0.5
    for t in range(1, len(u)):
        if repeat[t]:
            u[t] = u[t - 1]
    assert SerialEProcess().update(u).max_log_e > THRESHOLD


def test_impossible_draws_and_degenerate_bounds():
    p = np.array([0.5, 0.5, 0.0])
    assert CategoricalEProcess(p).update(np.array([3, 1, 1])).e_value == math.inf
    assert CategoricalEProcess(p).update(np.array([3, 1, 0])).off_support == 0
    assert BernoulliAboveEProcess(0.0).update((1, 10)).log_e == math.inf
    assert BernoulliAboveEProcess(0.0).update((0, 10)).log_e == 0.0
    assert BernoulliAboveEProcess(1.0).update((10, 10)).log_e == 0.0


def test_numerically_stable_at_large_n():
    """Ten million draws: finite log e, no overflow in the mixture, p-value representable."""
    e = CategoricalEProcess(P4).update(np.array([5_000_000, 3_000_000, 1_500_000, 500_000]))
    assert math.isfinite(e.log_e) and e.log_e < 0
    b = BernoulliAboveEProcess(0.6).update((6_100_000, 10_000_000))
    assert math.isfinite(b.log_e) and b.log_e > 1000 and b.e_value == math.inf and b.p_value == 0.0


def test_threshold_and_result_record():
    assert crossing_log_threshold(100, 1e-3) == pytest.approx(math.log(1e5))
    with pytest.raises(ValueError):
        crossing_log_threshold(0, 1e-3)
    e = CategoricalEProcess(P4).update(np.array([1, 0, 0, 9]))
    r = eprocess_result(e, "x/seq_categorical")
    assert r.p_value == pytest.approx(math.exp(-e.max_log_e)) and r.details["anytime_valid"] and r.n == 10
