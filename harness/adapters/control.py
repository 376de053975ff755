"""Control implementations: plain target sampling, the ground truth every speculative decoder must match."""

from __future__ import annotations

import torch

from specdec_ref.adapters import cache_strategy
from specdec_ref.generate import autoregressive_generate, default_eos


def target_only_generate(target, draft, input_ids: torch.Tensor, *, max_new_tokens: int, gamma: int,
                         temperature: float, top_k: int | None, top_p: float | None, seed: int,
                         **extra) -> torch.Tensor:
    """Ignore the draft (and γ): sample from the target alone with the shared logits processing.

    `extra`: the optional sampling parameters of specdec_ref.adapters:generate (min_p, logit_bias, ...)."""
    del draft, gamma
    return autoregressive_generate(
        target, input_ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
        seed=seed, eos_token_id=default_eos(target), cache=cache_strategy(input_ids, max_new_tokens, target),
        **extra,
    ).tokens
