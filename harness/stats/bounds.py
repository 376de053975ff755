"""How many drafts a lossless verification rule can accept: the token-level and the universal bound.

Whatever the rule, the first k emitted tokens of a lossless step follow ⊗_{i<k} p_i and the drafts
follow ⊗_{i<k} q_i, so accepting all of the first k drafts is a coupling event of the two product laws:

    P(first k drafts accepted) ≤ U_k = Σ_x min(Π_{i<k} p_i(x_i), Π_{i<k} q_i(x_i)) = 1 − TV(⊗p, ⊗q).

The token-by-token rule attains T_k = Π_{i<k} Σ min(p_i, q_i). Block verification (Sun et al. 2024,
arXiv 2403.10444) attains B_k = E_{x~⊗q}[ρ_k(x)], with its weights ρ_0 = 1, ρ_i = min(1, ρ_{i−1}·p/q)
(checked by exact enumeration in tests/specdec_ref/test_block.py), and T_k ≤ B_k ≤ U_k. B_k = U_k at k = 1 but not
beyond in general (the per-step cap at 1 loses mass): block verification maximises the expected number
of accepted drafts, not every P(first k accepted) at once. So U_k gates (a measured acceptance above it
is a bug in any family) and B_k, T_k are the yardsticks for "block optimal" / "token-level optimal".

U_k is computed exactly by a meet-in-the-middle enumeration: split the k positions into a prefix X and
a suffix Y with product laws (A, C) on X and (b, d) on Y; min(A·b, C·d) is A·b exactly when the ratio
A/C ≤ d/b, so with X sorted by A/C and cumulative sums, each y costs one binary search. When either half
is too large to enumerate, y is sampled from its draft law instead: U_k = E_{y~d}[g(y)] with
g(y) = Σ_x min(A·b/d, C) ∈ [0, 1], and the gate uses a rigorous upper confidence bound that errs with probability at most δ
(the better of Hoeffding and the empirical Bernstein bound of Maurer & Pontil 2009, Thm 4, each at δ/2),
so a correct verifier is never failed because of the estimate (except with probability δ).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

ENUMERATION_LIMIT = 1 << 18  # largest half (support product) that is enumerated exactly
MC_SAMPLES = 200_000  # suffix draws when a half is too large
DEFAULT_DELTA = 1e-9  # P(the Monte Carlo upper bound is below the true bound)


@dataclasses.dataclass(frozen=True)
class AcceptanceBound:
    """U_k for k = 1..γ: `value` is exact where `exact`, else a (1 − δ) upper confidence bound."""

    value: np.ndarray  # [γ] the bound the gate uses (exact value or upper confidence bound)
    estimate: np.ndarray  # [γ] the exact value or the Monte Carlo point estimate
    exact: np.ndarray  # [γ] bool
    delta: float


def token_level_optimum(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """p [γ(+1), V], q [γ, V] -> [γ]: T_k = Π_{i<k} Σ min(p_i, q_i), the token-level rule's P(first k accepted)."""
    p, q = _laws(p, q)
    return np.cumprod(np.minimum(p, q).sum(-1))


def block_acceptance(p: np.ndarray, q: np.ndarray, *, samples: int = MC_SAMPLES, seed: int = 0) -> np.ndarray:
    """p [γ(+1), V], q [γ, V] -> [γ]: B_k = E_{x~⊗q}[ρ_k(x)], block verification's P(first k accepted).

    Exact while the distinct (ρ, prefix) atoms fit ENUMERATION_LIMIT (equal ρ values merge, e.g. all
    ρ = 1); beyond, `samples` atoms are drawn from the current atom law and continued with drafts
    x_i ~ q_i (an estimate: B_k is a yardstick for reports, never a gate)."""
    p, q = _laws(p, q)
    rng = np.random.default_rng(seed)
    rho, weight = np.ones(1), np.ones(1)  # atoms of the law of ρ_i under x ~ ⊗ q
    sampled = False
    out = []
    for i in range(len(q)):
        if not sampled and len(rho) * int((q[i] > 0).sum()) > ENUMERATION_LIMIT:
            rho, weight, sampled = rng.choice(rho, size=samples, p=weight / weight.sum()), None, True
        if sampled:
            x = _draw(q[i], len(rho), rng)
            rho = np.minimum(1.0, rho * _ratio(p[i, x], q[i, x]))
            out.append(float(rho.mean()))
            continue
        support = np.flatnonzero(q[i] > 0)
        rho = np.minimum(1.0, np.multiply.outer(rho, _ratio(p[i, support], q[i, support]))).ravel()
        weight = np.multiply.outer(weight, q[i, support]).ravel()
        rho, inverse = np.unique(rho, return_inverse=True)
        weight = np.bincount(inverse.ravel(), weights=weight, minlength=len(rho))
        out.append(float(rho @ weight))
    return np.array(out)


def universal_acceptance_bound(p: np.ndarray, q: np.ndarray, *, delta: float = DEFAULT_DELTA,
                               samples: int = MC_SAMPLES, seed: int = 0) -> np.ndarray:
    """p [γ(+1), V], q [γ, V] -> [γ]: U_k = Σ_x min(Πp, Πq) over the first k positions, k = 1..γ
    (exact, or an upper confidence bound, wrong with probability ≤ δ, where enumeration is too large)."""
    return acceptance_bound(p, q, delta=delta, samples=samples, seed=seed).value


