"""The reference, behind the signatures of docs/CONTRACT.md §1 (what `specdec verify --impl` calls).

- `specdec_ref.adapters:verify`   — one verification step (§1a), Leviathan Algorithm 1.
- `specdec_ref.adapters:generate` — whole speculative generation (§1b).
- `specdec_ref.adapters:verify_masked` — one verification step under a constraint (harness/check/structured_step.py):
  p and q masked alike with the per-position allowed-token masks, then Algorithm 1.
- `specdec_ref.adapters:tree_verify_specinfer` — one tree step (docs/CONTRACT-tree.md), SpecInfer
  multi-step speculative sampling with each node tested against its declared law (i.i.d. or
  without-replacement siblings; point masses for deterministic ones).
- `specdec_ref.adapters:tree_verify_topk` — one tree step with every sibling treated as a point mass
  (EAGLE / SGLang top-k trees); ignores draft_probs, lossless for any drafter.
- `specdec_ref.adapters:block_verify` — one verification step (§1a signature), block verification
  (Sun et al. 2024, arXiv 2403.10444): same inputs, same output format, accepts up to the joint bound.
- `specdec_ref.adapters:draft_and_verify`, `specdec_ref.adapters:block_draft_and_verify` — the draft
  step contract: `draft_and_verify(target_probs [B, γ+1, V], draft_probs [B, γ, V], generator) ->
  (draft_tokens [B, γ] int64, tokens [B, γ+1] int64, -1 padded)`; the implementation draws its own
  drafts from q (independently per row and position) and verifies them (chain / block rule). See
  specdec_ref/draft_step.py for the full contract.
"""

from __future__ import annotations

import torch

from specdec_ref import tree
from specdec_ref.block import block_verify_step
from specdec_ref.draft_step import draft_then_verify
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


def verify_masked(
    target_probs: torch.Tensor,  # [B, γ+1, V] unconstrained p
    draft_probs: torch.Tensor,  # [B, γ, V] unconstrained q
    draft_tokens: torch.Tensor,  # [B, γ] drawn from norm(q · allowed)
    allowed: torch.Tensor,  # [B, γ+1, V] bool: the automaton's mask after the first i drafts
    generator: torch.Generator,
) -> torch.Tensor:  # [B, γ+1] emitted tokens, -1 padded
    """One verification step under a constraint: p and q masked alike at every position, then Algorithm 1."""
    return verify_step(mask_laws(target_probs, allowed), mask_laws(draft_probs, allowed[:, :-1]), draft_tokens,
                       generator).tokens


def mask_laws(probs: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:  # [..., V] -> [..., V], rows sum to 1
    """Restrict each row to its allowed tokens and renormalize (float64 sums: no underflow for tiny rows)."""
    kept = probs.double() * allowed
    return (kept / kept.sum(-1, keepdim=True)).to(probs.dtype)


def block_verify(
    target_probs: torch.Tensor,  # [B, γ+1, V]
    draft_probs: torch.Tensor,  # [B, γ, V]
    draft_tokens: torch.Tensor,  # [B, γ]
    generator: torch.Generator,
) -> torch.Tensor:  # [B, γ+1] emitted tokens, -1 padded
    return block_verify_step(target_probs, draft_probs, draft_tokens, generator).tokens


def draft_and_verify(
    target_probs: torch.Tensor,  # [B, γ+1, V]
    draft_probs: torch.Tensor,  # [B, γ, V]
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:  # drafts [B, γ] int64 (drawn from q), tokens [B, γ+1] -1 padded
    return draft_then_verify(target_probs, draft_probs, generator, verify_step)


def block_draft_and_verify(
    target_probs: torch.Tensor,  # [B, γ+1, V]
    draft_probs: torch.Tensor,  # [B, γ, V]
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:  # drafts [B, γ] int64 (drawn from q), tokens [B, γ+1] -1 padded
    return draft_then_verify(target_probs, draft_probs, generator, block_verify_step)


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
    min_p: float | None = None,
    logit_bias: dict[int, float] | None = None,
    repetition_penalty: float | None = None,
    frequency_penalty: float = 0.0,
    presence_penalty: float = 0.0,
    bad_words_ids: list[list[int]] | None = None,
    min_new_tokens: int = 0,
    constraint=None,
    prefix_allowed_tokens_fn=None,
) -> torch.Tensor:  # [B, N], -1 after EOS
    """The optional parameters (after `seed`, in this order) are applied as specdec_ref.processing documents;
    `constraint` (specdec_ref.constraints.TokenConstraint) or a transformers-style `prefix_allowed_tokens_fn`
    restricts every position of p and q alike to the tokens allowed after the tokens so far."""
    return speculative_generate(
        target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature,
        top_k=top_k, top_p=top_p, seed=seed, eos_token_id=default_eos(target),
        cache=cache_strategy(input_ids, max_new_tokens, target), min_p=min_p, logit_bias=logit_bias,
        repetition_penalty=repetition_penalty, frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty, bad_words_ids=bad_words_ids, min_new_tokens=min_new_tokens,
        constraint=constraint, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
    ).tokens


def cache_strategy(input_ids: torch.Tensor, max_new_tokens: int, model) -> str:
    """'recompute' (one batched pass over all rows) for many short rows of a tiny model, else 'batched'
    (one KV cache for all rows; make_runner falls back to per-row caches for one row or other models)."""
    short = input_ids.dim() == 2 and input_ids.shape[1] + max_new_tokens <= _RECOMPUTE_MAX_POSITIONS
    tiny = sum(p.numel() for p in model.parameters()) <= _RECOMPUTE_MAX_PARAMETERS
    return "recompute" if short and tiny and input_ids.shape[0] > 1 else "batched"


def tree_verify_specinfer(
    target_probs: torch.Tensor,  # [B, N+1, V] target law at the root, then after every node
    draft_probs: torch.Tensor,  # [B, N, V] the law each node's token was drawn from
    draft_tokens: torch.Tensor,  # [B, N]
    parents: torch.Tensor,  # [N] parent node index, -1 = root
    generator: torch.Generator,
) -> torch.Tensor:  # [B, D+1] accepted path, one more token, -1 padded
    return tree.tree_verify(target_probs, draft_probs, draft_tokens, parents, generator, tree.SPECINFER)


def tree_verify_topk(
    target_probs: torch.Tensor,  # [B, N+1, V]
    draft_probs: torch.Tensor,  # [B, N, V] (validated, not used: siblings are point masses)
    draft_tokens: torch.Tensor,  # [B, N]
    parents: torch.Tensor,  # [N]
    generator: torch.Generator,
) -> torch.Tensor:  # [B, D+1]
    return tree.tree_verify(target_probs, draft_probs, draft_tokens, parents, generator, tree.TOPK)
