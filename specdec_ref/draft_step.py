"""The draft step contract: the implementation draws its own drafts from q, then verifies them.

At the §1a sampler level the harness draws x ~ q itself, so a bug in *how* an engine drafts (greedy
drafts verified with a softmax q; drafting noise reused by the acceptance test) cannot show there.
The draft step hands the implementation both laws and lets it draft:

    draft_and_verify(
        target_probs: Tensor,        # [B, γ+1, V] float; p at each draft position, row γ = bonus position
        draft_probs: Tensor,         # [B, γ, V]   float; q at each draft position (what drafts must follow)
        generator: torch.Generator,  # randomness for drafting *and* verification
    ) -> tuple[Tensor, Tensor]       # (draft_tokens [B, γ] int64: the drafts it drew,
                                     #  tokens [B, γ+1] int64: emitted tokens, -1 padded, as §1a returns)

A lossless implementation returns drafts with draft_tokens[b, i] ~ q_i independently, emitted tokens
whose law at every position is p (among rows that reached it), and accepted positions equal to the
returned drafts. Rows are independent trials. Here: drafts by inverse CDF from their own uniforms,
then any §1a step (the chain rule or block verification) with fresh uniforms from the same generator.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specdec_ref.sampling import sample_from_uniform
from specdec_ref.verify import VerifyOutput, check_probs


def draw_drafts(
    draft_probs: torch.Tensor,  # [B, γ, V]
    u: torch.Tensor,  # [B, γ] uniforms in [0, 1)
) -> torch.Tensor:  # [B, γ] int64, x_i = inverse CDF of q_i at u_i
    B, gamma, V = draft_probs.shape
    return sample_from_uniform(draft_probs.reshape(B * gamma, V), u.reshape(B * gamma)).view(B, gamma)


def draft_then_verify(
    target_probs: torch.Tensor,  # [B, γ+1, V]
    draft_probs: torch.Tensor,  # [B, γ, V]
    generator: torch.Generator | None,
    step: Callable[..., VerifyOutput],  # a §1a step returning VerifyOutput (verify_step, block_verify_step)
) -> tuple[torch.Tensor, torch.Tensor]:  # drafts [B, γ], tokens [B, γ+1]
    """Draw the drafts from q with their own uniforms, then run `step` on them."""
    check_probs(draft_probs, "draft_probs")
    B, gamma, _ = draft_probs.shape
    gen_device = generator.device if generator is not None else torch.device("cpu")
    u = torch.rand(B, gamma, generator=generator, device=gen_device, dtype=torch.float64).to(draft_probs.device)
    drafts = draw_drafts(draft_probs, u)
    return drafts, step(target_probs, draft_probs, drafts, generator).tokens
