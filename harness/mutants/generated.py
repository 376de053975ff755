"""Generated verification rules for the invariance suite: a family of *lossless* rules that differ from
the reference in everything a verdict must not depend on, and planted slips that every mode must fail.

A lossless rule here accepts draft x at position j with probability c_j · min(1, p_j(x) / q_j(x)) for an
acceptance scale c_j in (0, 1] and, at the first rejection, draws from the corrected residual

    r_j ∝ p_j − c_j · min(p_j, q_j),

so that P(emit y | j reached) = c_j·min(p_j, q_j)(y) + (1 − c_j·Σ min(p_j, q_j))·r_j(y) = p_j(y): the emitted
law is exactly p_j at every position (c_j = 1 is Leviathan's rule; c_j < 1 is lossless but wasteful).
Its uniforms come from the generator it is handed or from torch's global RNG, drawn as [B, γ], [B·γ] or
position by position, acceptance first or residual first; rows are processed together or one at a time;
it computes in float16 / float32 / float64.
"""

from __future__ import annotations

import dataclasses

import torch

RNG_SOURCES = ("generator", "global", "global_flat")
ORDERS = ("accept_first", "residual_first")
DTYPES = ("float16", "float32", "float64")


@dataclasses.dataclass(frozen=True)
class LosslessRule:
    """One generated lossless rule (see the module docstring); `slip` plants a bug instead."""

    scales: tuple[float, ...] = (1.0,)  # acceptance scale per position (cycled over γ)
    rng: str = "generator"
    order: str = "accept_first"
    loop: str = "vector"
    dtype: str = "float64"
    # None (lossless), "target_row" (row b reads row b+1's p), "draft_row" (… q): batch-index slips, invisible
    # at one row per call; "residual_p": at a rejection, sample from p instead of norm((p − q)₊) (any batch size)
    slip: str | None = None

    @property
    def name(self) -> str:
        scales = "/".join(f"{c:.2f}" for c in self.scales)
        return (f"scaled({scales}) rng={self.rng} {self.order} {self.loop} {self.dtype}"
                + (f" slip={self.slip}" if self.slip else ""))

    def _uniforms(self, shape: tuple[int, ...], generator):
        if self.rng == "generator":
            return torch.rand(shape, generator=generator, dtype=torch.float64)
        if self.rng == "global_flat":
            n = 1
            for s in shape:
                n *= s
            return torch.rand(n, dtype=torch.float64).view(shape)
        return torch.rand(shape, dtype=torch.float64)

    def __call__(self, target_probs, draft_probs, draft_tokens, generator):
        p = target_probs.to(getattr(torch, self.dtype)).double()
        q = draft_probs.to(getattr(torch, self.dtype)).double()
        if self.slip == "target_row":
            p = p.roll(-1, dims=0)
        elif self.slip == "draft_row":
            q = q.roll(-1, dims=0)
        p = p / p.sum(-1, keepdim=True)
        q = q / q.sum(-1, keepdim=True)
        x = draft_tokens.long()
        B, gamma = x.shape
        if self.loop == "rows":
            rows = [self._rows(p[b:b + 1], q[b:b + 1], x[b:b + 1], generator) for b in range(B)]
            return torch.cat(rows).to(target_probs.device)
        return self._rows(p, q, x, generator).to(target_probs.device)

    def _rows(self, p, q, x, generator):
        B, gamma = x.shape
        c = torch.tensor([self.scales[j % len(self.scales)] for j in range(gamma)], dtype=torch.float64)
        if self.order == "accept_first":
            u_accept = self._uniforms((B, gamma), generator)
            u_final = self._uniforms((B,), generator)
        else:
            u_final = self._uniforms((B,), generator)
            u_accept = self._uniforms((B, gamma), generator)
        px = p[:, :gamma].gather(-1, x.unsqueeze(-1)).squeeze(-1)
        qx = q.gather(-1, x.unsqueeze(-1)).squeeze(-1)
        ratio = torch.where(qx > 0, px / qx.clamp_min(1e-300), torch.ones_like(px))
        accept = u_accept < c * ratio.clamp(max=1.0)
        n = accept.long().cumprod(-1).sum(-1)  # accepted drafts per row
        rows = torch.arange(B)
        p_n = p[rows, n]  # [B, V] the law at the first rejection (or the bonus position)
        q_n = torch.where((n < gamma).unsqueeze(-1), q[rows, n.clamp(max=gamma - 1)], torch.zeros_like(p_n))
        c_n = c[n.clamp(max=gamma - 1)].unsqueeze(-1) * (n < gamma).unsqueeze(-1)
        final = (p_n - c_n * torch.minimum(p_n, q_n)).clamp_min(0)
        final = torch.where(final.sum(-1, keepdim=True) > 0, final, p_n)
        if self.slip == "residual_p":
            final = p_n
        cdf = final.cumsum(-1)
        y = (cdf < u_final.unsqueeze(-1) * cdf[:, -1:]).sum(-1).clamp(max=p.shape[-1] - 1)
        out = torch.full((B, gamma + 1), -1, dtype=torch.int64)
        keep = torch.arange(gamma + 1).unsqueeze(0) < n.unsqueeze(-1)
        out[:, :gamma][keep[:, :gamma]] = x[keep[:, :gamma]]
        out[rows, n] = y
        return out


