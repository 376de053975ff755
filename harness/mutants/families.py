"""Zoo entries for the block family (§1a `verify` signature) and the draft step (`draft_and_verify`).

Block verification (specdec_ref/block.py), sampler level:
- `block_token_level_accept`: the chain's accept rule cumprod(min(1, p/q)) ≥ cumprod(u) with the block
  residual (vllm-ascend #7807 / #7808);
- `block_residual_from_p`: the block stop rule with the residual drawn from p_A instead of
  norm((ρ_A p_A − q_A)₊) (vllm-ascend #7807);
- controls: the reference (`specdec_ref.adapters:block_verify`) and `block_exponential_clocks`, an
  independent formulation (log-space weights, exponential clocks for the stop tests, a backward scan
  for A and an exponential race for the residual).

Draft step (the implementation drafts; level "draft_step"):
- `argmax_drafts_softmax_q`: drafts = argmax q, verified with the softmax q (transformers #32867);
- `draft_noise_reused`: one uniform per position drafts x_i (inverse CDF of q_i), runs the acceptance
  test and draws the recovered token (vLLM #47386 / PR #54282, where the draft's Gumbel noise shared a
  Philox offset with the acceptance uniform and the recovery noise);
- controls: `specdec_ref.adapters:draft_and_verify` (chain) and `block_draft_and_verify`.

Exact laws: block entries by enumeration of the draft tuples (`block_position_laws`, for V^γ small:
larger shapes raise, and the campaign reports "n/a"); the draft-step mutants in closed form.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import torch

from harness.mutants.base import declare, register
from harness.mutants.rule import Rule, check_shapes, draw_uniforms, leading_run, normalized
from harness.stats.bounds import block_acceptance
from specdec_ref.adapters import block_draft_and_verify, block_verify, draft_and_verify
from specdec_ref.block import block_accept_and_final_law, block_weights, stop_probabilities
from specdec_ref.draft_step import draw_drafts
from specdec_ref.sampling import sample_from_uniform
from specdec_ref.verify import accept_and_final_law as chain_accept_and_final_law
from specdec_ref.verify import assemble, verify_step

Tensor = torch.Tensor
ENUMERATION_LIMIT = 2e7  # V^γ · V: draft tuples × vocabulary of an exact block law (larger shapes: no exact law)
CHUNK_FLOATS = 1 << 22  # draft tuples × γ × V processed at once by the exact integration (bounds memory)
_BLOCK = "Sun et al. 2024 (arXiv 2403.10444) block verification"


# ---------------------------------------------------------------- exact laws

def lossless_laws(p: Tensor, q: Tensor) -> Tensor:
    """p [γ+1, V], q [γ, V] -> [γ+1, V]: the law of a lossless rule at every reached position is p."""
    return normalized(p.double())


def block_conditional_acceptance(p: Tensor, q: Tensor) -> Tensor:
    """[γ] P(draft j accepted | j reached) of block verification: B_{j+1} / B_j (B_0 = 1)."""
    b = np.concatenate([[1.0], block_acceptance(p.double().numpy(), q.double().numpy())])
    return torch.from_numpy(np.where(b[:-1] > 0, b[1:] / np.where(b[:-1] > 0, b[:-1], 1.0), 0.0))


def _all_tuples(gamma: int, V: int) -> Tensor:
    if V ** gamma * V > ENUMERATION_LIMIT:
        raise ValueError(f"exact block law needs V^γ·V = {V ** gamma * V:.3g} floats (> {ENUMERATION_LIMIT:g})")
    return torch.tensor(list(itertools.product(range(V), repeat=gamma)), dtype=torch.long)  # [N, γ]


def block_position_laws(final_law: Callable) -> Callable:
    """position_laws(p, q) of a rule with the block stop rule and final law `final_law(p, q, x, A)`
    ([N, γ+1, V], [N, γ, V], [N, γ], [N] -> [N, V]), integrated over every draft tuple (in chunks)."""
    def laws(p: Tensor, q: Tensor) -> Tensor:
        p, q = normalized(p.double()), normalized(q.double())
        gamma, V = q.shape
        tuples = _all_tuples(gamma, V)
        out = torch.zeros(gamma + 1, V, dtype=torch.float64)
        reach = torch.zeros(gamma + 1, dtype=torch.float64)
        for x in tuples.split(max(1, CHUNK_FLOATS // (gamma * V))):
            _accumulate(p, q, x, final_law, out, reach)
        # A position no draft tuple reaches is never tested; report p there (TV 0) rather than an empty row.
        return torch.where(reach.unsqueeze(1) > 0, out / reach.clamp_min(1e-300).unsqueeze(1), p)
    return laws


def _accumulate(p: Tensor, q: Tensor, x: Tensor, final_law: Callable, out: Tensor, reach: Tensor) -> None:
    """Add the emitted-token mass of draft tuples x [N, γ] to out [γ+1, V] and P(reach j) to reach [γ+1]."""
    N, gamma = x.shape
    w = torch.stack([q[i, x[:, i]] for i in range(gamma)]).prod(0)  # [N] P(drafts = x)
    pe, qe = p.expand(N, -1, -1), q.expand(N, -1, -1)
    rho = block_weights(torch.stack([p[i, x[:, i]] for i in range(gamma)], 1),
                        torch.stack([q[i, x[:, i]] for i in range(gamma)], 1))
    h = stop_probabilities(rho, pe, qe)  # [N, γ+1], h_0 = 1
    # P(A = a | x) = h_a Π_{i>a} (1 − h_i): the largest passing index
    tail = torch.flip(torch.cumprod(torch.flip(1 - h, [1]), 1), [1])  # [N, γ+1] Π_{i≥a}(1 − h_i)
    prob_a = h * torch.cat([tail[:, 1:], torch.ones(N, 1, dtype=h.dtype)], 1)
    for a in range(gamma + 1):
        wa = w * prob_a[:, a]
        reach[: a + 1] += wa.sum()
        out[a] += (wa.unsqueeze(1) * final_law(pe, qe, x, torch.full((N,), a))).sum(0)
        for j in range(a):
            out[j].index_add_(0, x[:, j], wa)


def block_accept_and_final_law_given_a(p: Tensor, q: Tensor, x: Tensor, a: Tensor, rho: Tensor | None = None) -> Tensor:
    """The block residual norm((ρ_a p_a − q_a)₊) (p_γ at a = γ) for given stop indices a [N]; p [N, γ+1, V],
    q [N, γ, V] normalised, x [N, γ]; ρ [N, γ+1] computed from the reference's recursion unless given."""
    N, gamma = x.shape
    V = p.shape[-1]
    rho = rho if rho is not None else block_weights(p[:, :gamma].gather(-1, x.unsqueeze(-1)).squeeze(-1), q.gather(-1, x.unsqueeze(-1)).squeeze(-1))
    p_a = p.gather(1, a.view(N, 1, 1).expand(N, 1, V)).squeeze(1)
    q_a = q.gather(1, a.clamp(max=gamma - 1).view(N, 1, 1).expand(N, 1, V)).squeeze(1) * (a < gamma).unsqueeze(1)
    r = (rho.gather(1, a.unsqueeze(1)) * p_a - q_a).clamp_min(0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / mass.clamp_min(1e-300), p_a)


