"""The signatures an implementation under test must have, as typing Protocols (docs/CONTRACT.md §1).

These are for users' type checkers and editors: annotate `my_verify: specdec.VerifyFn = ...` and a
checker flags a wrong signature before a run does. The harness itself checks signatures at run time
(harness.adapters.loading.check_signature); nothing here is enforced on import, and torch is only
named for type checkers (no torch import).

Shapes follow the contract: B rows, γ drafted tokens, V vocabulary, N tree nodes, D tree depth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

__all__ = ["DraftAndVerifyFn", "GenerateFn", "TreeVerifyFn", "VerifyFn"]


class VerifyFn(Protocol):
    """§1a, one verification step (chain or block family): emitted tokens, the rows' padding -1."""

    def __call__(self,
                 target_probs: torch.Tensor,  # [B, γ+1, V] float; (b, i) = p at draft position i, row γ = bonus
                 draft_probs: torch.Tensor,  # [B, γ, V] float; the q each draft was drawn from
                 draft_tokens: torch.Tensor,  # [B, γ] int64; draft_tokens[b, i] ~ draft_probs[b, i]
                 generator: torch.Generator,  # the randomness to use
                 ) -> torch.Tensor: ...  # [B, γ+1] int64: n_b emitted tokens (1 <= n_b <= γ+1), then -1


class DraftAndVerifyFn(Protocol):
    """§1e, a step that draws its own drafts from q and verifies them: (draft_tokens, tokens)."""

    def __call__(self,
                 target_probs: torch.Tensor,  # [B, γ+1, V] float
                 draft_probs: torch.Tensor,  # [B, γ, V] float; the drafts must follow these laws
                 generator: torch.Generator,
                 ) -> tuple[torch.Tensor, torch.Tensor]: ...  # ([B, γ] int64 drafts, [B, γ+1] int64 tokens, -1 padded)


class TreeVerifyFn(Protocol):
    """§1e and docs/CONTRACT-tree.md, one step over a token tree: the accepted path, one more token, then -1."""

    def __call__(self,
                 target_probs: torch.Tensor,  # [B, N+1, V] float; index 0 = the root's law, n+1 = after node n
                 draft_probs: torch.Tensor,  # [B, N, V] float; node n's law given its ancestors and earlier siblings
                 draft_tokens: torch.Tensor,  # [B, N] int64
                 parents: torch.Tensor,  # [N] int64; -1 = the root; every child listed after its parent
                 generator: torch.Generator,
                 ) -> torch.Tensor: ...  # [B, D+1] int64


class GenerateFn(Protocol):
    """§1b, a whole speculative generate() over two causal LMs: the new tokens only, -1 after EOS.

    Optional keyword-only sampling parameters after `seed` (min_p, logit_bias, penalties, bad_words_ids,
    min_new_tokens, constraint, ...) are allowed; a generate() without one is only run with the settings it
    supports."""

    def __call__(self, target: Any, draft: Any,  # transformers causal LMs with the same vocabulary
                 input_ids: torch.Tensor,  # [B, T] int64 prompt, no padding inside it
                 *, max_new_tokens: int, gamma: int,
                 temperature: float,  # 0.0 = greedy (argmax), exactly
                 top_k: int | None, top_p: float | None, seed: int,
                 ) -> torch.Tensor: ...  # [B, N] int64, N <= max_new_tokens
