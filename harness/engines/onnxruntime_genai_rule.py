"""ONNX Runtime GenAI's draft-model acceptance rule transcribed into the §1a verify contract (docs/CONTRACT.md), to
check the rule itself at the sampler level, apart from the engine.

The rule (microsoft/onnxruntime-genai at a0c04eb1, the stored snapshot; 0.18.0's commit 00d66ef0 is not in it):
src/speculative_decoding_strategy.cpp:718-761 walks the drafts; draft i is accepted iff u < ComputeAcceptProb(p_i(x),
q_i(x)) with u ~ U[0, 1) (std::uniform_real_distribution<float>), where src/speculative_sampling.h:140-146 returns 1
when q_i(x) <= 0 and min(1, p/q) otherwise; on the first rejection the token is drawn from max(0, p - q) over the
target's kept support, or from p when that residual sums to 0 (speculative_sampling.h:39-57); all accepted: a bonus
from p_K (speculative_decoding_strategy.cpp:750-761). p and q are the truncated laws (same top-k / top-p /
temperature) and x is drawn from that very q (base_speculative_strategy.cpp:24-38), so q_i(x) > 0 on this path.

- `verify`: the rule as written (float32 uniforms, the q <= 0 branch included): lossless wherever x ~ q.
- `q_zero_verify`: the same rule judging every draft as a proposal that carries no probability (an empty
  distribution row, as a grammar-forced token gets at base_speculative_strategy.cpp:119-126): the q <= 0 branch
  then accepts it always. This is what the edge would cost a caller whose drafts are not drawn from the q they are
  judged with; its planted counterpart for the check.
"""

from __future__ import annotations

import torch


def _sample(law: torch.Tensor, generator) -> torch.Tensor:
    """One draw per row of a [B, V] law (rows need not be normalized)."""
    return torch.multinomial(law.to(torch.float64), 1, generator=generator).squeeze(1)


def _rule(target_probs, draft_probs, draft_tokens, generator, *, draft_has_probability: bool) -> torch.Tensor:
    batch, gamma = draft_tokens.shape
    p_all = target_probs.to(torch.float32)
    q_all = draft_probs.to(torch.float32) if draft_has_probability else torch.zeros_like(draft_probs,
                                                                                         dtype=torch.float32)
    tokens = draft_tokens.long()
    p_x = p_all[:, :gamma].gather(2, tokens.unsqueeze(2)).squeeze(2)
    q_x = q_all.gather(2, tokens.unsqueeze(2)).squeeze(2)
    accept_prob = torch.where(q_x <= 0, torch.ones_like(q_x), torch.clamp(p_x / q_x.clamp_min(1e-38), max=1.0))
    u = torch.rand((batch, gamma), generator=generator, dtype=torch.float32)
    accepted = u < accept_prob
    kept = accepted.long().cumprod(1).sum(1)  # drafts kept before the first rejection
    out = torch.full((batch, gamma + 1), -1, dtype=torch.long)
    rows = torch.arange(batch)
    for b in range(batch):
        out[b, : kept[b]] = tokens[b, : kept[b]]
    at = kept.clamp(max=gamma - 1)
    residual = torch.clamp(p_all[rows, at] - q_all[rows, at], min=0.0)
    residual = torch.where(residual.sum(1, keepdim=True) > 0, residual, p_all[rows, at])
    correction = _sample(residual, generator)
    bonus = _sample(p_all[:, gamma], generator)
    last = torch.where(kept == gamma, bonus, correction)
    out[rows, kept] = last
    return out


def verify(target_probs, draft_probs, draft_tokens, generator):
    """ONNX Runtime GenAI's rule as written (drafts drawn from q: its q <= 0 branch is never taken)."""
    return _rule(target_probs, draft_probs, draft_tokens, generator, draft_has_probability=True)


def q_zero_verify(target_probs, draft_probs, draft_tokens, generator):
    """The rule with each draft's probability read as 0 (a proposal without a distribution row): always kept."""
    return _rule(target_probs, draft_probs, draft_tokens, generator, draft_has_probability=False)
