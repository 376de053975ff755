"""A verification rule as a handful of swappable parts, run batched or integrated exactly.

Algorithm 1 (Leviathan et al. 2023) for one row, with the parts a buggy implementation changes:

    p', q'  = p_view(p), q_view(q)            the implementation's own view of the two laws
    x       = draft tokens (the harness drew them from q; a greedy drafter replaces them by argmax q)
    accept  = accept.test(u_i, p'_i(x_i), q'_i(x_i)) at each position, with P(accept) = accept.prob(...)
              (or u_i < accept_table(p'_i, q'_i)[x_i] for a test that reads the whole row: top-K, entropy)
    n       = length of the leading run of acceptances
    final   = a token drawn by `draw` from final(p', q', n, x_n): the residual (n < γ) or the bonus (n = γ)

`Rule()` with no argument is the reference rule; each mutant changes one part. Because every part
has a closed form, `Rule.position_laws` integrates a rule exactly: the law of the token emitted at
position j given that j is reached is

    law_j(y) = d_j(y)·a_j(y) + Σ_x d_j(x)·(1 − a_j(x))·G_j(x, y),     law_γ = law of the bonus draw,

with d_j the law of the draft actually tested (q_j, or a point mass for a greedy drafter), a_j(x) the
acceptance probability of x and G_j(x, ·) the law of the final token after x is rejected at j.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import torch

from specdec_ref.sampling import sample_from_uniform
from specdec_ref.verify import VerifyOutput, assemble

Tensor = torch.Tensor


# ---------------------------------------------------------------- small tensor helpers

def work_dtype(*tensors: Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32 (as the reference)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def normalized(t: Tensor) -> Tensor:
    """Rows of t [..., V] scaled to sum to 1."""
    return t / t.sum(dim=-1, keepdim=True)


def at_position(t: Tensor, n: Tensor) -> Tensor:
    """t [B, K, V], n [B] -> t[b, n_b] [B, V]."""
    B, _, V = t.shape
    return t.gather(1, n.view(B, 1, 1).expand(B, 1, V)).squeeze(1)


def q_at_position(q: Tensor, n: Tensor) -> Tensor:
    """q [B, γ, V] read at n [B] with a zero row at n = γ (the bonus position has no draft law)."""
    gamma = q.shape[1]
    q_n = at_position(q, n.clamp_max(gamma - 1))
    return q_n * (n < gamma).unsqueeze(1).to(q.dtype)


def residual(p_n: Tensor, q_n: Tensor) -> Tensor:
    """norm((p_n − q_n)₊) row-wise [B, V]; p_n where the residual has no mass (p_n = q_n)."""
    r = (p_n - q_n).clamp_min(0)
    mass = r.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, r / mass.clamp_min(torch.finfo(r.dtype).tiny), p_n)


def leading_run(accepted: Tensor) -> Tensor:
    """accepted [B, γ] bool -> number of leading True per row [B] int64."""
    return accepted.long().cumprod(dim=-1).sum(dim=-1)


def rowwise(fn: Callable[[Tensor], Tensor], t: Tensor) -> Tensor:
    """fn(t) for a row-wise fn on t [B, ...]; computed once when t is one row broadcast over the batch
    (stride 0, how a harness passes one (p, q) to many trials), so views cost O(γV), not O(BγV)."""
    if t.shape[0] > 1 and t.stride(0) == 0:
        return fn(t[:1]).expand(t.shape)
    return fn(t)


def _row_table(fn: Callable[[Tensor, Tensor], Tensor], p: Tensor, q: Tensor) -> Tensor:
    """fn(p, q) for a row-wise fn of two [B, ...] tensors, computed once when both are one row broadcast."""
    if p.shape[0] > 1 and p.stride(0) == 0 and q.stride(0) == 0:
        return fn(p[:1], q[:1]).expand(p.shape)
    return fn(p, q)


def draw_uniforms(B: int, gamma: int, generator: torch.Generator | None, device) -> Tensor:
    """[B, γ+1] float64 uniforms drawn exactly as the reference draws them (γ tests, then the final)."""
    gen_device = generator.device if generator is not None else torch.device("cpu")
    return torch.rand(B, gamma + 1, generator=generator, device=gen_device, dtype=torch.float64).to(device)


def check_shapes(target_probs: Tensor, draft_probs: Tensor, draft_tokens: Tensor) -> tuple[int, int, int]:
    """Assert the §1a shapes and return (B, γ, V)."""
    B, gamma = draft_tokens.shape
    V = target_probs.shape[-1]
    assert target_probs.shape == (B, gamma + 1, V), (tuple(target_probs.shape), (B, gamma + 1, V))
    assert draft_probs.shape == (B, gamma, V), (tuple(draft_probs.shape), (B, gamma, V))
    return B, gamma, V


# ---------------------------------------------------------------- acceptance tests

class Accept(NamedTuple):
    """test(u, p_x, q_x) -> accepted (bool); prob(p_x, q_x) -> P_u(accepted), both elementwise."""

    test: Callable[[Tensor, Tensor, Tensor], Tensor]
    prob: Callable[[Tensor, Tensor], Tensor]


def min_ratio(p_x: Tensor, q_x: Tensor) -> Tensor:
    """min(1, p/q), with q = 0 counted as ratio +inf (accepted iff p > 0)."""
    return torch.where(q_x > 0, (p_x / q_x.clamp_min(torch.finfo(q_x.dtype).tiny)).clamp_max(1), (p_x > 0).to(p_x))


RATIO = Accept(test=lambda u, p_x, q_x: u * q_x < p_x, prob=min_ratio)


def scaled_ratio(lam: float) -> Accept:
    """Accept with probability λ·min(1, p/q)."""
    return Accept(test=lambda u, p_x, q_x: u * q_x < lam * torch.minimum(p_x, q_x),
                  prob=lambda p_x, q_x: lam * min_ratio(p_x, q_x))


# ---------------------------------------------------------------- final laws: (p', q', n, x_n) -> [B, V]

def residual_or_bonus(p: Tensor, q: Tensor, n: Tensor, x_n: Tensor) -> Tensor:
    """The reference: norm((p_n − q_n)₊) after a rejection at n < γ, p_γ after γ acceptances."""
    return residual(at_position(p, n), q_at_position(q, n))


# ---------------------------------------------------------------- final draws

class Draw(NamedTuple):
    """How the final token is drawn from its law, and the law that results.

    draw(law [B, V], u_final [B], u_test [B], recovered [B] bool) -> token [B]; u_test is the uniform
    of the acceptance test at the stopping position (meaningful where recovered).
    law(F [V] or [X, V], r [X], recovered) -> [V] or [X, V]: law of the drawn token given the final
    law F, the rejected draft's acceptance probability r (the test failed: u_test ∈ [r, 1)) and
    whether this is a recovered (True) or a bonus (False) token. Rows may sum to < 1 if mass leaves
    the vocabulary.
    """

    draw: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
    law: Callable[[Tensor, Tensor, bool], Tensor]


INVERSE_CDF = Draw(draw=lambda law, u_final, u_test, recovered: sample_from_uniform(law, u_final),
                   law=lambda F, r, recovered: F)


# ---------------------------------------------------------------- the rule

def _as_is(t: Tensor) -> Tensor:
    return t


@dataclasses.dataclass(frozen=True)
class Rule:
    """A verification rule; the defaults are Algorithm 1 exactly (the reference's behaviour)."""

    p_view: Callable[[Tensor], Tensor] = _as_is  # [..., V] normalised p -> the implementation's p
    q_view: Callable[[Tensor], Tensor] = _as_is  # [..., V] normalised q -> the q it uses in ratio and residual
    greedy_draft: bool = False  # its drafter is greedy: it tests argmax q, not the given draft tokens
    accept: Accept = RATIO
    # tests that read the whole row (the target's top-K, its entropy): (p' [..., V], q' [..., V]) -> [..., V], the
    # probability of accepting each token x; the test is u < table[x]. Replaces `accept` when given.
    accept_table: Callable[[Tensor, Tensor], Tensor] | None = None
    final: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor] = residual_or_bonus
    final_uses_draft: bool = False  # `final` reads x_n (the exact law then needs a [V, V] table)
    draw: Draw = INVERSE_CDF
    same_uniform: bool = False  # one acceptance uniform shared by every position of a row

    @property
    def analytic(self) -> bool:
        """Whether `position_laws` is exact (a shared uniform makes position j depend on the past)."""
        return not self.same_uniform

    def __call__(
        self,
        target_probs: Tensor,  # [B, γ+1, V]
        draft_probs: Tensor,  # [B, γ, V]
        draft_tokens: Tensor,  # [B, γ]
        generator: torch.Generator | None,
    ) -> Tensor:  # [B, γ+1] int64, -1 padded
        """§1a `verify`: uniforms drawn as the reference draws them, then `from_uniforms`."""
        B, gamma, _ = check_shapes(target_probs, draft_probs, draft_tokens)
        u = draw_uniforms(B, gamma, generator, target_probs.device)  # [B, γ+1]
        return self.from_uniforms(target_probs, draft_probs, draft_tokens, u[:, :gamma], u[:, gamma]).tokens

    def from_uniforms(
        self,
        target_probs: Tensor,  # [B, γ+1, V]
        draft_probs: Tensor,  # [B, γ, V]
        draft_tokens: Tensor,  # [B, γ]
        u_accept: Tensor,  # [B, γ] one uniform per acceptance test
        u_final: Tensor,  # [B] the uniform of the recovered / bonus draw
    ) -> VerifyOutput:
        """The rule on given uniforms (the shape of `specdec_ref.verify.verify_from_uniforms`)."""
        B, gamma, V = check_shapes(target_probs, draft_probs, draft_tokens)
        dtype = work_dtype(target_probs, draft_probs)
        q_true = rowwise(lambda t: normalized(t.to(dtype)), draft_probs)  # [B, γ, V]
        p = rowwise(lambda t: self.p_view(normalized(t.to(dtype))), target_probs)  # [B, γ+1, V]
        q = rowwise(self.q_view, q_true)  # [B, γ, V]
        x = q_true.argmax(dim=-1) if self.greedy_draft else draft_tokens.long()  # [B, γ]
        u_test = u_accept[:, :1].expand(B, gamma) if self.same_uniform else u_accept  # [B, γ]
        p_x = p[:, :gamma].gather(-1, x.unsqueeze(-1)).squeeze(-1)  # [B, γ]
        q_x = q.gather(-1, x.unsqueeze(-1)).squeeze(-1)  # [B, γ]
        if self.accept_table is None:
            accepted = self.accept.test(u_test.to(dtype), p_x, q_x)  # [B, γ]
        else:
            table = _row_table(self.accept_table, p[:, :gamma], q)  # [B, γ, V]
            accepted = u_test.to(dtype) < table.gather(-1, x.unsqueeze(-1)).squeeze(-1)
        n = leading_run(accepted)  # [B]
        stop = n.clamp_max(gamma - 1).unsqueeze(1)  # [B, 1] the position whose test failed (if any)
        law = self.final(p, q, n, x.gather(1, stop).squeeze(1))  # [B, V]
        token = self.draw.draw(law, u_final, u_test.gather(1, stop).squeeze(1), n < gamma)
        return VerifyOutput(assemble(x, n, token), n)

    # ------------------------------------------------------------ exact integration (one row)

    def _views(self, p: Tensor, q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q_true = normalized(q.double())
        return self.p_view(normalized(p.double())), self.q_view(q_true), q_true

    def _draft_laws(self, q_true: Tensor) -> Tensor:  # [γ, V] law of the tested draft at each position
        if not self.greedy_draft:
            return q_true
        return torch.nn.functional.one_hot(q_true.argmax(-1), q_true.shape[-1]).double()

    def acceptance(self, p: Tensor, q: Tensor) -> Tensor:
        """p [γ+1, V], q [γ, V] -> [γ]: P(draft j accepted | position j reached)."""
        pv, qv, q_true = self._views(p, q)
        return (self._draft_laws(q_true) * self._accept_prob(pv[:-1], qv)).sum(-1)

    def _accept_prob(self, p: Tensor, q: Tensor) -> Tensor:  # [..., V] rows -> P(accept x) for every x
        return self.accept.prob(p, q) if self.accept_table is None else self.accept_table(p, q)

    def position_laws(self, p: Tensor, q: Tensor) -> Tensor:
        """p [γ+1, V], q [γ, V] -> [γ+1, V] float64: law of the emitted token at j given j is reached."""
        if not self.analytic:
            raise ValueError("this rule has no per-position closed form (shared uniforms)")
        pv, qv, q_true = self._views(p, q)
        gamma, V = q.shape
        d = self._draft_laws(q_true)  # [γ, V]
        laws = []
        for j in range(gamma + 1):
            if self.final_uses_draft and j < gamma:  # one final law per rejected draft x: [V_x, V]
                xs = torch.arange(V)
                F = self.final(pv.expand(V, -1, -1), qv.expand(V, -1, -1), torch.full((V,), j), xs)
            else:
                F = self.final(pv[None], qv[None], torch.tensor([j]), torch.zeros(1, dtype=torch.long))[0]
            F = normalized(F)
            if j == gamma:
                laws.append(self.draw.law(F, None, False))
                continue
            a = self._accept_prob(pv[j], qv[j])  # [V] acceptance probability of each draft
            G = self.draw.law(F, a, True)  # [V] or [V_x, V]
            w = d[j] * (1 - a)  # [V] mass of "x drafted and rejected"
            rejected = (w.unsqueeze(1) * G).sum(0) if G.dim() == 2 else w.sum() * G
            laws.append(d[j] * a + rejected)
        return torch.stack(laws)