def _p_at_stop(p, q, x, a):
    N, V = x.shape[0], p.shape[-1]
    return p.gather(1, a.view(N, 1, 1).expand(N, 1, V)).squeeze(1)


# ---------------------------------------------------------------- block mutants and control (§1a verify)

def _uniforms(target_probs, draft_probs, draft_tokens, generator):
    B, gamma, _ = check_shapes(target_probs, draft_probs, draft_tokens)
    u = draw_uniforms(B, gamma, generator, target_probs.device)  # [B, γ+1]
    return u[:, :gamma], u[:, gamma]


@register(contract="sampler", kind="mutant", models="vllm-ascend #7807 / #7808: block verifier with the token-level accept rule")
def block_token_level_accept(target_probs, draft_probs, draft_tokens, generator):
    """Block verification whose accept rule is the chain's, cumprod(min(1, p/q)) ≥ cumprod(u) (leading
    run), while the final token comes from the block residual norm((ρ_n p_n − q_n)₊)."""
    u, u_final = _uniforms(target_probs, draft_probs, draft_tokens, generator)
    p, q = normalized(target_probs.double()), normalized(draft_probs.double())
    gamma = q.shape[1]
    x = draft_tokens.long()
    ratio = (p[:, :gamma].gather(-1, x.unsqueeze(-1)).squeeze(-1)
             / q.gather(-1, x.unsqueeze(-1)).squeeze(-1).clamp_min(1e-300)).clamp_max(1)
    n = leading_run(torch.cumprod(ratio, 1) >= torch.cumprod(u.double(), 1))  # [B]
    law = block_accept_and_final_law_given_a(p, q, x, n)
    return assemble(x, n, sample_from_uniform(law, u_final))


