"""The verification step of speculative sampling (Leviathan et al. 2023, Algorithm 1), batched.

Glossary (one row b of the batch, γ drafted tokens):
- **accepted tokens**: the leading drafted tokens x_i kept with probability min(1, p_i(x_i) / q_i(x_i));
- **recovered token**: at the first rejection (position n < γ), a token drawn from
  norm((p_n − q_n)₊), the residual law; then the row stops;
- **bonus token**: if all γ drafts are accepted, a token drawn from p_γ (the target's next-token law
  after the last draft).
Every row emits n_accepted + 1 tokens. The emitted token at every position is distributed exactly
as p at that position (the residual is what makes min(p, q) + (1 − α) norm((p − q)₊) = p).

The random part is isolated: `accept_and_final_law` is a pure function of explicit uniforms, so the
harness can integrate it exactly, and `verify_from_uniforms` replays given draws.
"""

from __future__ import annotations

import dataclasses

import torch

from specdec_ref.errors import SpecDecInputError
from specdec_ref.sampling import sample_from_uniform

# How far a probability row may be from summing to 1, by input dtype (half precision rows
# rounded from float32 can be off by a few ulps times sqrt(V)).
_SUM_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}


@dataclasses.dataclass
class VerifyOutput:
    tokens: torch.Tensor  # [B, γ+1] int64: accepted drafts, then the recovered/bonus token, then -1
    n_accepted: torch.Tensor  # [B] int64 in [0, γ]; the row emitted n_accepted + 1 tokens


def check_probs(probs: torch.Tensor, name: str, ndim: int = 3) -> torch.Tensor | None:
    """Refuse tensors that are not probability rows: wrong rank, non-float, NaN, negative, sum ≠ 1.

    Returns the row sums [...] in the working precision (None for an empty tensor), which the
    acceptance rule needs anyway: validation costs one extra pass (the minimum), not two.
    """
    if not isinstance(probs, torch.Tensor):
        raise SpecDecInputError(f"{name} must be a torch.Tensor, got {type(probs).__name__}")
    if probs.dim() != ndim:
        raise SpecDecInputError(f"{name} must have {ndim} dimensions, got shape {tuple(probs.shape)}")
    if not probs.is_floating_point():
        raise SpecDecInputError(f"{name} must be a floating-point tensor of probabilities, got {probs.dtype}")
    if probs.numel() == 0:
        return None
    sums, lowest = _row_sums_and_mins(probs, _work_dtype(probs))  # [...], 0-dim
    tol = _SUM_TOLERANCE.get(probs.dtype, 1e-4)
    # Fast path: NaN and ±inf make a row sum non-finite; with every entry ≥ 0 and the sum within
    # tol of 1, no entry exceeds 1 + tol, which is the `<= 1 + 1e-3` bound below whenever tol ≤ 1e-3
    # (float32/64). Anything else takes the full check for its exact message.
    worst = (sums - 1).abs().max()
    if float(worst) <= tol and tol <= 1e-3 and float(lowest) >= 0:
        return sums
    _explain_bad_probs(probs, name, float(worst), tol)
    return sums


# Chunk size in `_row_sums_and_mins`: a 4 MiB chunk is still in the last-level cache when the
# second reduction reads it, so p and q come from memory once, not twice (measured: 1.7 reads of
# the bandwidth floor against 2.0 for two whole passes; 1 MiB chunks pay more in per-call cost).
_CHUNK_BYTES = 4 << 20


