"""Pure statistics of the engine level: coarsened PIT (ground truth b), two-sample tests (c), test counts."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kstest

from harness.served import battery

rng = np.random.default_rng(0)
V = 12


def _laws(n: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    logits = g.normal(size=(n, V)) * 2
    p = np.exp(logits)
    return p / p.sum(1, keepdims=True)  # [n, V]


def _top_k(p: np.ndarray, k: int) -> list[dict[int, float]]:
    return [{int(t): float(row[t]) for t in np.argsort(-row)[:k]} for row in p]


def _draw(p: np.ndarray, seed: int) -> list[int]:
    g = np.random.default_rng(seed)
    return [int(g.choice(V, p=row)) for row in p]


@pytest.mark.parametrize("k", [1, 3, V])
def test_coarse_pit_is_uniform_under_h0_for_any_k(k):
    p = _laws(4000, 1)
    u, off, hidden = battery.coarse_pit(_top_k(p, k), _draw(p, 2), np.random.default_rng(3))
    assert off == 0
    assert kstest(u, "uniform").pvalue > 1e-3
    assert (hidden < 1e-12) if k == V else (0 < hidden < 1)


@pytest.mark.stochastic(false_alarm=0.002, seed='100..299')  # P(Binomial(200, 0.05) > 20)
def test_coarse_pit_false_alarm_rate_over_200_seeds_is_nominal():
    """Measured here: 200 independent samples of 500 positions, pooled uniformity at rate 0.05."""
    p = _laws(500, 4)
    listed = _top_k(p, 3)
    rejects = sum(battery.tests_for_pit(*_pit_parts(listed, _draw(p, 100 + s), s), length=1, rate=0.05, power=0.9,
                                        prefix="x")[1].p_value <= 0.05 for s in range(200))
    assert rejects <= 20  # binomial(200, 0.05): mean 10, P(> 20) < 0.002


def _pit_parts(listed, tokens, seed):
    u, off, _ = battery.coarse_pit(listed, tokens, np.random.default_rng(seed))
    return u, np.zeros(len(u), dtype=int), np.arange(len(u)), off


def test_coarse_pit_catches_a_planted_temperature_bug():
    """Planted bug: the engine samples at temperature 0.8 while the scorer reports T = 1."""
    p = _laws(3000, 5)
    hot = p ** 1.25
    hot /= hot.sum(1, keepdims=True)
    results = battery.tests_for_pit(*_pit_parts(_top_k(p, 3), _draw(hot, 6), 7), length=1, rate=1e-3,
                                    power=0.99, prefix="x")
    assert results[1].name == "x/pit_uniform" and results[1].p_value < 1e-6


def test_coarse_pit_flags_tokens_outside_the_support():
    p = np.zeros((10, V))
    p[:, :3] = 1 / 3  # the scorer lists the whole support (rest mass 0)
    _, off, _ = battery.coarse_pit(_top_k(p, 3), [5] * 10, rng)
    assert off == 10


def test_two_sample_passes_same_law_and_catches_a_shifted_one():
    g = np.random.default_rng(8)
    law = np.array([0.5, 0.3, 0.15, 0.05])
    bent = np.array([0.4, 0.35, 0.2, 0.05])  # TV 0.1
    a = [list(g.choice(4, size=2, p=law)) for _ in range(3000)]
    b = [list(g.choice(4, size=2, p=law)) for _ in range(3000)]
    c = [list(g.choice(4, size=2, p=bent)) for _ in range(3000)]
    same = battery.tests_for_two_sample(a, b, length=2, rate=1e-3, power=0.99, prefix="s")
    diff = battery.tests_for_two_sample(a, c, length=2, rate=1e-3, power=0.99, prefix="s")
    assert min(t.p_value for t in same) > 1e-4
    assert min(t.p_value for t in diff) < 1e-8
    assert all(0 < t.detectable_tv < 0.2 for t in same)


def test_two_sample_pools_rare_columns():
    a = [[i] for i in range(200)]  # 200 singletons: nothing has an expected count of 5
    b = [[i] for i in range(200, 400)]
    [pos, joint] = battery.tests_for_two_sample(a, b, length=1, rate=1e-3, power=0.99, prefix="r")
    assert pos.details["columns"] <= 2  # everything pooled into the rest


@pytest.mark.parametrize("length", [1, 3, 5])
def test_declared_counts_match_what_each_battery_emits(length):
    g = np.random.default_rng(length)
    rows = [list(g.integers(0, 4, size=g.integers(1, length + 1))) for _ in range(200)]
    assert len(battery.tests_for_two_sample(rows, rows, length=length, rate=1e-3, power=0.9, prefix="c")) \
        == battery.count_tests_for_two_sample(length)
    u = g.random(50)
    pos = np.zeros(50, dtype=int)  # only position 0 observed: the other positions still emit a (no-data) test
    assert len(battery.tests_for_pit(u, pos, np.arange(50), 0, length=length, rate=1e-3, power=0.9, prefix="p")) \
        == battery.count_tests_for_pit(length)


def test_homogeneity_of_one_shared_outcome_states_a_finite_tv():
    """Both samples all one token (a one-token law): the test still promises something, ~4.6 / n at power 0.99;
    one stray draw in a large sample is caught by the chi-square test instead."""
    from harness.served.battery import homogeneity_test

    same = homogeneity_test([7] * 1000, [7] * 1000, "x", rate=1e-4, power=0.99)
    assert same.p_value == 1.0 and 0.004 < same.detectable_tv < 0.005
    few = homogeneity_test([1, 2], [2, 1], "y", rate=1e-4, power=0.99)
    assert few.detectable_tv == float("inf")
