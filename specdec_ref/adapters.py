"""The reference, behind the signatures of shared/CONTRACT.md §1 (what `specdec verify --impl` calls).

- `specdec_ref.adapters:verify`   — one verification step (§1a), Leviathan Algorithm 1.
- `specdec_ref.adapters:generate` — whole speculative generation (§1b).
"""

from __future__ import annotations

import torch

from specdec_ref.generate import default_eos, speculative_generate
from specdec_ref.verify import verify_step

# For tiny models (toy pairs) and short rows, one batched recompute of every row is cheaper than B
# sequential KV-cached passes (thousands of rows in statistical tests); real models use one KV cache
# for the whole batch (specdec_ref/batched.py; per-row caches where the model cannot take it).
_RECOMPUTE_MAX_POSITIONS = 64
_RECOMPUTE_MAX_PARAMETERS = 5_000_000


def verify(
    target_probs: torch.Tensor,  # [B, γ+1, V]
    draft_probs: torch.Tensor,  # [B, γ, V]
    draft_tokens: torch.Tensor,  # [B, γ]
    generator: torch.Generator,
) -> torch.Tensor:  # [B, γ+1] emitted tokens, -1 padded
    return verify_step(target_probs, draft_probs, draft_tokens, generator).tokens


def generate(
    target,
    draft,
    input_ids: torch.Tensor,  # [B, T]
    *,
    max_new_tokens: int,
    gamma: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    seed: int,
) -> torch.Tensor:  # [B, N], -1 after EOS
    return speculative_generate(
        target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature,
        top_k=top_k, top_p=top_p, seed=seed, eos_token_id=default_eos(target),
        cache=cache_strategy(input_ids, max_new_tokens, target),
    ).tokens


def cache_strategy(input_ids: torch.Tensor, max_new_tokens: int, model) -> str:
    """'recompute' (one batched pass over all rows) for many short rows of a tiny model, else 'batched'
    (one KV cache for all rows; make_runner falls back to per-row caches for one row or other models)."""
    short = input_ids.dim() == 2 and input_ids.shape[1] + max_new_tokens <= _RECOMPUTE_MAX_POSITIONS
    tiny = sum(p.numel() for p in model.parameters()) <= _RECOMPUTE_MAX_PARAMETERS
    return "recompute" if short and tiny and input_ids.shape[0] > 1 else "batched"
