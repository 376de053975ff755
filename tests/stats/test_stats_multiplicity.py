"""Holm gates the suite at a family-wise level; Benjamini–Hochberg only reports."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from harness.stats.multiplicity import benjamini_hochberg, holm, holm_adjusted
from harness.stats.result import TestResult

# Benjamini & Hochberg (1995), section 4: 15 p-values where Bonferroni and Holm reject 3 and BH rejects 4.
BH_PAPER_PVALUES = [
    0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344,
    0.0459, 0.3240, 0.4262, 0.5719, 0.6528, 0.7590, 1.000,
]  # fmt: skip

FAMILIES = 2000
FAMILY_SIZE = 10


def results_from(pvalues) -> list[TestResult]:
    return [TestResult(f"t{i}", 0.0, float(p), n=1) for i, p in enumerate(pvalues)]


def test_holm_adjusted_by_hand():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 → running max 0.06
    np.testing.assert_allclose(holm_adjusted([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])


def test_holm_rejects_step_down_and_keeps_order_without_mutating():
    inputs = results_from([0.01, 0.04, 0.03, 0.005])
    decided = holm(inputs, 0.05)
    assert [r.reject for r in decided] == [True, False, False, True]
    assert [r.name for r in decided] == ["t0", "t1", "t2", "t3"]
    assert not any(r.reject for r in inputs) and "p_holm" not in inputs[0].details
    assert decided[0].details["p_holm"] == pytest.approx(0.03)


def test_holm_on_bh_paper_example_rejects_three():
    assert sum(r.reject for r in holm(results_from(BH_PAPER_PVALUES), 0.05)) == 3


def test_holm_refuses_nan_pvalues():
    with pytest.raises(ValueError, match="nan"):
        holm(results_from([0.1, float("nan")]), 0.05)


@pytest.mark.parametrize("correlation", [0.0, 0.8])
def test_holm_controls_family_wise_error_on_nulls(correlation):
    # one-sided z-tests with equicorrelated statistics: Holm holds under any dependence
    rng = np.random.default_rng(int(correlation * 10))
    shared = rng.standard_normal((FAMILIES, 1))
    z = np.sqrt(correlation) * shared + np.sqrt(1 - correlation) * rng.standard_normal(
        (FAMILIES, FAMILY_SIZE)
    )
    pvalues = norm.sf(z)  # (families, tests), all nulls true
    any_rejected = sum(bool(np.any(holm_adjusted(row) <= 0.05)) for row in pvalues)
    assert binomtest(any_rejected, FAMILIES).proportion_ci(0.95).low <= 0.05


def test_holm_rejects_the_planted_alternative_only():
    rng = np.random.default_rng(3)
    planted_found, nulls_rejected = 0, 0
    for _ in range(200):
        pvalues = np.append(rng.random(FAMILY_SIZE - 1), 1e-5)  # one planted bug per family
        rejected = holm_adjusted(pvalues) <= 1e-3
        planted_found += rejected[-1]
        nulls_rejected += rejected[:-1].sum()
    assert planted_found == 200 and nulls_rejected <= 1


def test_benjamini_hochberg_on_paper_example_rejects_four():
    discoveries = benjamini_hochberg(BH_PAPER_PVALUES, 0.05)
    np.testing.assert_array_equal(np.flatnonzero(discoveries), [0, 1, 2, 3])


def test_benjamini_hochberg_keeps_input_order_and_steps_up():
    # sorted 0.015, 0.045, 0.05, 0.9 against 0.02, 0.04, 0.06, 0.08: rank 2 fails its own threshold,
    # but rank 3 passes, and step-up rejects everything up to the largest passing rank
    discoveries = benjamini_hochberg([0.05, 0.015, 0.9, 0.045], 0.08)
    np.testing.assert_array_equal(discoveries, [True, True, False, True])
    assert not benjamini_hochberg([0.5, 0.9], 0.05).any()
