"""Sampler-level zoo (§1a `verify`): mutants, equivalent mutants and wasteful-but-lossless variants.

Each entry is the reference rule (`harness.mutants.rule.Rule()`) with one part changed, so it is as
fast as the reference and its exact per-position law comes for free (`Rule.position_laws`).

The harness draws the draft tokens from q itself, so bugs in how a real engine *drafts* are modelled
inside `verify` as the implementation's own view of the laws: a greedy drafter replaces the given
tokens by argmax q; "q used for the ratio ≠ q the tokens came from" re-processes q before using it;
"processing on one side only" re-processes p or q. Each docstring says how that maps to the real bug.
Names are importable as `harness.mutants.sampler:NAME` (what `specdec verify --impl` takes).
"""

from __future__ import annotations

import torch

from harness.mutants.base import register
from harness.mutants.rule import (
    Accept,
    Draw,
    Rule,
    Tensor,
    at_position,
    min_ratio,
    normalized,
    q_at_position,
    residual,
    scaled_ratio,
)
from specdec_ref.processing import logits_to_probs
from specdec_ref.sampling import sample_from_uniform
from specdec_ref.verify import greedy_verify

# Settings of the one-sided processing mutants (chosen so the bug is large on toy and real vocabularies).
TARGET_TEMPERATURE = 0.7  # the request's temperature, ignored by the target side
DRAFT_TEMPERATURE = 0.7  # temperature the drafts were sampled at (ratio used the raw q)
RESIDUAL_TEMPERATURE = 0.9  # temperature applied in the residual only (STATS.md's analytic mutant)
TOP_P = 0.9
TOP_K_MAX = 50  # top-k on q only: k = min(50, V // 4), so that it cuts something even at V = 8
SCALE = 0.8  # λ of the scaled-acceptance wasteful variant
OUT_OF_RANGE_BLOCK = 1024  # vocab padded to a multiple of this in the buggy residual kernel
OUT_OF_RANGE_MASS = 0.05  # share of recovered draws that land in the padding lanes


# ---------------------------------------------------------------- views (the implementation's own p or q)

def _at_temperature(temperature: float):
    def view(t: Tensor) -> Tensor:  # re-process a law as if its logits were log t
        return logits_to_probs(t.log(), temperature, validate=False)
    return view


def _top_p(t: Tensor) -> Tensor:
    return logits_to_probs(t.log(), 1.0, None, TOP_P, validate=False)


