"""Teacher forcing of generated continuations in one batched forward (PIT scoring, any level).

`score_continuations` returns the target's logits at every continuation position for a batch of rows
that may come from different prompts. It runs the rows through the reference's batched KV-cached
runner (specdec_ref/batched.py): the prefix the rows share (the whole prompt when they have one
prompt, a chat template's system header across prompts) is computed once instead of once per row,
and only the continuation positions reach the LM head. Models the batched layout does not support
fall back to the reference's other runners (same logits); models whose cache is not a croppable KV cache
(hybrid, recurrent, sliding window) are scored without any cache, in one right-padded full pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec_ref.runners import cache_capabilities, make_runner, model_device


def score_continuations(
    model,
    prompts: Sequence[Sequence[int]],
    continuations: torch.Tensor,  # [N, L] int64 token ids, -1 after EOS / padding
    *,
    prompt_index: Sequence[int] | None = None,  # [N] which prompt each row continues; None: all prompt 0
    vocab: int | None = None,
) -> torch.Tensor:  # [N, L, vocab]: logits[j, t] predicts continuations[j, t] given prompt + row[:t]
    """Logits of `model` at each continuation position, all N rows in one batched pass (on CPU)."""
    N, L = continuations.shape
    if N == 0 or L == 0:
        width = vocab if vocab is not None else 0
        return torch.zeros(N, L, width)
    index = [0] * N if prompt_index is None else list(prompt_index)
    device = model_device(model)
    heads = [torch.as_tensor(list(p), dtype=torch.long, device=device) for p in prompts]
    # the last token is never an input: position T-1+t predicts token t; entries after -1 are never read
    tails = continuations[:, :-1].to(device, torch.long).clamp_min(0)
    seqs = [torch.cat([heads[i], tail]) for i, tail in zip(index, tails, strict=True)]
    # Caches a crop cannot restore (recurrent, conv, windowed): no cache at all, one right-padded full pass
    # (teacher forcing as defined; a causal model never sees the padding after a real token).
    strategy = "batched" if cache_capabilities(model).croppable else "recompute"
    runner = make_runner(model, "score", N, strategy)
    logits = runner.logits(list(range(N)), seqs, L)  # [N, L, V]
    return (logits if vocab is None else logits[..., :vocab]).cpu()
