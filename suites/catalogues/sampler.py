"""The sampler-level case catalogue: the fixed (p_j, q_j) configurations `specdec verify --level sampler`
runs when no `--cases` are named (harness.check.sampler loads `CASES` through harness.policy).

Each case builds its laws from a generator the harness seeds per run and case; `laws > 1` cases hold a
different law in every row (row b holds law b mod laws), the configuration batch-index slips need.
"""

from __future__ import annotations

import numpy as np

from harness.check.sampler import SamplerCase


def _norm(x: np.ndarray) -> np.ndarray:
    return x / x.sum(axis=-1, keepdims=True)


def _softmax(z: np.ndarray) -> np.ndarray:
    return _norm(np.exp(z - z.max(axis=-1, keepdims=True)))


def _zipf(rows: int, V: int, s: float, rng) -> np.ndarray:
    w = np.arange(1, V + 1, dtype=np.float64) ** -s
    return _norm(np.stack([rng.permutation(w) for _ in range(rows)]))


def _tempered(p: np.ndarray, t: float) -> np.ndarray:
    return _norm(np.where(p > 0, p, 0.0) ** t)


def _top_p(p: np.ndarray, top_p: float) -> np.ndarray:
    order = np.argsort(-p, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(p, order, -1)
    keep_sorted = (np.cumsum(sorted_p, -1) - sorted_p) < top_p
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, -1)
    return _norm(np.where(keep, p, 0.0))


def _top_k(p: np.ndarray, k: int) -> np.ndarray:
    kth = -np.sort(-p, axis=-1)[..., k - 1 : k]
    return _norm(np.where(p >= kth, p, 0.0))


def _case_zipf_high(rng):
    p = _zipf(4, 1000, 1.1, rng)
    return p, _norm(0.97 * _tempered(p[:3], 0.87) + 0.03 / 1000)


def _case_anti(rng):
    z = rng.normal(0, 2.0, size=(4, 64))
    return _softmax(z), _softmax(-z[:3])


def _case_disjoint(rng):
    p = np.zeros((3, 20))
    p[:, :10] = rng.random((3, 10)) + 0.1
    q = np.zeros((2, 20))
    q[:, 10:] = rng.random((2, 10)) + 0.1
    return _norm(p), _norm(q)


def _case_q_zero(rng):
    z = rng.normal(0, 1.5, size=(4, 32))
    p = _softmax(z)
    q = _softmax(z[:3] + rng.normal(0, 0.3, size=(3, 32)))
    q[:, rng.permutation(32)[:11]] = 0.0  # q = 0 on a third of the tokens, p > 0 there
    return p, _norm(q)


def _case_sparse(rng):
    base = _zipf(4, 512, 1.2, rng)
    return _top_p(base, 0.9), _top_k(_tempered(base[:3], 0.9), 50)


def _case_binary(rng):
    a = rng.uniform(0.1, 0.9, size=9)
    p = np.stack([a, 1 - a], axis=1)
    b = np.clip(a[:8] + rng.normal(0, 0.08, size=8), 0.02, 0.98)
    return p, np.stack([b, 1 - b], axis=1)


def _case_llm_width(rng):
    p = _zipf(2, 32000, 1.05, rng)
    return p, _tempered(p[:1], 0.85)


def _case_gamma8(rng):
    z = rng.normal(0, 2.0, size=(9, 100))
    return _softmax(z), _softmax(z[:8] + rng.normal(0, 0.3, size=(8, 100)))


def _case_rows_differ(rng):
    """Four unrelated laws, one per row in turn: a row that reads another row's p or q (a batch-index slip,
    TRT-LLM #15098 class) emits the wrong law; with identical rows such a slip is invisible."""
    z = rng.normal(0, 2.0, size=(4, 3, 12))
    return _softmax(z), _softmax(z[:, :2] + rng.normal(0, 0.8, size=(4, 2, 12)))


def _case_rows_differ_low(rng):
    z = rng.normal(0, 2.0, size=(4, 3, 24))
    return _softmax(z), _softmax(-z[:, :2])


CASES: list[SamplerCase] = [  # cheapest first, so a failing implementation is usually caught in seconds
    SamplerCase("anti-logits", 3, 64, _case_anti, "draft logits = −target logits: low α, residual path dominates"),
    SamplerCase("disjoint-support", 2, 20, _case_disjoint, "p and q on disjoint halves: α = 0, every draft rejected"),
    SamplerCase("q-zero-where-p-positive", 3, 32, _case_q_zero, "q = 0 on a third of the tokens p can emit"),
    # Planned at TV 0.05: they target batch-index slips, whose TV is that of two unrelated laws (≈ 0.5).
    SamplerCase("rows-differ", 2, 12, _case_rows_differ, "4 unrelated laws, row b holds law b mod 4 (q = noisy p)",
                tv=0.05, laws=4),
    SamplerCase("rows-differ-low-alpha", 2, 24, _case_rows_differ_low,
                "4 unrelated laws, row b holds law b mod 4, draft logits = −target logits", tv=0.05, laws=4),
    SamplerCase("binary-gamma8", 8, 2, _case_binary, "V = 2, γ = 8: the smallest vocabulary, the longest block"),
    SamplerCase("gamma8-v100", 8, 100, _case_gamma8, "V = 100, γ = 8, q = noisy p (α ≈ 0.87)"),
    SamplerCase("sparse-top-p-top-k", 3, 512, _case_sparse, "p = top-p 0.9 rows, q = top-k 50 rows (many zeros)"),
    SamplerCase("zipf1000-high-alpha", 3, 1000, _case_zipf_high, "Zipf(1.1) p over 1000 tokens, q = tempered p (α ≈ 0.87)"),
    SamplerCase("llm-width-32000", 1, 32000, _case_llm_width, "V = 32,000 (a real LLM width), Zipf(1.05)", tv=0.05),
]
