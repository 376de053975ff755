"""Sampling from explicit uniforms (inverse CDF), so every random draw can be replayed exactly.

Separating "draw uniforms" from "turn a uniform into a token" lets the harness integrate the
verification rule exactly over a partition of [0, 1), and lets a KV-cached run be compared
token-for-token with a recomputed one given the same draws.
"""

from __future__ import annotations

import torch

# Vocabularies at least this wide are searched in two levels (block sums, then one block), which
# reads each row once instead of writing a float64 cumulative sum of it.
_BLOCK = 256
_TWO_LEVEL_MIN_V = 16 * _BLOCK


def sample_from_uniform(
    probs: torch.Tensor,  # [B, V] float, rows sum to 1 (need not be exactly normalized)
    u: torch.Tensor,  # [B] float in [0, 1)
) -> torch.Tensor:  # [B] int64
    """Inverse-CDF sample: the first index whose cumulative mass exceeds u · total.

    Tokens of probability zero can never be returned: the cumulative sum is flat across them,
    and float rounding at the top end (u · total ≥ the last partial sum) is sent back to the last
    token with positive mass. A row with no mass at all gives -1.

    Wide rows are searched in two levels: the block of 256 tokens where the cumulative block sums
    pass u · total, then the token inside that block (float64 within the block). In exact
    arithmetic this is the same index as one cumulative sum over the row.
    """
    V = probs.shape[-1]
    if V < _TWO_LEVEL_MIN_V or probs.dim() != 2:
        cdf = probs.cumsum(dim=-1, dtype=torch.float64)  # [B, V]; float64: no visible rounding at V = 150k
        target = (u.to(torch.float64) * cdf[:, -1]).unsqueeze(-1)  # [B, 1]
        idx = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=V - 1)  # [B]
    else:
        idx = _two_level_search(probs, u)
    landed_on_zero = probs.gather(-1, idx.unsqueeze(-1)).squeeze(-1) <= 0  # only at the rounding edge
    if bool(landed_on_zero.any()):
        rows = landed_on_zero.nonzero().squeeze(-1)
        positions = torch.arange(V, device=probs.device)
        idx[rows] = torch.where(probs[rows] > 0, positions, -1).amax(dim=-1)
    return idx


def _two_level_search(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:  # [B, V], [B] -> [B]
    B, V = probs.shape
    n_full = V // _BLOCK
    head = probs[:, : n_full * _BLOCK].unflatten(-1, (n_full, _BLOCK))  # [B, n_full, 256], a view
    accumulate = probs.dtype if probs.dtype in (torch.float32, torch.float64) else torch.float32  # not in half
    block_mass = head.sum(dim=-1, dtype=accumulate).to(torch.float64)  # [B, n_full]
    if n_full * _BLOCK < V:  # the last, shorter block
        tail = probs[:, n_full * _BLOCK:].sum(dim=-1, dtype=torch.float64, keepdim=True)  # [B, 1]
        block_mass = torch.cat([block_mass, tail], dim=-1)
    block_cdf = block_mass.cumsum(dim=-1)  # [B, n_blocks]
    target = u.to(torch.float64) * block_cdf[:, -1]  # [B]
    n_blocks = block_cdf.shape[-1]
    block = torch.searchsorted(block_cdf, target.unsqueeze(-1), right=True).squeeze(-1).clamp_(max=n_blocks - 1)
    before = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1), 0.0)
    # The chosen block's entries, zero-padded to 256 where the last block is shorter.
    offsets = block.unsqueeze(-1) * _BLOCK + torch.arange(_BLOCK, device=probs.device)  # [B, 256]
    inside = offsets < V
    entries = probs.gather(-1, offsets.clamp(max=V - 1)).to(torch.float64).masked_fill_(~inside, 0.0)
    within = entries.cumsum(dim=-1)  # [B, 256]
    # The block's own sum can round below target − before: the search then lands past the block's
    # end and is sent back to its last entry (zero-mass entries are handled by the caller).
    pos = torch.searchsorted(within, (target - before).unsqueeze(-1), right=True).squeeze(-1)
    last = inside.sum(dim=-1) - 1  # [B]
    return block * _BLOCK + torch.minimum(pos, last)


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
