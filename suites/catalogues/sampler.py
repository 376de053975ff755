"""The sampler-level case catalogue: the fixed (p_j, q_j) configurations `specdec verify --level sampler`
runs when no `--cases` are named (harness.check.sampler_cases loads `CASES` through harness.policy).

Each case builds its laws from a generator the harness seeds per run and case; `laws > 1` cases hold a
different law in every row (row b holds law b mod laws), the configuration batch-index slips need.
"""

from __future__ import annotations

import numpy as np

from harness.check.sampler import SamplerCase


def _norm(x: np.ndarray) -> np.ndarray:
    return x / x.sum(axis=-1, keepdims=True)


def softmax(z: np.ndarray) -> np.ndarray:
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
    return softmax(z), softmax(-z[:3])


def _case_disjoint(rng):
    p = np.zeros((3, 20))
    p[:, :10] = rng.random((3, 10)) + 0.1
    q = np.zeros((2, 20))
    q[:, 10:] = rng.random((2, 10)) + 0.1
    return _norm(p), _norm(q)


def _case_q_zero(rng):
    z = rng.normal(0, 1.5, size=(4, 32))
    p = softmax(z)
    q = softmax(z[:3] + rng.normal(0, 0.3, size=(3, 32)))
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
    return softmax(z), softmax(z[:8] + rng.normal(0, 0.3, size=(8, 100)))


def _case_rows_differ(rng):
    """Four unrelated laws, one per row in turn: a row that reads another row's p or q (a batch-index slip,
    TRT-LLM #15098 class) emits the wrong law; with identical rows such a slip is invisible."""
    z = rng.normal(0, 2.0, size=(4, 3, 12))
    return softmax(z), softmax(z[:, :2] + rng.normal(0, 0.8, size=(4, 2, 12)))


def _case_rows_differ_low(rng):
    z = rng.normal(0, 2.0, size=(4, 3, 24))
    return softmax(z), softmax(-z[:, :2])


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


# --- opt-in: deep-tail probes (issue 46) ------------------------------------------------------------------
# A head and a long flat tail whose tokens each hold ~0.32·2^-24 of the head's probability: below what a
# 24-bit uniform, an exponential race floored at 2^-24 or a float32 running sum can resolve, far above what a
# float64 implementation resolves (2^-53). Run with `--cases tail-v131072` (or `--cases default tail-v131072`,
# not in the default plan: measured cost in results/tail/README.md).
TAIL_VOCAB = 1 << 17  # 131,072 tokens
TAIL_MASS = 2.5e-3  # the bonus law's tail mass; the residual's is the same (see _case_tail)
TAIL_DRAFT_OFF_HEAD = 0.5  # β: the draft puts 1 − β on the target's head and β on one tail token d


def _head_and_tail(rng, V: int, head: int, tail_mass: float) -> np.ndarray:
    w = rng.uniform(0.8, 1.2, size=V)  # not exactly flat, every tail token ≤ 1.2 × the mean (< 2^-25)
    w[head] = 0.0
    p = tail_mass * w / w.sum()
    p[head] = 1.0 - tail_mass
    return p


def _case_tail(rng):
    """γ = 1. Position 0: p₀ = head h₀ + tail t₀ = β·t; q₀ = (1 − β) on h₀ and β on a tail token d, so α ≈ 1 − β
    and every tail token at position 0 is a residual draw, from norm((p₀ − q₀)₊) = head (β − t₀) + tail t₀ — a
    residual whose tail is ≈ t of its mass, like the bonus law. Position 1 (the bonus, reached with
    probability α ≈ 0.5): p₁ = head h₁ + tail t. Heads sit at low ids: a float32 running sum loses every tail
    token after its head."""
    V, t, beta = TAIL_VOCAB, TAIL_MASS, TAIL_DRAFT_OFF_HEAD
    h0, h1 = int(rng.integers(0, 16)), int(rng.integers(16, 32))
    d = int(rng.integers(V // 2, V))
    p0 = _head_and_tail(rng, V, h0, beta * t)
    p1 = _head_and_tail(rng, V, h1, t)
    q0 = np.zeros(V)
    q0[h0], q0[d] = 1.0 - beta, beta
    return np.stack([p0, p1]), q0[None]


OPT_IN_CASES: list[SamplerCase] = [  # selectable by name (--cases), never in the default plan
    # Planned by its deep-tail test (harness.check.sampler_tail.TAIL_PROBE); the omnibus tests at TV 0.1 only,
    # so that they do not ask for more rows than the tail test (the tail is what this case is for).
    SamplerCase("tail-v131072", 1, TAIL_VOCAB, _case_tail,
                f"V = 131,072, one head + a flat tail ({TAIL_MASS:g} of the bonus law, tail tokens ≈ 0.32·2^-24 "
                "of the head) on residual and bonus draws", tv=0.1),
]