@register(contract="sampler", kind="mutant", models="vllm-ascend #7807: block verification without the adjusted residual",
          position_laws=block_position_laws(_p_at_stop), exact_acceptance=block_conditional_acceptance)
def block_residual_from_p(target_probs, draft_probs, draft_tokens, generator):
    """Block verification's stop rule, then the final token from p_A instead of norm((ρ_A p_A − q_A)₊)."""
    u, u_final = _uniforms(target_probs, draft_probs, draft_tokens, generator)
    n, _ = block_accept_and_final_law(target_probs, draft_probs, draft_tokens, u)
    law = _p_at_stop(normalized(target_probs.double()), None, draft_tokens, n)
    return assemble(draft_tokens.long(), n, sample_from_uniform(law, u_final))


BLOCK_REFERENCE = declare(
    block_verify, "block_reference", contract="sampler", kind="control", models=f"control: the reference ({_BLOCK})",
    description="specdec_ref.adapters:block_verify, block verification by inverse CDF from explicit uniforms",
    position_laws=lossless_laws, exact_acceptance=block_conditional_acceptance)


@register(contract="sampler", kind="control", models=f"control: {_BLOCK}, an independent formulation",
          position_laws=lossless_laws, exact_acceptance=block_conditional_acceptance)
def block_exponential_clocks(target_probs, draft_probs, draft_tokens, generator):
    """Block verification in log space with exponential clocks: stop test E_i > −log h_i, A by a
    backward scan, final token argmax_y (log r(y) − log E_y) over the residual r = (ρ_A p_A − q_A)₊."""
    B, gamma, V = check_shapes(target_probs, draft_probs, draft_tokens)
    gen_device = generator.device if generator is not None else torch.device("cpu")
    p = target_probs.double() / target_probs.double().sum(-1, keepdim=True)
    q = draft_probs.double() / draft_probs.double().sum(-1, keepdim=True)
    x = draft_tokens.long()
    log_r = p[:, :gamma].gather(-1, x.unsqueeze(-1)).squeeze(-1).log() - q.gather(-1, x.unsqueeze(-1)).squeeze(-1).log()
    log_rho = [torch.zeros(B, dtype=torch.float64)]
    for i in range(gamma):
        log_rho.append((log_rho[-1] + log_r[:, i]).clamp_max(0).nan_to_num(nan=0.0))  # q(x) = 0: not drawable
    rho = torch.stack(log_rho, 1).exp()  # [B, γ+1]
    excess = (rho[:, :gamma, None] * p[:, :gamma] - q).clamp_min(0).sum(-1)  # [B, γ]
    log_h = torch.cat([excess.log() - (excess + 1 - rho[:, :gamma]).log(), log_rho[-1].unsqueeze(1)], 1)[:, 1:]
    log_h = torch.where(torch.isnan(log_h), torch.zeros_like(log_h), log_h)  # 0/0: p_i = q_i, ρ_i = 1
    clocks = torch.empty(B, gamma, dtype=torch.float64, device=gen_device).exponential_(generator=generator)
    passed = clocks.to(p.device) > -log_h  # [B, γ]: P(E > −log h) = h
    n = torch.zeros(B, dtype=torch.long)
    for i in range(gamma, 0, -1):  # backward scan: the largest passing index wins
        n = torch.where((n == 0) & passed[:, i - 1], i, n)
    rate = block_accept_and_final_law_given_a(p, q, x, n, rho)
    race = torch.empty(B, V, dtype=torch.float64, device=gen_device).exponential_(generator=generator)
    final = (rate.log() - race.to(p.device).log()).argmax(-1)
    return assemble(x, n, final)


# ---------------------------------------------------------------- draft step (draft_and_verify)

GREEDY_DRAFTER = Rule(greedy_draft=True)


