"""Sampler-level correct controls: three independent formulations of Algorithm 1 that must pass.

- `reference_verify`: the reference (`specdec_ref.adapters:verify`, inverse CDF from explicit uniforms);
- `exponential_race`: exponential clocks for every random choice (accept iff E > log q(x) − log p(x);
  recovered/bonus token = argmin_y E_y / r(y), the race of Exp(r(y)) clocks) — no inverse CDF, no
  normalisation of the residual, none of the reference's sampling code;
- `per_row_loop`: a plain per-row Python loop, the textbook algorithm, drawing with torch.multinomial.
A harness that fails one of them raises a false alarm; one that passes them but fails the reference
points at the reference.
"""

from __future__ import annotations

import math

import torch

from harness.mutants.base import declare, register
from harness.mutants.rule import Rule, check_shapes
from specdec_ref.adapters import verify as _reference_verify

ALGORITHM1 = Rule()  # the exact law of every control
_CHUNK_ELEMENTS = 1 << 22  # rows × V processed at once by the exponential race (bounds memory)
_CONTROL = "control: Leviathan et al. 2023 Algorithm 1, an independent formulation"

REFERENCE_VERIFY = declare(
    _reference_verify, "reference_verify", contract="sampler", kind="control", models="control: the reference (specdec_ref)",
    description="specdec_ref.adapters:verify, Algorithm 1 by inverse CDF from explicit uniforms",
    position_laws=ALGORITHM1.position_laws, exact_acceptance=ALGORITHM1.acceptance)


def _gather_tokens(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """probs [B, γ, V] at tokens [B, γ], normalised by each row's sum, as float64 [B, γ]."""
    picked = probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).double()
    return picked / probs.sum(dim=-1, dtype=torch.float64)


@register(contract="sampler", kind="control", models=_CONTROL, position_laws=ALGORITHM1.position_laws,
          exact_acceptance=ALGORITHM1.acceptance)
def exponential_race(target_probs, draft_probs, draft_tokens, generator):
    """Algorithm 1 with exponential clocks: E > log(q/p) for acceptance, argmin_y E_y / r(y) for the
    recovered (r = (p − q)₊) or bonus (r = p_γ) token."""
    B, gamma, V = check_shapes(target_probs, draft_probs, draft_tokens)
    device = target_probs.device
    gen_device = generator.device if generator is not None else torch.device("cpu")
    x = draft_tokens.long()
    p_x = _gather_tokens(target_probs[:, :gamma], x)  # [B, γ]
    q_x = _gather_tokens(draft_probs, x)  # [B, γ]
    clocks = torch.empty(B, gamma, dtype=torch.float64, device=gen_device).exponential_(generator=generator)
    # P(E > log q − log p) = min(1, p/q); q(x) = 0 < p(x) gives −inf (accept), p(x) = 0 gives +inf (reject).
    accepted = clocks.to(device) > q_x.log() - p_x.log()  # [B, γ]
    n = torch.where(accepted.all(dim=-1), gamma, (~accepted).long().argmax(dim=-1))  # first rejection
    tokens = torch.full((B, gamma + 1), -1, dtype=torch.long, device=device)
    tokens[:, :gamma] = torch.where(torch.arange(gamma, device=device) < n.unsqueeze(1), x, -1)
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // V)
    for start in range(0, B, rows_per_chunk):
        rows = torch.arange(start, min(B, start + rows_per_chunk), device=device)
        n_r = n[rows]
        p_n = target_probs[rows, n_r].double()  # [c, V]
        p_n = p_n / p_n.sum(-1, keepdim=True)
        q_n = draft_probs[rows, n_r.clamp_max(gamma - 1)].double()
        q_n = q_n / q_n.sum(-1, keepdim=True) * (n_r < gamma).unsqueeze(1)  # no draft law at the bonus
        rate = (p_n - q_n).clamp_min(0)
        rate = torch.where(rate.sum(-1, keepdim=True) > 0, rate, p_n)  # p = q: a rejection cannot happen
        race = torch.empty(len(rows), V, dtype=torch.float64, device=gen_device).exponential_(generator=generator)
        # argmin E_y / r_y = argmax (log r_y − log E_y); r_y = 0 never wins
        tokens[rows, n_r] = (rate.log() - race.to(device).log()).argmax(dim=-1)
    return tokens


@register(contract="sampler", kind="control", models=_CONTROL, position_laws=ALGORITHM1.position_laws,
          exact_acceptance=ALGORITHM1.acceptance, needs=("a Python loop per row: use ~10^4 rows, not 10^5",))
def per_row_loop(target_probs, draft_probs, draft_tokens, generator):
    """Algorithm 1 as a plain loop over rows and positions, final tokens drawn with torch.multinomial."""
    B, gamma, V = check_shapes(target_probs, draft_probs, draft_tokens)
    gen_device = generator.device if generator is not None else torch.device("cpu")
    x = draft_tokens.long()
    # vectorised parts: the draws of the acceptance uniforms and the probabilities of the drafted tokens
    u = torch.rand(B, gamma, generator=generator, device=gen_device, dtype=torch.float64).tolist()
    p_x = _gather_tokens(target_probs[:, :gamma], x).tolist()
    q_x = _gather_tokens(draft_probs, x).tolist()
    x_list = x.tolist()
    out = torch.full((B, gamma + 1), -1, dtype=torch.long)
    for b in range(B):
        n = 0
        while n < gamma:
            ratio = p_x[b][n] / q_x[b][n] if q_x[b][n] > 0 else (math.inf if p_x[b][n] > 0 else 0.0)
            if not u[b][n] < ratio:
                break
            out[b, n] = x_list[b][n]
            n += 1
        p = target_probs[b, n].double()
        law = p / p.sum()
        if n < gamma:
            q = draft_probs[b, n].double()
            leftover = (law - q / q.sum()).clamp_min(0)
            if leftover.sum() > 0:
                law = leftover
        out[b, n] = int(torch.multinomial(law.to(gen_device), 1, generator=generator))
    return out.to(target_probs.device)
