"""The Neyman–Pearson bound: the fewest sampler rows any test needs against a known alternative (issue 58).

A sampler-level run observes, per row, the drafts x_j the harness drew (x_j ~ q_j under both hypotheses) and
the emitted tokens; the row's law is a chain over positions: at a reached position j < γ the implementation
tests its draft d(x_j) (x_j, or argmax q for a greedy drafter), accepts it with probability a(d) — emits d and
continues — or emits y ~ G(d, ·) and stops; at j = γ it emits the bonus y ~ B. For a zoo entry that is a
`harness.mutants.rule.Rule` these parts are exact, for the alternative (the mutant) and the null (Algorithm 1,
`Rule()`), so the log-likelihood ratio ℓ of one row is exact. Observations impossible under one hypothesis give
ℓ = ±∞ (a token the null cannot emit decides at once).

`row_moments` computes, per case, by dynamic programming over positions: the probability ρ_h that a row under
hypothesis h has finite ℓ, and the mean and variance of ℓ given that. The oracle sees rows split over the cases
as the plan splits them; its sum S of n rows is approximated as normal given no infinite row, so

    false alarm  ρ0ⁿ · Φ̄((t − n μ0) / (√n σ0)) = α,      power  1 − ρ1ⁿ · Φ((t − n μ1) / (√n σ1)),

and `oracle_rows` is the smallest n with power ≥ β at false-alarm rate α (specdec's defaults 0.001 and 0.99).
No test of the same rows can need fewer (up to the normal approximation, checked by `simulate_np`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from scipy.stats import norm

from harness.mutants.rule import Rule, normalized

DENSE_LIMIT = 4096  # a [V, V + 1] final-law table per position up to this V; above it only separable laws


@dataclasses.dataclass(frozen=True)
class Parts:
    """One hypothesis's chain at one (p, q): per position j < γ the tested token d [γ, V] (index per drafted x),
    acceptance a [γ, V] (per tested token), final law G [γ, V + 1] or [γ, V, V + 1] (per tested token; last cell:
    an id outside the vocabulary); the bonus law B [V + 1]."""

    d: np.ndarray
    a: np.ndarray
    G: np.ndarray
    B: np.ndarray


def _outside(law: torch.Tensor) -> np.ndarray:
    law = law.double().clamp_min(0)
    return np.concatenate([law.numpy(), (1 - law.sum(-1, keepdim=True)).clamp_min(0).numpy()], axis=-1)


def rule_parts(rule: Rule, p: np.ndarray, q: np.ndarray) -> Parts:
    """The chain of `rule` at p [γ+1, V], q [γ, V] (its exact integration, as Rule.position_laws does it)."""
    pt, qt = torch.from_numpy(p), torch.from_numpy(q)
    pv, qv, q_true = rule._views(pt, qt)
    gamma, V = qt.shape
    d = (np.broadcast_to(q_true.argmax(-1).numpy()[:, None], (gamma, V)) if rule.greedy_draft
         else np.broadcast_to(np.arange(V), (gamma, V))).copy()
    a, G = [], []
    for j in range(gamma):
        if rule.final_uses_draft:
            xs = torch.arange(V)
            F = rule.final(pv.expand(V, -1, -1), qv.expand(V, -1, -1), torch.full((V,), j), xs)
        else:
            F = rule.final(pv[None], qv[None], torch.tensor([j]), torch.zeros(1, dtype=torch.long))[0]
        F = normalized(F)
        acc = rule._accept_prob(pv[j], qv[j]).double()
        a.append(acc.clamp(0, 1).numpy())
        G.append(_outside(rule.draw.law(F, acc, True)))
    F = normalized(rule.final(pv[None], qv[None], torch.tensor([gamma]), torch.zeros(1, dtype=torch.long))[0])
    B = _outside(rule.draw.law(F, None, False))
    dense = any(g.ndim == 2 for g in G)
    G = np.stack([g if g.ndim == 2 else (np.broadcast_to(g, (V, V + 1)) if dense else g) for g in G])
    return Parts(d, np.stack(a), G, B)


@dataclasses.dataclass(frozen=True)
class Moments:
    """Row LLR under one hypothesis: P(finite), and its mean and variance given finite."""

    rho: float
    mean: float
    var: float


def _llr(p1: np.ndarray, p0: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(p1) - np.log(p0)


def _acc(w, ell, bad, P, A, B):
    """Σ over outcomes (weights w, LLR ell) of what a good outcome followed by the suffix (P, A, B) adds."""
    good = (w > 0) & ~bad
    w, ell = np.where(good, w, 0.0), np.where(good, ell, 0.0)
    return (w * P).sum(), (w * (ell * P + A)).sum(), (w * (ell * ell * P + 2 * ell * A + B)).sum()


def row_moments(alt: Parts, null: Parts, q: np.ndarray, hypothesis: int) -> Moments:
    """ρ, mean, variance of one row's LLR log P1 / P0 under `hypothesis` (1: the alternative, 0: the null)."""
    gamma, V = q.shape
    h = alt if hypothesis == 1 else null
    sign = 1 if hypothesis == 1 else -1  # bad outcome: ℓ = +∞ under the alternative, −∞ under the null

    def is_bad(ell):
        return np.isinf(ell) & (np.sign(ell) == sign) | np.isnan(ell)

    ell_b = _llr(alt.B, null.B)
    P, A, B = _acc(h.B, ell_b, is_bad(ell_b), 1.0, 0.0, 0.0)
    for j in reversed(range(gamma)):
        qx = normalized(torch.from_numpy(q[j])).numpy()
        x = np.arange(V)
        # continue: the tested token d(x) is accepted and emitted
        cont_h = h.a[j][h.d[j]] * qx
        c1 = alt.a[j][alt.d[j]] * (alt.d[j] == x)  # P1(continue emitting x | x)
        c0 = null.a[j][null.d[j]] * (null.d[j] == x)
        # (a greedy drafter's continuation emitting d(x) ≠ x is impossible for the null: ℓ = +∞, left out of ρ1)
        self_h = cont_h * (h.d[j] == x)
        ell_c = _llr(c1, c0)
        Pn, An, Bn = _acc(self_h, ell_c, is_bad(ell_c), P, A, B)
        # stop: rejected, y ~ G(d(x), ·)
        r1, r0 = 1 - alt.a[j][alt.d[j]], 1 - null.a[j][null.d[j]]  # [V_x]
        rh = r1 if hypothesis == 1 else r0
        if alt.G.ndim == 3 or null.G.ndim == 3:
            g1 = alt.G[j][alt.d[j]] if alt.G.ndim == 3 else np.broadcast_to(alt.G[j], (V, V + 1))[alt.d[j]]
            g0 = null.G[j][null.d[j]] if null.G.ndim == 3 else np.broadcast_to(null.G[j], (V, V + 1))[null.d[j]]
            s1, s0 = r1[:, None] * g1, r0[:, None] * g0
            ell_s = _llr(s1, s0)
            w = qx[:, None] * (s1 if hypothesis == 1 else s0)
            sp, sa, sb = _acc(w, ell_s, is_bad(ell_s), 1.0, 0.0, 0.0)
        else:  # separable: ℓ(x, y) = u(x) + v(y)
            u, v = _llr(r1, r0), _llr(alt.G[j], null.G[j])
            gh = alt.G[j] if hypothesis == 1 else null.G[j]
            wx = qx * rh
            gx = (wx > 0) & ~is_bad(u)
            gy = (gh > 0) & ~is_bad(v)
            wx, u = np.where(gx, wx, 0.0), np.where(gx, u, 0.0)
            wy, v = np.where(gy, gh, 0.0), np.where(gy, v, 0.0)
            X0, X1, X2 = wx.sum(), (wx * u).sum(), (wx * u * u).sum()
            Y0, Y1, Y2 = wy.sum(), (wy * v).sum(), (wy * v * v).sum()
            sp, sa, sb = X0 * Y0, X1 * Y0 + X0 * Y1, X2 * Y0 + 2 * X1 * Y1 + X0 * Y2
        P, A, B = Pn + sp, An + sa, Bn + sb
    rho = float(P)
    if rho <= 0:
        return Moments(0.0, 0.0, 0.0)
    mean = float(A / rho)
    return Moments(rho, mean, max(0.0, float(B / rho - mean * mean)))


