"""Cell pooling for chi-square tests on one categorical with known p.

Pearson's X² and the G statistic follow their chi-square limits only when every expected count is
adequate; with many tiny p_i the null tail of X² is far heavier than χ²(k−1) (exact null variance
2(k−1) + (Σ1/p_i − k² − 2k + 2)/n). The standard cure is to merge cells with expected count below a
threshold (the classic rule of thumb is 5) into one "rest" cell. The grouping depends only on p and n,
never on the observed counts, so pooling does not bias the test.

Lives apart from `categorical` because the planner (`power.power_against`) must pool an alternative q
exactly the way the test pools the data.
"""

from __future__ import annotations

import numpy as np

DEFAULT_MIN_EXPECTED = 5.0


def pool_labels(p: np.ndarray, n: int, min_expected: float = DEFAULT_MIN_EXPECTED) -> np.ndarray:
    """Group label for every cell: kept cells get 0..m−1 in original order, pooled cells share one label.

    p: (k,) probabilities. Cells with n·p < min_expected go to a "rest" group (last label). If the rest
    group is itself below min_expected it is merged into the kept cell with the smallest p, so no pooled
    cell is left under-filled. With no kept cell at all everything lands in one group (df = 0).
    """
    p = np.asarray(p, dtype=np.float64)
    kept = n * p >= min_expected
    labels = np.empty(p.shape, dtype=np.int64)
    labels[kept] = np.arange(int(kept.sum()))
    n_kept = int(kept.sum())
    if n_kept == len(p):
        return labels
    labels[~kept] = n_kept  # the rest cell comes last
    if n_kept > 0 and n * p[~kept].sum() < min_expected:
        smallest_kept = np.flatnonzero(kept)[np.argmin(p[kept])]
        labels[~kept] = labels[smallest_kept]
    return labels


def pool_cells(
    counts: np.ndarray, p: np.ndarray, min_expected: float = DEFAULT_MIN_EXPECTED
) -> tuple[np.ndarray, np.ndarray]:
    """Pooled (counts, p): cells with expected count n·p < min_expected merged into one rest cell.

    counts: (k,) non-negative integers; p: (k,) probabilities. Returns (m,) int64 counts and (m,) float64
    probabilities with the same totals as the inputs.
    """
    counts = np.asarray(counts)
    labels = pool_labels(p, int(counts.sum()), min_expected)
    return pool_by_labels(counts, labels).astype(np.int64), pool_by_labels(p, labels)


def pool_by_labels(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Sum `values` (k,) within groups given by `labels` (k,) → (m,) float64."""
    return np.bincount(labels, weights=np.asarray(values, dtype=np.float64), minlength=labels.max() + 1)