def top_k_for(V: int) -> int:
    return max(1, min(TOP_K_MAX, V // 4))


def _top_k(t: Tensor) -> Tensor:
    return logits_to_probs(t.log(), 1.0, top_k_for(t.shape[-1]), None, validate=False)


def _bf16(t: Tensor) -> Tensor:
    return t.to(torch.bfloat16).to(t.dtype)  # rounded, not renormalised: what a bf16 drafter hands over


# ---------------------------------------------------------------- acceptance tests

ALWAYS = Accept(test=lambda u, p_x, q_x: torch.ones_like(u, dtype=torch.bool),
                prob=lambda p_x, q_x: torch.ones_like(p_x))
INVERTED = Accept(test=lambda u, p_x, q_x: u * p_x < q_x, prob=lambda p_x, q_x: min_ratio(q_x, p_x))
P_ONLY = Accept(test=lambda u, p_x, q_x: u < p_x, prob=lambda p_x, q_x: p_x)  # ratio with q(x) taken as 1
LESS_EQUAL = Accept(test=lambda u, p_x, q_x: u * q_x <= p_x, prob=min_ratio)
DIVISION = Accept(test=lambda u, p_x, q_x: u < p_x / q_x, prob=min_ratio)
COMPLEMENT = Accept(test=lambda u, p_x, q_x: (1 - u) * q_x < p_x, prob=min_ratio)


# ---------------------------------------------------------------- final laws (p', q', n [B], x_n [B]) -> [B, V]

def _gamma(q: Tensor) -> int:
    return q.shape[1]


def _from_p(p, q, n, x_n):
    return at_position(p, n)


def _from_q(p, q, n, x_n):
    return torch.where((n < _gamma(q)).unsqueeze(1), q_at_position(q, n), at_position(p, n))


def _bonus_from_last_draft_position(p, q, n, x_n):
    gamma = _gamma(q)
    return residual(at_position(p, torch.where(n == gamma, gamma - 1, n)), q_at_position(q, n))


def _residual_at(shift: int):
    def final(p, q, n, x_n):
        gamma = _gamma(q)
        m = torch.where(n < gamma, (n + shift).clamp(0, gamma), n)
        return residual(at_position(p, m), q_at_position(q, m))
    return final


def _residual_at_temperature(p, q, n, x_n):
    p_n = at_position(p, n)
    p_t = torch.where((n < _gamma(q)).unsqueeze(1), _at_temperature(RESIDUAL_TEMPERATURE)(p_n), p_n)
    return residual(p_t, q_at_position(q, n))


def _unnormalized_residual(p, q, n, x_n):
    p_n = at_position(p, n)
    r = (p_n - q_at_position(q, n)).clamp_min(0)
    return torch.where(r.sum(-1, keepdim=True) > 0, r, p_n)


def _scaled_residual(lam: float):
    def final(p, q, n, x_n):  # norm(p_n − λ·min(p_n, q_n)); p_γ at the bonus position (q row = 0)
        p_n = at_position(p, n)
        return normalized(p_n - lam * torch.minimum(p_n, q_at_position(q, n)))
    return final


def _p_without_draft(p, q, n, x_n):
    p_n = at_position(p, n)
    onehot = torch.nn.functional.one_hot(x_n, p.shape[-1]).to(p_n.dtype)
    return residual(p_n, onehot * (n < _gamma(q)).unsqueeze(1).to(p_n.dtype))


# ---------------------------------------------------------------- final draws

def _recovered_only(draw_recovered, law_recovered) -> Draw:
    """A draw that is buggy for recovered tokens only; bonus tokens use the reference's inverse CDF."""
    def draw(law, u_final, u_test, recovered):
        return torch.where(recovered, draw_recovered(law, u_test), sample_from_uniform(law, u_final))

    def law(F, r, recovered):
        return law_recovered(F, r) if recovered else F

    return Draw(draw, law)


def _argmax_law(F, r):
    return torch.nn.functional.one_hot(F.argmax(-1), F.shape[-1]).to(F.dtype)


def _law_given_reused_uniform(F: Tensor, r: Tensor) -> Tensor:
    """Inverse-CDF law of F when u is the rejected test's uniform, i.e. u ~ U[r(x), 1): [V_x, V]."""
    cdf = F.cumsum(-1).expand(r.shape[0], -1)  # [V_x, V]
    lo = r.unsqueeze(1)
    width = (cdf.clamp_min(lo) - (cdf - F).clamp_min(lo)).clamp_min(0)  # |[C_{y-1}, C_y) ∩ [r, 1)|
    return torch.where(lo < 1, width / (1 - lo).clamp_min(1e-300), F.expand_as(width))


def _padded_block_draw(law: Tensor, u: Tensor) -> Tensor:
    """Inverse CDF over [law·(1 − π), π/pad, …, π/pad] (the padding lanes last), without building it."""
    V = law.shape[-1]
    pad = -V % OUT_OF_RANGE_BLOCK
    if pad == 0:
        return sample_from_uniform(law, u)
    inside = 1 - OUT_OF_RANGE_MASS
    lane = V + ((u - inside) / OUT_OF_RANGE_MASS * pad).long().clamp(0, pad - 1)
    return torch.where(u < inside, sample_from_uniform(law, (u / inside).clamp_max(1)), lane)


def _padded_block_law(F: Tensor, r) -> Tensor:
    return F * (1 - OUT_OF_RANGE_MASS) if F.shape[-1] % OUT_OF_RANGE_BLOCK else F


ARGMAX_RECOVERED = _recovered_only(lambda law, u: law.argmax(-1), _argmax_law)
REUSED_UNIFORM = _recovered_only(sample_from_uniform, _law_given_reused_uniform)
PADDED_BLOCK = Draw(
    draw=lambda law, u_final, u_test, recovered: torch.where(
        recovered, _padded_block_draw(law, u_final), sample_from_uniform(law, u_final)),
    law=lambda F, r, recovered: _padded_block_law(F, r) if recovered else F,
)
REVERSED_ORDER = Draw(
    draw=lambda law, u_final, u_test, recovered: law.shape[-1] - 1 - sample_from_uniform(law.flip(-1), u_final),
    law=lambda F, r, recovered: F,
)


# ---------------------------------------------------------------- registration helper

def _zoo(rule: Rule, *, kind: str, models: str, needs: tuple[str, ...] = ()):
    """Register a `verify` whose body is `rule`; the function's own docstring is its description."""
    def deco(fn):
        def verify(target_probs, draft_probs, draft_tokens, generator):
            return rule(target_probs, draft_probs, draft_tokens, generator)

        verify.__name__, verify.__qualname__, verify.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        verify.rule = rule
        laws = rule.position_laws if rule.analytic else None
        return register(contract="sampler", kind=kind, models=models, position_laws=laws,
                        exact_acceptance=rule.acceptance if rule.analytic else None, needs=needs)(verify)
    return deco


_RESIDUAL_PATH = "rejections (α well below 1: bugs on the residual path shift the law by ∝ 1 − α)"
_BONUS_PATH = "all γ drafts accepted often (high α) and p_γ ≠ p_(γ−1) (distinct rows per position)"
_POSITIONS = "γ ≥ 2 and distinct (p_j, q_j) at different positions, with a per-position conditional test"


# ================================================================ mutants (lossy)

@_zoo(Rule(accept=ALWAYS), kind="mutant", models="transformers PR #28508: n_matches wrong, drafts always accepted")
def always_accept(target_probs, draft_probs, draft_tokens, generator):
    """Accept every draft token, then draw the bonus from p_γ: the emitted law at draft positions is q."""


@_zoo(Rule(final=_from_p), kind="mutant", needs=(_RESIDUAL_PATH,),
      models="vllm-ascend #7807: block verification without the adjusted residual")
def residual_from_p(target_probs, draft_probs, draft_tokens, generator):
    """After a rejection, draw from p_n instead of norm((p_n − q_n)₊): law min(p, q) + (1 − α)·p."""


@_zoo(Rule(final=_from_q), kind="mutant", needs=(_RESIDUAL_PATH,),
      models="failure mode: residual taken from the draft's law")
def residual_from_q(target_probs, draft_probs, draft_tokens, generator):
    """After a rejection, draw from q_n: law min(p, q) + (1 − α)·q."""


@_zoo(Rule(accept=INVERTED), kind="mutant", models="failure mode: acceptance ratio inverted (p and q swapped)")
def inverted_ratio(target_probs, draft_probs, draft_tokens, generator):
    """Accept with probability min(1, q/p) instead of min(1, p/q); residual as the reference."""


@_zoo(Rule(greedy_draft=True), kind="mutant", needs=("q not one-hot (sampling at temperature > 0)",),
      models="transformers #32867 / PR #33534 (jaymody/speculative-sampling #3): greedy drafts, softmax q")
def greedy_draft_softmax_q(target_probs, draft_probs, draft_tokens, generator):
    """Its drafter takes argmax q (the given draft tokens are replaced by it) while the ratio and the
    residual still use the softmax q: the token argmax q is over-emitted."""


@_zoo(Rule(q_view=_at_temperature(1 / DRAFT_TEMPERATURE)), kind="mutant",
      models="transformers #47932 / PR #47961: drafts from processed logits, raw logits returned as q")
def ratio_q_unprocessed(target_probs, draft_probs, draft_tokens, generator):
    """q for the ratio ≠ q the tokens came from: the tokens were drawn from q (processed at temperature
    0.7) but ratio and residual use the raw draft law norm(q^0.7) that the same logits give at T = 1."""


@_zoo(Rule(q_view=_top_p), kind="mutant",
      models="transformers PR #28166 / vLLM #9834: top-p applied to one side only (here q, ratio side)")
def top_p_draft_only(target_probs, draft_probs, draft_tokens, generator):
    """Ratio and residual use q after top-p 0.9 while the drafts came from the full q: a draft outside
    the nucleus has q' = 0 and is always accepted."""


@_zoo(Rule(q_view=_top_k), kind="mutant", needs=("V ≥ 8 so that top-k (k = min(50, V // 4)) cuts something",),
      models="transformers PR #28166: assistant ignored the main config (top-k on one side only)")
def top_k_draft_only(target_probs, draft_probs, draft_tokens, generator):
    """Ratio and residual use q after top-k (k = min(50, V // 4)) while drafts came from the full q."""


@_zoo(Rule(p_view=_at_temperature(1 / TARGET_TEMPERATURE)), kind="mutant",
      models="vLLM #9834 / PR #10198: target p ignored the request's temperature while q used it")
def target_ignores_temperature(target_probs, draft_probs, draft_tokens, generator):
    """The target side skips the request's temperature 0.7: it verifies against the raw law
    norm(p^0.7) (p is the processed law the harness asks for), so it emits norm(p^0.7) exactly."""


@_zoo(Rule(final=_residual_at_temperature), kind="mutant", needs=(_RESIDUAL_PATH,),
      models="sglang #10617: processing (logit_bias / min_p) not applied on every path")
def residual_temperature(target_probs, draft_probs, draft_tokens, generator):
    """Temperature 0.9 applied in the residual only: norm((norm(p^(1/0.9)) − q)₊) after a rejection."""


@_zoo(Rule(q_view=_bf16), kind="mutant",
      needs=("a tiny effect (TV ~1e-3): exact laws or ~10^6 samples", "float32/float64 inputs (bf16 q: no-op)"),
      models="DeepSpec #31: drafts sampled in bf16, q computed in fp32")
def q_bf16_one_side(target_probs, draft_probs, draft_tokens, generator):
    """Ratio and residual use q rounded to bfloat16 (not renormalised) while the drafts came from the
    full-precision q: min(1, p/q) is tilted by the rounding error (~0.4 % per entry)."""


@_zoo(Rule(final=_bonus_from_last_draft_position), kind="mutant", needs=(_BONUS_PATH,),
      models="failure mode: off-by-one in the bonus position")
def bonus_wrong_position(target_probs, draft_probs, draft_tokens, generator):
    """After γ acceptances, draw the bonus from p_(γ−1) instead of p_γ (first token unaffected)."""


@_zoo(Rule(final=_residual_at(+1)), kind="mutant", needs=(_RESIDUAL_PATH, "distinct rows per position"),
      models="failure mode: off-by-one in the residual position (n + 1)")
def residual_next_position(target_probs, draft_probs, draft_tokens, generator):
    """After a rejection at n, draw from the residual of position n + 1 (p_γ when n + 1 = γ)."""


@_zoo(Rule(final=_residual_at(-1)), kind="mutant", needs=(_POSITIONS,),
      models="failure mode: off-by-one in the residual position (n − 1, clipped at 0)")
def residual_previous_position(target_probs, draft_probs, draft_tokens, generator):
    """After a rejection at n ≥ 1, draw from the residual of position n − 1 (correct at n = 0)."""


@_zoo(Rule(draw=REUSED_UNIFORM), kind="mutant", needs=(_RESIDUAL_PATH,),
      models="failure mode: random numbers reused (acceptance uniform reused for the residual draw)")
def reused_uniform_residual(target_probs, draft_probs, draft_tokens, generator):
    """The recovered token is drawn by inverse CDF with the same uniform that just failed the
    acceptance test, so u ∈ [p/q, 1) is not uniform: low-index residual tokens are under-drawn."""


@_zoo(Rule(same_uniform=True), kind="mutant",
      needs=(_POSITIONS, "a conditional test at positions ≥ 1, or serial dependence across positions"),
      models="failure mode: random numbers reused (one acceptance uniform for all positions of a row)")
def same_uniform_all_positions(target_probs, draft_probs, draft_tokens, generator):
    """Every acceptance test of a row uses the same uniform: given position j was reached, u < the
    earlier ratios, so later drafts are accepted too often (position 0 is unaffected)."""


@_zoo(Rule(draw=PADDED_BLOCK), kind="mutant",
      needs=(_RESIDUAL_PATH, f"V not a multiple of {OUT_OF_RANGE_BLOCK}", "a support check (id < V)"),
      models="vLLM advisory GHSA-8wr5-jm2h-8r4f: recovered token id ≥ vocab size")
def out_of_range_recovered(target_probs, draft_probs, draft_tokens, generator):
    """The residual is sampled over the vocabulary padded to a multiple of 1024, and the padding lanes
    are not masked: 5 % of recovered tokens are ids ≥ V."""


@_zoo(Rule(draw=ARGMAX_RECOVERED), kind="mutant", needs=(_RESIDUAL_PATH,),
      models="mistral.rs PR #2424: built the filtered distribution, then returned its argmax")
def argmax_residual(target_probs, draft_probs, draft_tokens, generator):
    """After a rejection, emit argmax of norm((p − q)₊) instead of a sample from it."""


@_zoo(Rule(accept=P_ONLY, final=_from_p), kind="mutant", needs=(_RESIDUAL_PATH,),
      models="vLLM #40149 / PR #40269: probabilistic draft passed draft_probs=None (one-hot q)")
def one_hot_q_unmasked_residual(target_probs, draft_probs, draft_tokens, generator):
    """q taken as one-hot on the draft token (accept with probability p(x)), and after a rejection the
    recovered token is drawn from p without removing x: x is over-emitted. (With x removed the same
    rule is lossless: see `one_hot_q`.)"""


def _greedy_laws(p: Tensor, q: Tensor) -> Tensor:
    return torch.nn.functional.one_hot(p.double().argmax(-1), p.shape[-1]).double()


def _greedy_acceptance(p: Tensor, q: Tensor) -> Tensor:
    return normalized(q.double()).gather(-1, p[:-1].argmax(-1, keepdim=True)).squeeze(-1)


@register(contract="sampler", kind="mutant", position_laws=_greedy_laws, exact_acceptance=_greedy_acceptance,
          models="sglang PR #31214: verification silently greedy when temperature > 0")
def greedy_at_temperature(target_probs, draft_probs, draft_tokens, generator):
    """A sampling request served greedily: accept while the draft is argmax p, then emit argmax p."""
    return greedy_verify(target_probs, draft_tokens).tokens


# ================================================================ equivalent mutants (must pass)

_EQUIVALENT = "equivalent: cannot change the law; exclude from power claims"


@_zoo(Rule(accept=LESS_EQUAL), kind="equivalent", models=_EQUIVALENT)
def accept_less_equal(target_probs, draft_probs, draft_tokens, generator):
    """`u·q ≤ p` instead of `u·q < p`: differs only on {u·q = p}, probability 0 for a continuous u
    (one float64 grid point, ~1e-16; it would accept a p = 0 token only if u is exactly 0)."""


@_zoo(Rule(accept=DIVISION), kind="equivalent", models=_EQUIVALENT)
def accept_by_division(target_probs, draft_probs, draft_tokens, generator):
    """`u < p/q` computed by division instead of `u·q < p`: the same event for q(x) > 0, which holds for
    every token drawn from q."""


@_zoo(Rule(accept=COMPLEMENT), kind="equivalent", models=_EQUIVALENT)
def accept_complement_uniform(target_probs, draft_probs, draft_tokens, generator):
    """Tests with 1 − u instead of u: 1 − u is uniform too, so P(accept) is unchanged."""


@_zoo(Rule(final=_unnormalized_residual), kind="equivalent", models=_EQUIVALENT)
def unnormalized_residual(target_probs, draft_probs, draft_tokens, generator):
    """Feeds (p − q)₊ unnormalised to the inverse-CDF sampler, which scales u by the total mass."""


@_zoo(Rule(draw=REVERSED_ORDER), kind="equivalent", models=_EQUIVALENT)
def reversed_cdf_order(target_probs, draft_probs, draft_tokens, generator):
    """Inverse CDF over the vocabulary in reverse order: another map from u to tokens, the same law."""


# ================================================================ lossless but wasteful (must pass, report)

@_zoo(Rule(accept=scaled_ratio(SCALE), final=_scaled_residual(SCALE)), kind="wasteful",
      models="lossless, acceptance λ·α: a conservative ('safety margin') acceptance with its matching residual")
def scaled_acceptance(target_probs, draft_probs, draft_tokens, generator):
    """Accept with probability λ·min(1, p/q), λ = 0.8, then draw from r = norm(p − λ·min(p, q)).

    Lossless: P(emit y) = q(y)·λ·min(1, p(y)/q(y)) + (1 − λα)·r(y) = λ·min(p, q)(y) + (p − λ·min(p, q))(y)
    = p(y), because Σ_y (p − λ·min(p, q))(y) = 1 − λα (and p − λ·min(p, q) ≥ (1 − λ)·p ≥ 0). The
    acceptance rate is λ·α < α. Drawing from norm((p − q)₊) instead would be lossy.
    """


@_zoo(Rule(accept=scaled_ratio(0.0), final=_scaled_residual(0.0)), kind="wasteful",
      models="lossless, acceptance 0: every draft rejected, each step is one plain target sample")
def always_reject(target_probs, draft_probs, draft_tokens, generator):
    """Reject every draft and draw from p_0 (λ = 0 in `scaled_acceptance`: the residual is p itself)."""


@_zoo(Rule(accept=P_ONLY, final=_p_without_draft, final_uses_draft=True), kind="wasteful",
      models="vLLM #40149 / PR #40269 done consistently: q treated as one-hot, acceptance Σ q·p ≤ α")
def one_hot_q(target_probs, draft_probs, draft_tokens, generator):
    """q taken as one-hot on the draft token: accept x with probability p(x); after a rejection draw
    from p with x removed. Lossless for any draft law:
    P(y) = q(y)p(y) + Σ_(x≠y) q(x)(1 − p(x))·p(y)/(1 − p(x)) = q(y)p(y) + p(y)(1 − q(y)) = p(y);
    acceptance Σ q·p ≤ Σ min(p, q)."""


# ================================================================ batch-index slips (need rows that differ)

@register(contract="sampler", kind="mutant", models="TRT-LLM #15098 (Eagle3 tree verification read the wrong logits "
          "slice), vllm-ascend #2881: a row reads another row's target law",
          needs=("rows holding different laws (the rows-differ cases)",))
def row_slip_target(target_probs, draft_probs, draft_tokens, generator):
    """Row b verifies against row (b + 1) mod B's target law: correct arithmetic on the wrong row.

    Invisible when every row holds the same (p, q); on rows holding different laws the emitted law of
    row b is the chain's law for (p of row b + 1, q of row b)."""
    return Rule()(target_probs.roll(-1, dims=0), draft_probs, draft_tokens, generator)


# ================================================================ RNG resolution (issue 46: the deep-tail probe)
# The final draw (residual and bonus alike) made with ~24 bits of randomness. Each changes the law only on tokens
# whose probability is below ~2^-24 of the head's: no case of the default plan has one (every one of them
# passes it, measured in results/tail/), the opt-in deep-tail case does (`--cases default tail-v131072`).

TAIL_CASES = ("tail-v131072",)
_RESOLUTION = ("tokens below ~2^-24 of the head's probability with a measurable total mass: the opt-in "
               "deep-tail case tail-v131072 and its deep-tail test",)


def _no_closed_form(F, r, recovered):  # pragma: no cover - these entries register no exact law
    raise NotImplementedError


def _final_draw_rule(race) -> Rule:
    """The reference rule whose final token is drawn by `race(law [B, V], u_final [B], generator)`."""
    def verify(target_probs, draft_probs, draft_tokens, generator):
        draw = Draw(draw=lambda law, u_final, u_test, recovered: race(law, u_final, generator), law=_no_closed_form)
        return Rule(draw=draw)(target_probs, draft_probs, draft_tokens, generator)
    return verify


def exponential_race(law: Tensor, exponentials: Tensor) -> Tensor:
    """argmax_y law(y) / E_y: with E_y iid Exp(1) the winner has law `law` exactly (law [B, V], E [B, V])."""
    return (law.to(exponentials.dtype) / exponentials).argmax(-1)


def _uniforms(law: Tensor, generator) -> Tensor:
    gen_device = generator.device if generator is not None else torch.device("cpu")
    return torch.rand(law.shape, generator=generator, device=gen_device, dtype=torch.float64).to(law.device)


def _fp32_race(law, u_final, generator):
    gen_device = generator.device if generator is not None else torch.device("cpu")
    u = torch.rand(law.shape, generator=generator, device=gen_device, dtype=torch.float32).to(law.device)
    u24 = (u * 2.0 ** 24).floor_().div_(2.0 ** 24)  # fp32 rand is on this 2^-24 grid already (CPU); made explicit
    return exponential_race(law, -torch.log(u24))  # E ≥ −log(1 − 2^-24) ≈ 2^-24, on a 2^-24 grid near 0


def _floored_race(law, u_final, generator):
    u = _uniforms(law, generator).clamp_min_(2.0 ** -24)  # "avoid log(0)": u floored at 2^-24
    return exponential_race(law, -torch.log1p(-u))  # E = −log(1 − u) ≥ ~2^-24


def _fp64_race(law, u_final, generator):
    return exponential_race(law, -torch.log(_uniforms(law, generator)))  # 53-bit uniforms: E ≥ ~2^-53


def fp32_cumsum(law, u_final, generator):
    import numpy as np

    cdf = torch.from_numpy(np.cumsum(law.detach().cpu().float().numpy(), axis=-1))  # float32 running sum
    target = (u_final.cpu().double() * cdf[:, -1].double()).float().unsqueeze(-1)
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=law.shape[-1] - 1).to(law.device)


@register(contract="sampler", kind="mutant", needs=_RESOLUTION, cases=TAIL_CASES,
          models="vLLM #43150, #51367: fp32 exponential noise for the residual / bonus draw (a 262,144-token tail "
                 "expected 32.8 times, hit 0 times)")
def fp32_exponential_race(target_probs, draft_probs, draft_tokens, generator):
    """Final token by an exponential race argmax p/E with E = −log(u) from 24-bit (fp32) uniforms: E is floored
    at ~2^-24, so a token below ~2^-24 of the head's probability (times E_head) never wins."""
    return _final_draw_rule(_fp32_race)(target_probs, draft_probs, draft_tokens, generator)


@register(contract="sampler", kind="mutant", needs=_RESOLUTION, cases=TAIL_CASES,
          models="tl.rand floors u at 2^-31 (here at 2^-24): the exponential race's floor")
def floored_uniform_race(target_probs, draft_probs, draft_tokens, generator):
    """Final token by an exponential race with E = −log(1 − u), u float64 but floored at 2^-24 (to "avoid
    log(0)"): E ≥ ~2^-24, the deep tail is lost exactly as with fp32 uniforms, however fine u is above the floor."""
    return _final_draw_rule(_floored_race)(target_probs, draft_probs, draft_tokens, generator)


@register(contract="sampler", kind="mutant", needs=_RESOLUTION, cases=TAIL_CASES,
          models="vLLM #54843 class (a precision downcast on one path): the inverse CDF over a float32 running sum")
def fp32_cumsum_inverse_cdf(target_probs, draft_probs, draft_tokens, generator):
    """Final token by inverse CDF over a float32 running sum of the law (float64 u): past the head the running
    sum is ~1 and an increment below 2^-25 rounds away, so every later deep-tail token has zero width."""
    return _final_draw_rule(fp32_cumsum)(target_probs, draft_probs, draft_tokens, generator)


@register(contract="sampler", kind="control", cases=TAIL_CASES, position_laws=Rule().position_laws,
          exact_acceptance=Rule().acceptance,
          models="control: the mutants' race in float64 (53-bit uniforms; E floored at ~2^-53)")
def fp64_exponential_race(target_probs, draft_probs, draft_tokens, generator):
    """Final token by an exponential race argmax p/E, E = −log(u), u float64 — the code of fp32_exponential_race
    with 53-bit uniforms: lossless up to a floor of ~2^-53 (a tail token of relative probability 2^-25.6 is
    resolved 2^27 times over), so its exact law is Algorithm 1's."""
    return _final_draw_rule(_fp64_race)(target_probs, draft_probs, draft_tokens, generator)


# ================================================================ lossy by design (issue 46): knobs that trade exactness
# for acceptance. Lossy: the harness must FAIL them; `specdec verify --estimate` says how far they are (their exact
# per-position law comes from the rule, so the estimate's coverage is measured on them: results/estimate/).

LENIENCE = 0.5
THRESHOLD_SINGLE = 0.05  # accept outright when p(x) ≥ this
THRESHOLD_ACC = 1.0  # otherwise accept with min(1, p / (this · q)) (1: the exact test)


def _lenient(lam: float) -> Accept:
    return Accept(test=lambda u, p_x, q_x: u * lam * q_x < p_x, prob=lambda p_x, q_x: min_ratio(p_x, lam * q_x))


THRESHOLDS = Accept(
    test=lambda u, p_x, q_x: (p_x >= THRESHOLD_SINGLE) | (u * THRESHOLD_ACC * q_x < p_x),
    prob=lambda p_x, q_x: torch.where(p_x >= THRESHOLD_SINGLE, torch.ones_like(p_x), min_ratio(p_x, THRESHOLD_ACC * q_x)),
)


@_zoo(Rule(accept=_lenient(LENIENCE)), kind="mutant",
      models="lossy by design: lucidrains' `lenience` (accept with min(1, p / (λ·q)), λ = 0.5)")
def lenient_acceptance(target_probs, draft_probs, draft_tokens, generator):
    """Accept with probability min(1, p/(0.5·q)) — a draft is kept whenever p/q ≥ 0.5 — and draw the residual
    from norm((p − q)₊) as the reference: more acceptance, drafts over-emitted where q > p."""


@_zoo(Rule(accept=THRESHOLDS), kind="mutant",
      models="lossy by design: acceptance thresholds (SGLang speculative_accept_threshold_single / _acc < 1, "
             "vLLM acceptance_threshold)")
def threshold_acceptance(target_probs, draft_probs, draft_tokens, generator):
    """Accept outright when p(x) ≥ 0.05, else with the exact probability min(1, p/q); residual as the reference:
    a draft the target finds likely enough is kept even where q(x) > p(x)."""


RELAXED_TOP_K = 3  # relaxed acceptance: the draft must be among the target's top K tokens …
RELAXED_RATIO = 0.5  # … and within this ratio of the top-1 probability (TensorRT-LLM's δ on log-probs: ratio e^-δ)
TYPICAL_EPSILON = 0.09  # typical acceptance: accept x iff p(x) > min(ε, α·exp(−H(p))) (Medusa's posterior_threshold
TYPICAL_ALPHA = 0.3  # and posterior_alpha defaults)


def _relaxed_table(p: Tensor, q: Tensor) -> Tensor:
    """[..., V]: 1 where x is among p's top K and p(x) ≥ r·max p, else the exact min(1, p/q)."""
    k = min(RELAXED_TOP_K, p.shape[-1])
    kth = p.topk(k, dim=-1).values[..., -1:]  # [..., 1] the K-th largest probability (ties at it count as top K)
    candidate = (p >= kth) & (p >= RELAXED_RATIO * p.amax(-1, keepdim=True))
    return torch.where(candidate, torch.ones_like(p), min_ratio(p, q))


def _typical_table(p: Tensor, q: Tensor) -> Tensor:
    """[..., V]: 1 where p(x) > min(ε, α·exp(−H(p))), else 0 (the draft law plays no part)."""
    entropy = -torch.special.xlogy(p, p).sum(-1, keepdim=True)  # natural log, 0·log 0 = 0
    threshold = torch.clamp_max(TYPICAL_ALPHA * torch.exp(-entropy), TYPICAL_EPSILON)
    return (p > threshold).to(p.dtype)


@_zoo(Rule(accept_table=_relaxed_table), kind="mutant",
      models="lossy by design: relaxed acceptance (TensorRT-LLM PR #3865, DeepSeek-R1 thinking: the draft is kept when "
             "it is among the target's top-K tokens and its log-probability is within δ of the top-1's; K = 3, "
             "e^-δ = 0.5)")
def relaxed_acceptance(target_probs, draft_probs, draft_tokens, generator):
    """Accept outright when the draft is among the target's 3 likeliest tokens and p(x) ≥ 0.5·max p, else with the
    exact probability min(1, p/q); residual as the reference: candidate tokens are over-emitted where q > p."""


@_zoo(Rule(accept_table=_typical_table, final=_from_p), kind="mutant",
      models="lossy by design: Medusa's typical acceptance (Cai et al. 2024: accept x iff p(x) > min(ε, α·e^−H(p)), "
             "ε = 0.09, α = 0.3; after a rejection the next token is drawn from the target's p)")
def typical_acceptance(target_probs, draft_probs, draft_tokens, generator):
    """Accept x deterministically iff p(x) > min(0.09, 0.3·exp(−H(p))); after a rejection draw from p_n (no residual):
    law q·1[typical] + (1 − q(typical))·p, off p wherever q and p disagree on the typical set."""