def needs_dense(rule: Rule) -> bool:
    """Whether the rule's final law depends on the rejected draft (a [V, V] table): probed on a 3-token law."""
    if rule.final_uses_draft:
        return True
    F, a = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    return rule.draw.law(F, a, True).dim() == 2


def case_moments(rule: Rule, p: np.ndarray, q: np.ndarray) -> tuple[Moments, Moments] | None:
    """(under the null, under the alternative) for one case; None where the tables are too large."""
    V = q.shape[1]
    if V > DENSE_LIMIT and needs_dense(rule):  # a [V, V] table per position would not fit in memory
        return None
    alt, null = rule_parts(rule, p, q), rule_parts(Rule(), p, q)
    return row_moments(alt, null, q, 0), row_moments(alt, null, q, 1)


def np_power(n: float, parts: list[tuple[float, Moments, Moments]], alpha: float) -> float:
    """Power of the NP test on n rows split over cases with weights w (normal approximation given finite rows)."""
    log_rho0 = sum(w * math.log(m0.rho) if m0.rho > 0 else -math.inf for w, m0, _ in parts) * n
    log_rho1 = sum(w * math.log(m1.rho) if m1.rho > 0 else -math.inf for w, _, m1 in parts) * n
    if log_rho0 <= math.log(alpha):  # reject whenever no row is impossible under the alternative: FA ≤ α
        return 1.0
    m0 = n * sum(w * a.mean for w, a, _ in parts)
    s0 = math.sqrt(n * sum(w * a.var for w, a, _ in parts))
    m1 = n * sum(w * b.mean for w, _, b in parts)
    s1 = math.sqrt(n * sum(w * b.var for w, _, b in parts))
    z = norm.isf(alpha / math.exp(log_rho0))
    t = m0 + z * s0
    stay = norm.cdf((t - m1) / s1) if s1 > 0 else float(t >= m1)
    return 1.0 - math.exp(log_rho1) * stay


