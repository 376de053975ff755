"""What speculative decoding should deliver, from α, γ and c (Leviathan et al. 2023, §3.1 and §3.4).

Notation (arXiv:2211.17192): α = acceptance rate = Σ min(p, q), γ = drafted tokens per step,
c = cost ratio = time of one draft pass / time of one target pass. With a context-free α, the number
of drafts accepted in a step is a geometric law truncated at γ, so

- tokens per target call  E[n + 1] = (1 − α^{γ+1}) / (1 − α)             (γ + 1 when α = 1),
- walltime speedup        E[n + 1] / (γc + 1)                             (one step = γ drafts + 1 target),
- P(n = k accepted)       α^k (1 − α) for k < γ, and α^γ for k = γ.

Leviathan's speedup assumes a target pass over γ + 1 positions costs what a pass over one does (r = 1:
bound by loading weights, a large model on a GPU). Where it does not (a small model on a CPU is
compute-bound), one step costs r = T(γ+1) / T(1) one-token target passes plus γ drafts of c each, so the
cost model (docs/BENCH.md; measured per machine by `specdec campaign bench_costs`) predicts

- walltime speedup        E[n + 1] / (r + γc)                             (= Leviathan's at r = 1),

with c = one draft pass / one one-token target pass, both measured on the same machine in the same run.

All functions are pure and take plain floats; α = 1 and α = 0 are handled exactly, not by limits of
floating-point division.
"""

from __future__ import annotations

import math


def _check(alpha: float, gamma: int) -> None:
    if not 0.0 <= alpha <= 1.0 or math.isnan(alpha):
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
        raise ValueError(f"gamma must be an integer >= 0, got {gamma!r}")


def expected_tokens_per_call(alpha: float, gamma: int) -> float:
    """E[tokens per target call] = (1 − α^{γ+1}) / (1 − α); γ + 1 at α = 1, 1 at α = 0."""
    _check(alpha, gamma)
    if alpha == 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, gamma: int, c: float) -> float:
    """Leviathan's expected walltime improvement (1 − α^{γ+1}) / ((1 − α)(γc + 1)) over autoregressive."""
    if not c >= 0.0:
        raise ValueError(f"cost ratio c must be >= 0, got {c!r}")
    return expected_tokens_per_call(alpha, gamma) / (gamma * c + 1.0)


def cost_model_speedup(alpha: float, gamma: int, r: float, c: float) -> float:
    """E[tokens per call] / (r + γc): the speedup when verifying γ + 1 positions costs r one-token target passes."""
    if not r > 0.0:
        raise ValueError(f"verify cost ratio r must be > 0, got {r!r}")
    if not c >= 0.0:
        raise ValueError(f"cost ratio c must be >= 0, got {c!r}")
    return expected_tokens_per_call(alpha, gamma) / (r + gamma * c)


def break_even_alpha(gamma: int, r: float, c: float) -> float | None:
    """The α at which the cost model's speedup is 1 (E[tokens per call] = r + γc); None when even α = 1 loses."""
    cost = r + gamma * c
    if expected_tokens_per_call(1.0, gamma) < cost:
        return None
    lo, hi = 0.0, 1.0  # E[tokens per call] rises with α: bisect
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if expected_tokens_per_call(mid, gamma) >= cost else (mid, hi)
    return hi


def accepted_count_pmf(alpha: float, gamma: int) -> list[float]:
    """[γ+1] P(n = k drafts accepted in a step), k = 0..γ (the truncated geometric law)."""
    _check(alpha, gamma)
    return [alpha**k * (1.0 - alpha) for k in range(gamma)] + [alpha**gamma]


def optimal_gamma(alpha: float, c: float, max_gamma: int = 8) -> int:
    """The γ in 1..max_gamma with the largest predicted speedup (the smallest such γ on ties)."""
    return max(range(1, max_gamma + 1), key=lambda g: (predicted_speedup(alpha, g, c), -g))
