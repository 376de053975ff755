"""Block verification (Sun et al. 2024, "Block Verification Accelerates Speculative Decoding",
arXiv 2403.10444), batched, behind the same §1a signature as the token-by-token chain rule.

The chain rule (specdec_ref.verify) decides draft by draft; block verification looks at the whole
block of γ drafts at once and keeps the longest prefix it can while staying exactly lossless. Per row,
with p_i the target law and q_i the draft law at position i (0-based: drafts x_0 .. x_{γ−1}):

- **weights**: ρ_0 = 1, ρ_i = min(1, ρ_{i−1} · p_{i−1}(x_{i−1}) / q_{i−1}(x_{i−1})) for i = 1..γ;
- **residual mass**: M_i = Σ_y (ρ_i p_i(y) − q_i(y))₊ for i < γ;
- **stop probabilities**: h_i = M_i / (M_i + 1 − ρ_i) for 1 ≤ i < γ, h_γ = ρ_γ (h_0 = 1);
- one independent uniform u_i per i = 1..γ; A = the largest i with u_i < h_i (0 if none);
- emit x_0 .. x_{A−1}, then one token from norm((ρ_A p_A − q_A)₊) (the **block residual**), or from
  p_γ (the **bonus** law) when A = γ.

P(A ≥ k) equals the joint coupling bound Σ_x min(Π_{i<k} p_i(x_i), Π_{i<k} q_i(x_i)), the most any
lossless rule can accept, which is above the token-level Π Σ min(p_i, q_i) in general; the emitted token
at every position is still distributed exactly as p there (tests/specdec_ref/test_block.py integrates it exactly).

As for the chain, the random part is isolated: `block_accept_and_final_law` is a pure function of
explicit uniforms, `block_verify_from_uniforms` replays given draws.
"""

from __future__ import annotations

import torch

from specdec_ref.sampling import sample_from_uniform
from specdec_ref.verify import VerifyOutput, assemble, check_verify_inputs