def _row_sums_and_mins(probs: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Row sums [...] (in `dtype`) and the minimum entry (0-dim) of probs [..., V], reading it once.

    The validation needs both; on CPU they are taken chunk by chunk so that the second reduction
    reads from cache. Elsewhere (CUDA) the two reductions run as they are.
    """
    V = probs.shape[-1]
    rows_per_chunk = max(1, _CHUNK_BYTES // max(1, V * probs.element_size()))
    if probs.device.type != "cpu" or not probs.is_contiguous() or probs.numel() <= 2 * rows_per_chunk * V:
        return probs.sum(dim=-1, dtype=dtype), probs.min()
    flat = probs.view(-1, V)
    sums = torch.empty(flat.shape[0], dtype=dtype)
    mins = []
    for start in range(0, flat.shape[0], rows_per_chunk):
        chunk = flat[start:start + rows_per_chunk]
        torch.sum(chunk, dim=-1, dtype=dtype, out=sums[start:start + rows_per_chunk])
        mins.append(chunk.min())
    return sums.view(probs.shape[:-1]), torch.stack(mins).min()


def _explain_bad_probs(probs: torch.Tensor, name: str, worst: float, tol: float) -> None:
    """The slow path of `check_probs`: raise the message that names what is wrong (or return if nothing is)."""
    # One pass for NaN, ±inf and negatives: NaN fails every comparison, inf fails `<= 1`.
    low, high = torch.aminmax(probs)
    if not (float(low) >= 0 and float(high) <= 1 + 1e-3):
        if bool(torch.isnan(probs).any()) or bool(torch.isinf(probs).any()):
            raise SpecDecInputError(f"{name} contains NaN or inf; probabilities must be finite")
        raise SpecDecInputError(f"{name} must hold probabilities in [0, 1] (found min {float(low):.3g}, "
                                f"max {float(high):.3g}); pass softmax probabilities, not logits")
    if not worst <= tol:
        raise SpecDecInputError(
            f"{name} rows must sum to 1 (worst row is off by {worst:.3g}, tolerance {tol:g} for {probs.dtype});"
            " pass softmax probabilities, not logits"
        )


def check_verify_inputs(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor) -> int:
    """Validate the §1a inputs and return γ."""
    return _validated_sums(target_probs, draft_probs, draft_tokens)[0]


def _validated_sums(target_probs, draft_probs, draft_tokens) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Validate the §1a inputs; return γ and the row sums of p [B, γ+1] and q [B, γ]."""
    p_sum = check_probs(target_probs, "target_probs")
    q_sum = check_probs(draft_probs, "draft_probs")
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.dim() != 2:
        raise SpecDecInputError("draft_tokens must be an int64 tensor of shape [B, gamma]")
    if draft_tokens.dtype not in (torch.int64, torch.int32):
        raise SpecDecInputError(f"draft_tokens must be an integer tensor, got {draft_tokens.dtype}")
    B, gamma = draft_tokens.shape
    if gamma < 1:
        raise SpecDecInputError(f"gamma must be >= 1 (draft_tokens has {gamma} columns)")
    V = target_probs.shape[-1]
    if tuple(target_probs.shape) != (B, gamma + 1, V):
        raise SpecDecInputError(
            f"target_probs must have shape [B, gamma+1, V] = [{B}, {gamma + 1}, V], got {tuple(target_probs.shape)}"
        )
    if tuple(draft_probs.shape) != (B, gamma, V):
        raise SpecDecInputError(
            f"draft_probs must have shape [B, gamma, V] = [{B}, {gamma}, {V}], got {tuple(draft_probs.shape)}"
            " (target and draft vocabularies must match)"
        )
    if draft_tokens.numel() and (int(draft_tokens.min()) < 0 or int(draft_tokens.max()) >= V):
        raise SpecDecInputError(f"draft_tokens must be token ids in [0, {V}), got range "
                                f"[{int(draft_tokens.min())}, {int(draft_tokens.max())}]")
    return gamma, p_sum, q_sum


def _work_dtype(*tensors: torch.Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def accept_and_final_law(
    target_probs: torch.Tensor,  # [B, γ+1, V]
    draft_probs: torch.Tensor,  # [B, γ, V]
    draft_tokens: torch.Tensor,  # [B, γ]
    u_accept: torch.Tensor,  # [B, γ] uniforms in [0, 1)
    *,
    p_sum: torch.Tensor | None = None,  # [B, γ+1] row sums of p, if the caller has them (validation does)
    q_sum: torch.Tensor | None = None,  # [B, γ]
) -> tuple[torch.Tensor, torch.Tensor]:  # n_accepted [B], final_law [B, V]
    """Deterministic core: how many drafts are accepted, and the law of the token emitted after them.

    Reads p and q once (the row sums) plus the two rows it needs per batch row; everything else is
    on [B, γ] or [B, V] tensors.
    """
    n_accepted, residual = _accept_and_unnormalised_law(
        target_probs, draft_probs, draft_tokens, u_accept, p_sum=p_sum, q_sum=q_sum)
    mass = residual.sum(dim=-1, keepdim=True)  # [B, 1]
    law = _law_or_target(residual, mass.view(-1) <= 0, target_probs, n_accepted)
    return n_accepted, law.div_(law.sum(dim=-1, keepdim=True) if bool((mass <= 0).any()) else mass)


def _accept_and_unnormalised_law(target_probs, draft_probs, draft_tokens, u_accept, *, p_sum=None, q_sum=None):
    """`accept_and_final_law` without the final division: the law is returned up to a positive factor
    per row (what inverse-CDF sampling needs; it divides by the total itself)."""
    dtype = _work_dtype(target_probs, draft_probs)
    B, gamma_plus_1, V = target_probs.shape
    gamma = gamma_plus_1 - 1
    # Rows are renormalised in the working precision (half-precision rows sum to 1 only to ~1e-3,
    # and using them raw would tilt min(1, p/q) by that much: the bf16-on-one-side bug class,
    # DeepSpec #31). Only the gathered entries and the one final row per batch row are divided,
    # so no full [B, γ+1, V] copy is made. Sums from another precision are recomputed.
    if p_sum is None or p_sum.dtype != dtype:
        p_sum = target_probs.sum(dim=-1, dtype=dtype)  # [B, γ+1]
    if q_sum is None or q_sum.dtype != dtype:
        q_sum = draft_probs.sum(dim=-1, dtype=dtype)  # [B, γ]
    tokens = draft_tokens.long().unsqueeze(-1)  # [B, γ, 1]
    p_x = target_probs[:, :-1].gather(-1, tokens).squeeze(-1).to(dtype) / p_sum[:, :-1]  # [B, γ]
    q_x = draft_probs.gather(-1, tokens).squeeze(-1).to(dtype) / q_sum  # [B, γ]
    # u < p/q written without division: q(x) = 0 (a token q could not have produced) counts as
    # ratio +inf, accepted iff p(x) > 0; no NaN from 0/0.
    accepted = u_accept.to(dtype) * q_x < p_x  # [B, γ]
    n_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)  # [B] leading run of acceptances
    # The law after n accepted drafts is norm((p_n − q_n)₊); with q_γ := 0 the same formula is the
    # bonus law p_γ. Two rows per batch row are copied out; the arithmetic after is in place, and
    # p_n's own normalisation is folded into q's scale: (p/p_sum − q/q_sum)₊ ∝ (p − q·p_sum/q_sum)₊.
    p_n = _select_rows(target_probs, n_accepted).to(dtype)  # [B, V], a fresh tensor
    p_scale = p_sum.gather(1, n_accepted.view(B, 1))  # [B, 1]
    q_at = n_accepted.clamp(max=gamma - 1).view(B, 1)  # [B, 1]
    # q is 0 at the bonus position: a zero ratio there leaves p_γ as it is.
    ratio = (p_scale / q_sum.gather(1, q_at)).masked_fill(n_accepted.view(B, 1) == gamma, 0.0)  # [B, 1]
    residual = p_n.addcmul_(_select_rows(draft_probs, q_at.view(B)).to(dtype), ratio, value=-1)
    residual.clamp_min_(0)  # ∝ (p_n − q_n)₊; all zero in a row only where p_n = q_n (see `_law_or_target`)
    return n_accepted, residual


def _law_or_target(law: torch.Tensor, empty: torch.Tensor, target_probs: torch.Tensor,
                   n_accepted: torch.Tensor) -> torch.Tensor:
    """Rows of `law` with no mass (`empty`) replaced by p_n.

    Zero mass means p_n ≤ q_n everywhere, i.e. p_n = q_n: a rejection there has probability 0 and
    only float rounding can land here; p_n is then the right law (and avoids 0/0).
    """
    if bool(empty.any()):
        rows = empty.nonzero().squeeze(-1)
        law[rows] = _select_rows(target_probs, n_accepted)[rows].to(law.dtype)
    return law


def _select_rows(probs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:  # [B, L, V], [B] -> [B, V]
    """probs[b, index[b]] for every b; index_select on the flat rows when they are a view (much faster
    than advanced indexing on CPU), advanced indexing otherwise (a reshape would copy all of probs)."""
    B, L, V = probs.shape
    if probs.is_contiguous():
        flat = index + torch.arange(B, device=probs.device) * L  # [B]
        return probs.view(B * L, V).index_select(0, flat)
    return probs[torch.arange(B, device=probs.device), index]


def assemble(draft_tokens: torch.Tensor, n_accepted: torch.Tensor, final_token: torch.Tensor) -> torch.Tensor:
    """[B, γ+1] rows: the accepted drafts, then the final token, then -1 padding."""
    B, gamma = draft_tokens.shape
    positions = torch.arange(gamma + 1, device=draft_tokens.device).unsqueeze(0)  # [1, γ+1]
    padded = torch.cat([draft_tokens.long(), draft_tokens.new_full((B, 1), -1).long()], dim=1)
    out = torch.where(positions < n_accepted.unsqueeze(1), padded, torch.full_like(padded, -1))
    return torch.where(positions == n_accepted.unsqueeze(1), final_token.long().unsqueeze(1), out)


def verify_from_uniforms(
    target_probs: torch.Tensor,  # [B, γ+1, V]
    draft_probs: torch.Tensor,  # [B, γ, V]
    draft_tokens: torch.Tensor,  # [B, γ]
    u_accept: torch.Tensor,  # [B, γ]
    u_final: torch.Tensor,  # [B]
    *,
    validate: bool = True,
) -> VerifyOutput:
    """Algorithm 1 with the given uniforms (one for each acceptance test, one for the final draw)."""
    sums = _validated_sums(target_probs, draft_probs, draft_tokens)[1:] if validate else (None, None)
    return _verify(target_probs, draft_probs, draft_tokens, u_accept, u_final, *sums)


def _verify(target_probs, draft_probs, draft_tokens, u_accept, u_final, p_sum, q_sum) -> VerifyOutput:
    # The validation's row sums are the ones the rule needs: computed once. Without them the plain
    # four-argument call is kept (a planted bug patches `_accept_and_unnormalised_law` with it).
    sums = {} if p_sum is None else {"p_sum": p_sum, "q_sum": q_sum}
    n_accepted, law = _accept_and_unnormalised_law(target_probs, draft_probs, draft_tokens, u_accept, **sums)
    final_token = sample_from_uniform(law, u_final)  # inverse CDF divides by the row total itself
    # A row with no mass comes back as -1 (sample_from_uniform never returns a zero-mass token).
    empty = final_token < 0
    if bool(empty.any()):
        law = _law_or_target(law, empty, target_probs, n_accepted)
        final_token = torch.where(empty, sample_from_uniform(law, u_final), final_token)
    return VerifyOutput(assemble(draft_tokens, n_accepted, final_token), n_accepted)


def verify_step(
    target_probs: torch.Tensor,  # [B, γ+1, V]
    draft_probs: torch.Tensor,  # [B, γ, V]
    draft_tokens: torch.Tensor,  # [B, γ]
    generator: torch.Generator | None = None,
) -> VerifyOutput:
    """Algorithm 1 drawing its uniforms from `generator` (on the generator's device)."""
    gamma, p_sum, q_sum = _validated_sums(target_probs, draft_probs, draft_tokens)
    B = draft_tokens.shape[0]
    gen_device = generator.device if generator is not None else torch.device("cpu")
    u = torch.rand(B, gamma + 1, generator=generator, device=gen_device, dtype=torch.float64)
    u = u.to(target_probs.device)
    return _verify(target_probs, draft_probs, draft_tokens, u[:, :gamma], u[:, gamma], p_sum, q_sum)


def greedy_verify(
    target_scores: torch.Tensor,  # [B, γ+1, V] target logits or probabilities (only the argmax matters)
    draft_tokens: torch.Tensor,  # [B, γ]
) -> VerifyOutput:
    """Greedy rule: accept drafts while they equal the target's argmax; then emit the target's argmax."""
    target_argmax = target_scores.argmax(dim=-1)  # [B, γ+1], first index on ties (as plain greedy)
    matches = draft_tokens.long() == target_argmax[:, :-1]  # [B, γ]
    n_accepted = matches.long().cumprod(dim=-1).sum(dim=-1)  # [B]
    final_token = target_argmax.gather(1, n_accepted.unsqueeze(1)).squeeze(1)
    return VerifyOutput(assemble(draft_tokens, n_accepted, final_token), n_accepted)