def oracle_rows(parts: list[tuple[float, Moments, Moments]], alpha: float = 1e-3, power: float = 0.99,
                limit: float = 1e12) -> float:
    """The smallest n (rows, continuous) with NP power ≥ `power` at false-alarm `alpha`; inf beyond `limit`."""
    if not parts:
        return math.nan
    lo, hi = 0.0, 1.0
    while np_power(hi, parts, alpha) < power:
        lo, hi = hi, hi * 2
        if hi > limit:
            return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        if np_power(mid, parts, alpha) >= power:
            hi = mid
        else:
            lo = mid
        if hi - lo < max(0.5, 1e-4 * hi):
            break
    return math.ceil(hi)


def row_llr(alt: Parts, null: Parts, x: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """The exact LLR of observed rows (drafts x [R, γ], emitted tokens [R, γ+1] −1 padded; an id ≥ V or < −1
    is the outside cell)."""
    R, gamma = x.shape
    V = alt.B.shape[0] - 1
    out = np.zeros(R)
    alive = np.ones(R, dtype=bool)
    for j in range(gamma + 1):
        y = tokens[:, j]
        y_idx = np.where((y >= 0) & (y < V), y, V)
        if j == gamma:
            out[alive] += _llr(alt.B[y_idx], null.B[y_idx])[alive]
            break
        cont = alive & (tokens[:, j + 1] != -1) if j + 1 <= gamma else np.zeros(R, bool)
        stop = alive & ~cont
        xj = x[:, j]
        d1, d0 = alt.d[j][xj], null.d[j][xj]
        c1 = alt.a[j][d1] * (y == d1)
        c0 = null.a[j][d0] * (y == d0)
        out[cont] += _llr(c1, c0)[cont]

        out[stop] += _llr(_stop_prob(alt, j, d1, y_idx), _stop_prob(null, j, d0, y_idx))[stop]
        alive = cont
    return out


def _stop_prob(parts: Parts, j: int, d: np.ndarray, y: np.ndarray) -> np.ndarray:
    g = parts.G[j][d, y] if parts.G.ndim == 3 else parts.G[j][y]
    return (1 - parts.a[j][d]) * g


def simulate_np(llr0: np.ndarray, llr1: np.ndarray, n: int, alpha: float, reps: int, seed: int = 0) -> float:
    """Monte-Carlo power of the NP test on n rows, resampling per-row LLRs drawn under each hypothesis (the
    threshold is the empirical 1 − α quantile of the null sums)."""
    rng = np.random.default_rng(seed)
    s0 = np.array([llr0[rng.integers(0, len(llr0), n)].sum() for _ in range(reps)])
    s1 = np.array([llr1[rng.integers(0, len(llr1), n)].sum() for _ in range(reps)])
    t = np.quantile(s0, 1 - alpha)
    return float((s1 > t).mean())


def minimax_identity_rows(V: int, tv: float) -> float:
    """√V / ε²: the order of the samples identity testing of a law over V tokens at TV ε needs (Paninski 2008;
    Valiant & Valiant 2014), constants and the dependence on α and β left out."""
    return math.sqrt(V) / tv ** 2


def law_moments(laws: np.ndarray, p: np.ndarray, reach: np.ndarray) -> tuple[Moments, Moments]:
    """The emitted-token oracle: it sees, per row, the token emitted at each reached position and knows the
    alternative's per-position laws (`laws` [γ+1, V], rows summing to < 1 where mass leaves the vocabulary) and
    p [γ+1, V]; a position is reached with the alternative's probability `reach` [γ+1] under both hypotheses (a
    lossless rule may accept at any rate: losslessness fixes the emitted laws, not the acceptance). Its LLR is
    Σ_j log(law_j(y_j) / p_j(y_j)) over reached positions, positions taken as independent of reaching (an
    approximation). Returns (under p, under the alternative)."""
    laws = np.concatenate([laws, np.clip(1 - laws.sum(-1, keepdims=True), 0, None)], -1)
    p = np.concatenate([p / p.sum(-1, keepdims=True), np.zeros((p.shape[0], 1))], -1)
    lam = _llr(laws, p)
    out = []
    for w_all, sign in ((p, -1), (laws, 1)):
        rho, mean, second, means = 1.0, 0.0, 0.0, []
        for j in range(p.shape[0]):
            w = w_all[j]
            good = (w > 0) & ~(np.isinf(lam[j]) & (np.sign(lam[j]) == sign)) & ~np.isnan(lam[j])
            g = w[good].sum()
            rho *= 1 - reach[j] * (1 - g)
            m = (w[good] * lam[j][good]).sum() / g if g > 0 else 0.0
            s = (w[good] * lam[j][good] ** 2).sum() / g if g > 0 else 0.0
            second += reach[j] * s + 2 * reach[j] * m * sum(means)  # E[(Σ B_j λ_j)²], B_j nested, λ independent
            means.append(m)
            mean += reach[j] * m
        out.append(Moments(rho, mean, max(0.0, second - mean * mean)))
    return out[0], out[1]


def case_plans(case, seed: int) -> list:
    """The (p, q) of every law a sampler case holds for this seed, as the check builds them: one CasePlan, or one
    per law for a case whose rows hold different laws (harness.check.sampler_cases.plan_cases builds the first only)."""
    import zlib

    from harness.check.sampler import SamplerCase, plan_cases

    if case.laws == 1:
        return plan_cases([case], seed)
    p, q = case.build(np.random.default_rng([seed, zlib.crc32(case.name.encode())]))
    return [plan_cases([SamplerCase(case.name, case.gamma, case.vocab, lambda rng, r=r: (p[r], q[r]),
                                    case.description, case.tv)], seed)[0] for r in range(case.laws)]