def _normalized(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    t = t.to(dtype)
    return t / t.sum(dim=-1, keepdim=True)


def block_weights(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """p_x, q_x [B, γ] (target / draft probability of each draft) -> ρ [B, γ+1].

    A draft with q(x) = 0 cannot have been drawn; the convention ρ = 1 there if ρ_{i−1}·p(x) > 0
    (ratio +inf) and 0 otherwise avoids 0/0 without affecting any drawable block."""
    B, gamma = p_x.shape
    rho = [torch.ones(B, dtype=p_x.dtype, device=p_x.device)]
    for i in range(gamma):  # γ is small; every step is vectorised over the rows
        num = rho[-1] * p_x[:, i]
        capped = num >= q_x[:, i]
        rho.append(torch.where(capped, (num > 0).to(p_x.dtype), num / q_x[:, i].clamp_min(torch.finfo(p_x.dtype).tiny)))
    return torch.stack(rho, dim=1)


def stop_probabilities(
    rho: torch.Tensor,  # [B, γ+1]
    p: torch.Tensor,  # [B, γ+1, V] (rows may be unnormalised: p_scale divides them)
    q: torch.Tensor,  # [B, γ, V]
    p_scale: torch.Tensor | None = None,  # [B, γ+1] row sums of p (None: p is normalised)
    q_scale: torch.Tensor | None = None,  # [B, γ] row sums of q
) -> torch.Tensor:  # h [B, γ+1] (h_0 = 1, h_γ = ρ_γ)
    gamma = q.shape[1]
    # Only h_1 .. h_{γ−1} need a residual mass (h_0 = 1 always, h_γ = ρ_γ):
    # M_i = Σ_y (ρ_i p_i(y)/P_i − q_i(y)/Q_i)₊ = Σ_y (c_i p_i(y) − q_i(y))₊ / Q_i with c_i = ρ_i Q_i / P_i,
    # one scaled copy of p, then in place (these [B, γ−1, V] passes dominate the cost).
    mid = slice(1, gamma)
    rho_mid = rho[:, mid]
    q_mid = 1 if q_scale is None else q_scale[:, mid]
    c = rho_mid * q_mid / (1 if p_scale is None else p_scale[:, mid])
    excess = p[:, mid] * c.unsqueeze(-1)  # in ρ's precision (float32 or float64)
    mass = excess.sub_(q[:, mid]).clamp_(min=0).sum(-1, dtype=rho.dtype) / q_mid  # [B, γ−1]
    den = mass + 1 - rho_mid
    # den = 0 only when ρ_i = 1 and M_i = 0 (p_i = q_i): then x_i is accepted with weight 1 (ρ_{i+1} = 1)
    # and stopping at i never needs the empty residual, so h_i = 1 is the continuous limit.
    h = torch.where(den > 0, mass / den.clamp_min(torch.finfo(den.dtype).tiny), torch.ones_like(den))
    return torch.cat([torch.ones_like(rho[:, :1]), h, rho[:, gamma:]], dim=1)


def block_accept_and_final_law(
    target_probs: torch.Tensor,  # [B, γ+1, V]
    draft_probs: torch.Tensor,  # [B, γ, V]
    draft_tokens: torch.Tensor,  # [B, γ]
    u_accept: torch.Tensor,  # [B, γ] uniforms in [0, 1); column i−1 is tested against h_i
) -> tuple[torch.Tensor, torch.Tensor]:  # n_accepted [B] (= A), final_law [B, V]
    """Deterministic core of block verification: A and the law of the token emitted after the A drafts."""
    dtype = torch.float64 if torch.float64 in (target_probs.dtype, draft_probs.dtype) else torch.float32
    B, gamma_plus_1, V = target_probs.shape
    gamma = gamma_plus_1 - 1
    # Rows are renormalised in the working precision, as the chain reference does (half-precision rows),
    # by their sums only: no normalised [B, γ+1, V] copy is made.
    p_sum = target_probs.sum(dim=-1, dtype=dtype)  # [B, γ+1]
    q_sum = draft_probs.sum(dim=-1, dtype=dtype)  # [B, γ]
    x = draft_tokens.long().unsqueeze(-1)  # [B, γ, 1]
    p_x = target_probs[:, :gamma].gather(-1, x).squeeze(-1).to(dtype) / p_sum[:, :gamma]  # [B, γ]
    q_x = draft_probs.gather(-1, x).squeeze(-1).to(dtype) / q_sum  # [B, γ]
    rho = block_weights(p_x, q_x)  # [B, γ+1]
    h = stop_probabilities(rho, target_probs, draft_probs, p_sum, q_sum)  # [B, γ+1]
    stops = u_accept.to(dtype) < h[:, 1:]  # [B, γ]
    positions = torch.arange(1, gamma + 1, device=stops.device)
    n_accepted = (stops.long() * positions).amax(dim=-1)  # [B] the largest i with u_i < h_i, else 0
    p_n = _normalized(target_probs.gather(1, n_accepted.view(B, 1, 1).expand(B, 1, V)).squeeze(1), dtype)  # [B, V]
    q_n = _normalized(draft_probs.gather(1, n_accepted.clamp(max=gamma - 1).view(B, 1, 1).expand(B, 1, V)).squeeze(1),
                      dtype)
    q_n = q_n * (n_accepted < gamma).unsqueeze(1)  # bonus position: no draft law, the residual is ρ_γ·p_γ
    residual = (rho.gather(1, n_accepted.unsqueeze(1)) * p_n - q_n).clamp_min(0)
    mass = residual.sum(dim=-1, keepdim=True)
    # No mass only through rounding (A = i is then a probability-0 event); p_n avoids 0/0.
    final_law = torch.where(mass > 0, residual / mass.clamp_min(torch.finfo(dtype).tiny), p_n)
    return n_accepted, final_law


def block_verify_from_uniforms(
    target_probs: torch.Tensor,  # [B, γ+1, V]
    draft_probs: torch.Tensor,  # [B, γ, V]
    draft_tokens: torch.Tensor,  # [B, γ]
    u_accept: torch.Tensor,  # [B, γ]
    u_final: torch.Tensor,  # [B]
    *,
    validate: bool = True,
) -> VerifyOutput:
    """Block verification with the given uniforms (one per stop test, one for the final draw)."""
    if validate:
        check_verify_inputs(target_probs, draft_probs, draft_tokens)
    n_accepted, final_law = block_accept_and_final_law(target_probs, draft_probs, draft_tokens, u_accept)
    return VerifyOutput(assemble(draft_tokens, n_accepted, sample_from_uniform(final_law, u_final)), n_accepted)


def block_verify_step(
    target_probs: torch.Tensor,  # [B, γ+1, V]
    draft_probs: torch.Tensor,  # [B, γ, V]
    draft_tokens: torch.Tensor,  # [B, γ]
    generator: torch.Generator | None = None,
) -> VerifyOutput:
    """Block verification drawing its γ + 1 uniforms per row from `generator` (as the chain reference)."""
    gamma = check_verify_inputs(target_probs, draft_probs, draft_tokens)
    B = draft_tokens.shape[0]
    gen_device = generator.device if generator is not None else torch.device("cpu")
    u = torch.rand(B, gamma + 1, generator=generator, device=gen_device, dtype=torch.float64).to(target_probs.device)
    return block_verify_from_uniforms(target_probs, draft_probs, draft_tokens, u[:, :gamma], u[:, gamma],
                                      validate=False)