def _noise_reuse_laws(p: Tensor, q: Tensor) -> Tensor:
    """Exact per-position laws when u_i drafts x_i = F_q⁻¹(u_i), tests u_i·q(x) < p(x) and, on rejection,
    draws the residual by inverse CDF at the same u_i: lengths of [0, 1) segments, [γ+1, V]."""
    p, q = normalized(p.double()), normalized(q.double())
    gamma = q.shape[0]
    laws = []
    for j in range(gamma):
        hi = q[j].cumsum(0)
        lo = hi - q[j]
        ratio = torch.where(q[j] > 0, p[j] / q[j].clamp_min(1e-300), torch.zeros_like(q[j]))
        accepted = (torch.minimum(hi, ratio) - lo).clamp_min(0)  # [V] u ∈ [C_{x−1}, min(C_x, r(x)))
        rej_lo = torch.minimum(torch.maximum(lo, ratio), hi)  # [V] rejected u of x: [rej_lo, hi), sorted in x
        res = (p[j] - q[j]).clamp_min(0)
        res = res / res.sum() if res.sum() > 0 else p[j]
        r_hi = res.cumsum(0)
        # mass of residual token y = |S ∩ [R_{y−1}, R_y)|, S = ∪ rejected segments, via F(t) = |S ∩ [0, t)|
        F = _covered_length(rej_lo, hi, torch.cat([torch.zeros(1, dtype=r_hi.dtype), r_hi]))
        law = accepted + F.diff()
        laws.append(law / law.sum())
    laws.append(p[gamma])
    return torch.stack(laws)


def _covered_length(lo: Tensor, hi: Tensor, t: Tensor) -> Tensor:
    """|∪_x [lo_x, hi_x) ∩ [0, t)| for sorted, disjoint segments (lo, hi [V]) at points t [M]."""
    cum = torch.cat([torch.zeros(1, dtype=lo.dtype), (hi - lo).cumsum(0)])  # length of the first k segments
    k = torch.searchsorted(lo.contiguous(), t.contiguous(), right=True)  # segments starting at or before t
    last = (k - 1).clamp_min(0)
    partial = (torch.minimum(t, hi[last]) - lo[last]).clamp_min(0) * (k > 0)
    return cum[last] + partial


def _noise_reuse_acceptance(p: Tensor, q: Tensor) -> Tensor:
    p, q = normalized(p.double()), normalized(q.double())
    hi = q.cumsum(-1)
    ratio = torch.where(q > 0, p[:-1] / q.clamp_min(1e-300), torch.zeros_like(q))
    return (torch.minimum(hi, ratio) - (hi - q)).clamp_min(0).sum(-1)


@register(contract="draft_step", kind="mutant", position_laws=GREEDY_DRAFTER.position_laws,
          exact_acceptance=GREEDY_DRAFTER.acceptance,
          models="transformers #32867 / PR #33534: greedy (argmax) drafts verified with the softmax q")
def argmax_drafts_softmax_q(target_probs, draft_probs, generator):
    """Drafts are argmax q (greedy drafter) while the chain verification receives the softmax q."""
    drafts = draft_probs.argmax(-1)
    return drafts, verify_step(target_probs, draft_probs, drafts, generator).tokens


@register(contract="draft_step", kind="mutant", position_laws=_noise_reuse_laws, exact_acceptance=_noise_reuse_acceptance,
          models="vLLM #47386 / PR #54282: drafting noise shared with the acceptance test and the recovery draw")
def draft_noise_reused(target_probs, draft_probs, generator):
    """One uniform per position drafts x_i, tests u_i·q(x_i) < p(x_i) and draws the recovered token
    (bonus: a fresh uniform): each draft and its own acceptance are no longer independent."""
    B, gamma, _ = draft_probs.shape
    u = draw_uniforms(B, gamma, generator, draft_probs.device)  # [B, γ+1]; column γ: the bonus draw
    drafts = draw_drafts(draft_probs, u[:, :gamma])
    n, law = chain_accept_and_final_law(target_probs, draft_probs, drafts, u[:, :gamma])
    u_final = torch.where(n < gamma, u.gather(1, n.clamp_max(gamma - 1).unsqueeze(1)).squeeze(1), u[:, gamma])
    return drafts, assemble(drafts, n, sample_from_uniform(law, u_final))


DRAFT_STEP_REFERENCE = declare(
    draft_and_verify, "draft_step_reference", contract="draft_step", kind="control",
    models="control: the reference drafts from q, then Algorithm 1 (Leviathan et al. 2023)",
    description="specdec_ref.adapters:draft_and_verify, drafts by inverse CDF of q then the chain rule",
    position_laws=lossless_laws, exact_acceptance=Rule().acceptance)
BLOCK_DRAFT_STEP_REFERENCE = declare(
    block_draft_and_verify, "block_draft_step_reference", contract="draft_step", kind="control",
    models=f"control: the reference drafts from q, then {_BLOCK}",
    description="specdec_ref.adapters:block_draft_and_verify, drafts by inverse CDF of q then block verification",
    position_laws=lossless_laws, exact_acceptance=block_conditional_acceptance)
