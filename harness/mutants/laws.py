"""Exact laws and distances for sampler-level implementations, and the (p, q) families to use them on.

- `exact_tv(impl, p, q)`: total variation between an implementation's exact first-token law and p₀
  (the ε it presents to a check), `exact_tvs` the same at every position;
- `algorithm1_law(p, q)`: the single-step law of Algorithm 1, min(p, q) + (1 − α)·norm((p − q)₊) (= p);
- `zipf_law`, `draft_with_alpha`: a Zipf-like p and a q with a chosen α = Σ min(p, q), as in STATS.md.
"""

from __future__ import annotations

import torch

from harness.errors import HarnessError
from harness.mutants.base import Implementation


def tv(law: torch.Tensor, p: torch.Tensor) -> float:
    """Total variation between two laws over [V]; mass missing from a row (ids ≥ V) counts as an extra cell."""
    law, p = law.double(), p.double()
    outside = abs(float((1 - law.sum()) - (1 - p.sum())))
    return 0.5 * (float((law - p).abs().sum()) + outside)


def algorithm1_law(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """First-token law of Algorithm 1 for one position, p [V], q [V] (equals p up to rounding)."""
    p, q = p.double() / p.double().sum(), q.double() / q.double().sum()
    overlap = torch.minimum(p, q)
    excess = (p - q).clamp_min(0)
    alpha = overlap.sum()
    return overlap + (1 - alpha) * (excess / excess.sum() if excess.sum() > 0 else p)


def _require_law(impl: Implementation) -> None:
    if impl.position_laws is None:
        raise HarnessError(f"{impl.name} has no exact law (not analytic): estimate its TV by sampling")


def exact_tvs(impl: Implementation, p: torch.Tensor, q: torch.Tensor) -> list[float]:
    """p [γ+1, V], q [γ, V] -> [γ+1] TV(law of the token at position j | j reached, p_j)."""
    _require_law(impl)
    laws = impl.position_laws(p, q)
    target = p.double() / p.double().sum(-1, keepdim=True)
    return [tv(laws[j], target[j]) for j in range(laws.shape[0])]


def exact_tv(impl: Implementation, p: torch.Tensor, q: torch.Tensor) -> float:
    """TV between the implementation's exact first-token law and p₀ (p [γ+1, V], q [γ, V])."""
    if impl.exact_law is None:
        raise HarnessError(f"{impl.name} has no exact law (not analytic): estimate its TV by sampling")
    return tv(impl.exact_law(p, q), p[0].double() / p[0].double().sum())


def zipf_law(k: int, s: float = 1.1) -> torch.Tensor:
    """p_i ∝ i^(−s), i = 1..k, float64."""
    weights = torch.arange(1, k + 1, dtype=torch.float64) ** -s
    return weights / weights.sum()


def draft_with_alpha(p: torch.Tensor, alpha: float, seed: int = 0) -> torch.Tensor:
    """q = norm(p·exp(σ·z)), z ~ N(0, 1) fixed by `seed`, with σ bisected so Σ min(p, q) = alpha (±1e-9)."""
    p = p.double()
    z = torch.randn(p.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)

    def draft(sigma: float) -> torch.Tensor:
        w = p * torch.exp(sigma * z - sigma * z.max())  # shifted: no overflow at large σ
        return w / w.sum()

    lo, hi = 0.0, 1.0
    while float(torch.minimum(p, draft(hi)).sum()) > alpha:
        hi *= 2
        if hi > 1e4:
            raise HarnessError(f"cannot reach alpha={alpha} for this p by log-normal noise")
    for _ in range(200):
        mid = (lo + hi) / 2
        if float(torch.minimum(p, draft(mid)).sum()) > alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return draft((lo + hi) / 2)
