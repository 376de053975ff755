"""Sampling from explicit uniforms (inverse CDF), so every random draw can be replayed exactly.

Separating "draw uniforms" from "turn a uniform into a token" lets the harness integrate the
verification rule exactly over a partition of [0, 1), and lets a KV-cached run be compared
token-for-token with a recomputed one given the same draws.
"""

from __future__ import annotations

import torch


def sample_from_uniform(
    probs: torch.Tensor,  # [B, V] float, rows sum to 1 (need not be exactly normalized)
    u: torch.Tensor,  # [B] float in [0, 1)
) -> torch.Tensor:  # [B] int64
    """Inverse-CDF sample: the first index whose cumulative mass exceeds u · total.

    Tokens of probability zero can never be returned: the cumulative sum is flat across them,
    and float rounding at the top end (u · total ≥ the last partial sum) is sent back to the last
    token with positive mass.
    """
    cdf = probs.cumsum(dim=-1, dtype=torch.float64)  # [B, V]; float64: no visible rounding at V = 150k
    target = (u.to(torch.float64) * cdf[:, -1]).unsqueeze(-1)  # [B, 1]
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)  # [B]
    landed_on_zero = probs.gather(-1, idx.unsqueeze(-1)).squeeze(-1) <= 0  # only at the rounding edge
    if bool(landed_on_zero.any()):
        rows = landed_on_zero.nonzero().squeeze(-1)
        positions = torch.arange(probs.shape[-1], device=probs.device)
        idx[rows] = torch.where(probs[rows] > 0, positions, -1).amax(dim=-1)
    return idx


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Sample one token per row of probs [B, V] -> [B] using `generator`."""
    u = torch.rand(probs.shape[0], generator=generator, device=probs.device, dtype=torch.float64)
    return sample_from_uniform(probs, u)


class RowStreams:
    """One independent random stream per batch row.

    Row b's draws do not depend on how many other rows there are or on the order rows are
    processed in, which is what makes "same draws, different caching strategy" comparable.
    """

    def __init__(self, seed: int, n_rows: int, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.generators = []
        for b in range(n_rows):
            g = torch.Generator(device=self.device)
            g.manual_seed(int(seed) * 1_000_003 + b)
            self.generators.append(g)

    def uniforms(self, rows: list[int], n: int) -> torch.Tensor:  # [len(rows), n] float64
        """n fresh uniforms for each listed row (one draw call per row)."""
        out = [torch.rand(n, generator=self.generators[b], device=self.device, dtype=torch.float64)
               for b in rows]
        return torch.stack(out) if out else torch.empty(0, n, dtype=torch.float64, device=self.device)