def acceptance_bound(p: np.ndarray, q: np.ndarray, *, delta: float = DEFAULT_DELTA,
                     samples: int = MC_SAMPLES, seed: int = 0) -> AcceptanceBound:
    """`universal_acceptance_bound` with the point estimates and which entries are exact."""
    p, q = _laws(p, q)
    rng = np.random.default_rng(seed)
    supports = [np.flatnonzero((p[i] > 0) | (q[i] > 0)) for i in range(len(q))]
    pr = [p[i, s] for i, s in enumerate(supports)]
    qr = [q[i, s] for i, s in enumerate(supports)]
    value, estimate, exact = [], [], []
    for k in range(1, len(q) + 1):
        v, e, is_exact = _bound_k(pr[:k], qr[:k], delta, samples, rng)
        value.append(v)
        estimate.append(e)
        exact.append(is_exact)
    return AcceptanceBound(np.array(value), np.array(estimate), np.array(exact), delta)


def _laws(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if q.ndim != 2 or p.ndim != 2 or p.shape[1] != q.shape[1] or p.shape[0] not in (q.shape[0], q.shape[0] + 1):
        raise ValueError(f"need p [γ or γ+1, V] and q [γ, V], got {p.shape} and {q.shape}")
    p = p[: q.shape[0]]
    return p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)


def _product(laws: list[np.ndarray]) -> np.ndarray:
    """Flattened product law over the listed positions (the empty product is the point mass [1])."""
    out = np.ones(1)
    for law in laws:
        out = np.multiply.outer(out, law).ravel()
    return out


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.inf)


class _SortedPrefix:
    """Prefix laws A (target) and C (draft) sorted by A/C, for Σ_x min(A·b, C·d) in one binary search."""

    def __init__(self, A: np.ndarray, C: np.ndarray):
        keep = (A > 0) | (C > 0)
        A, C = A[keep], C[keep]
        t = _ratio(A, C)
        order = np.argsort(t, kind="stable")
        self.t = t[order]
        self.cum_A = np.concatenate([[0.0], np.cumsum(A[order])])  # Σ A over the first i sorted x
        self.cum_C = np.concatenate([[0.0], np.cumsum(C[order])])
        self.total_C = self.cum_C[-1]

    def split(self, b: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each y: (Σ_{A/C ≤ d/b} A, Σ_{A/C > d/b} C); min(A·b, C·d) = A·b on the first set, C·d on the other."""
        i = np.searchsorted(self.t, _ratio(d, b), side="right")
        return self.cum_A[i], self.total_C - self.cum_C[i]


def _sizes(laws: list[np.ndarray]) -> list[int]:
    return [len(law) for law in laws]


def _split_point(sizes: list[int]) -> tuple[int, bool]:
    """Prefix length m: balanced halves if both fit (exact), else the longest prefix that fits (Monte Carlo)."""
    k = len(sizes)
    prefix = [math.prod(sizes[:m]) for m in range(k + 1)]
    suffix = [math.prod(sizes[m:]) for m in range(k + 1)]
    fits = [m for m in range(k + 1) if prefix[m] <= ENUMERATION_LIMIT and suffix[m] <= ENUMERATION_LIMIT]
    if fits:
        return min(fits, key=lambda m: max(prefix[m], suffix[m])), True
    return max(m for m in range(k) if prefix[m] <= ENUMERATION_LIMIT), False


def _bound_k(p: list[np.ndarray], q: list[np.ndarray], delta: float, samples: int, rng) -> tuple[float, float, bool]:
    m, exact = _split_point(_sizes(q))
    prefix = _SortedPrefix(_product(p[:m]), _product(q[:m]))
    if exact:
        b, d = _product(p[m:]), _product(q[m:])
        sum_A, sum_C = prefix.split(b, d)
        value = float(np.clip((b * sum_A + d * sum_C).sum(), 0.0, 1.0))
        return value, value, True
    # y ~ ⊗ q over the suffix; g(y) = Σ_x min(A·b/d, C) lies in [0, 1] (it is ≤ Σ_x C = 1).
    draws = [_draw(qi, samples, rng) for qi in q[m:]]
    b = np.prod([pi[y] for pi, y in zip(p[m:], draws, strict=True)], axis=0)
    d = np.prod([qi[y] for qi, y in zip(q[m:], draws, strict=True)], axis=0)
    sum_A, sum_C = prefix.split(b, d)
    g = np.clip(_ratio(b, d) * sum_A + sum_C, 0.0, 1.0)  # d > 0 for every drawn y
    mean = float(g.mean())
    return min(1.0, mean + _upper_slack(g, delta)), mean, False


def _draw(law: np.ndarray, n: int, rng) -> np.ndarray:
    """n indices drawn from `law` by inverse CDF over its positive entries (rng.choice is 5× slower)."""
    positive = np.flatnonzero(law > 0)
    cdf = np.cumsum(law[positive])
    i = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    return positive[np.minimum(i, len(positive) - 1)]


def _upper_slack(g: np.ndarray, delta: float) -> float:
    """One-sided (1 − δ) slack for the mean of [0, 1] values: min(Hoeffding, empirical Bernstein), δ/2 each."""
    n = len(g)
    log_term = math.log(2 / delta)  # each bound at δ/2
    hoeffding = math.sqrt(log_term / (2 * n))
    bernstein = math.sqrt(2 * float(g.var(ddof=1)) * log_term / n) + 7 * log_term / (3 * (n - 1))
    return min(hoeffding, bernstein)