def half_acceptance(target_probs, draft_probs, draft_tokens, generator):
    """Accept with probability ½·min(1, p/q) and correct the residual to p − ½·min(p, q): lossless, wasteful."""
    return LosslessRule(scales=(0.5,))(target_probs, draft_probs, draft_tokens, generator)


def global_rng_uniforms(target_probs, draft_probs, draft_tokens, generator):
    """Leviathan's rule drawing its uniforms from torch's global RNG as torch.rand(B, γ): lossless."""
    return LosslessRule(rng="global")(target_probs, draft_probs, draft_tokens, generator)


def global_rng_flat_uniforms(target_probs, draft_probs, draft_tokens, generator):
    """Leviathan's rule drawing its uniforms from torch's global RNG as torch.rand(B·γ): lossless."""
    return LosslessRule(rng="global_flat")(target_probs, draft_probs, draft_tokens, generator)


def as_draft_step(rule: LosslessRule):
    """The draft-and-verify form of a rule: it draws its drafts x_j ~ q_j on the generator it is handed
    (inverse CDF, per row and position), then verifies them with `rule`."""
    def draft_and_verify(target_probs, draft_probs, generator):
        q = draft_probs.double()
        q = q / q.sum(-1, keepdim=True)
        u = torch.rand(q.shape[:-1] + (1,), generator=generator, dtype=torch.float64)
        x = (q.cumsum(-1) < u).sum(-1).clamp(max=q.shape[-1] - 1)
        return x, rule(target_probs, draft_probs, x, generator)

    draft_and_verify.__name__ = f"draft_step({rule.name})"
    return draft_and_verify


def as_generate(rule: LosslessRule):
    """The whole-generate() form of a rule: the reference's speculative loop with `rule` as its verify step
    (the greedy rule at temperature 0). The rule's generator is seeded afresh at every step from the loop's
    own final uniform, so its draws stay independent of everything the harness draws; a row slip now reads
    another row of the batch (another continuation, or another context)."""
    from harness.mutants.hooked import Hooks, hooked_generate
    from specdec_ref.verify import VerifyOutput, greedy_verify

    def verify(p, q, x, u_accept, u_final, temperature):
        if temperature == 0:
            return greedy_verify(p, x)
        generator = torch.Generator().manual_seed(int(u_final[0].item() * 2**62))
        out = rule(p.cpu(), q.cpu(), x.cpu(), generator)
        return VerifyOutput(out.to(x.device), ((out >= 0).sum(-1) - 1).to(x.device))

    hooks = Hooks(verify=verify)

    def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed, **extra):
        return hooked_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                               temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, hooks=hooks,
                               **extra).tokens

    generate.__name__ = f"generate({rule.name})"
    return generate


# Named instances, importable as "module:name" (dask workers, `specdec verify --impl`).
half_acceptance_generate = as_generate(LosslessRule(scales=(0.5,)))
global_rng_generate = as_generate(LosslessRule(rng="global_flat", order="residual_first"))
row_slip_target_generate = as_generate(LosslessRule(slip="target_row"))
