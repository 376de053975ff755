"""OpenVINO GenAI's speculative-sampling rule as read from its source, as planted §1a `verify` functions
(docs/CONTRACT.md §1a), for `specdec campaign openvino_genai`. Not in the zoo's catalogue; named on command lines as
`harness.mutants.openvino:NAME`.

Read at openvino.genai master da1db864d (2026-08-21; the installed 2026.4.1.0-3408-ab01d1771e4 is a later commit
that no stored snapshot holds: its assertion `sequence_group.cpp:32` is the same line), `src/cpp/src/sampling/
sampler.cpp`:

- `Sampler::validate_candidate` (1386-1433): at draft position i the target pass first samples a *fresh* token x
  from the target's processed law p_i (`_multinomial_sample`, 1542), then accepts the draft d_i iff
  r <= p_i'/q_i' with p_i' = exp(the candidate's stored log-prob) = the draft's q_i(d_i) and q_i' =
  exp(x's log-prob) = p_i(x) (1408-1410: the names are swapped), and r = `uniform_int_distribution<>(0, 100)` / 100
  (1412-1414: 101 levels, r = 0 with probability 1/101).
- `sample_from_sequence_group` (1575-1578): on a rejection with sampling on, `continue`: nothing is emitted at i; the
  next iteration samples from the logits of position i + 1 (conditioned on the rejected d_i), and that token is
  registered in d_i's place (1551-1585) and the loop ends. No residual max(0, p - q) is ever drawn (`get_p_prime`,
  1436-1460, only rescales that token's reported log-prob).

`as_read_verify` is that rule; `patched_4190_verify` is the rule with the fix of openvino.genai #4190 (PR #4490:
"Accept Correct Token after Candidate Rejection"): on a rejection the fresh sample x from p_i is emitted at i and
the step ends; the acceptance test is untouched. `uniform101_verify` is the correct rule (Leviathan et al.: accept
with probability min(1, p/q), else draw from the residual) with only OpenVINO's 101-level uniform, to size that
part alone. The KV-cache bookkeeping of the as-read rule (one token too few rolled back, the prefix-caching
crash) lies outside one verify step: the generation level sees it, the sampler level cannot.
"""

from __future__ import annotations

import torch

LEVELS = 100  # r = uniform_int_distribution<>(0, LEVELS)(rng) / LEVELS: LEVELS + 1 values


def _uniform101(shape, generator, device) -> torch.Tensor:
    return torch.randint(0, LEVELS + 1, shape, generator=generator, device=device).to(torch.float64) / LEVELS


def _openvino_rule(target_probs, draft_probs, draft_tokens, generator, *, patched: bool) -> torch.Tensor:
    B, g1, _ = target_probs.shape
    gamma = g1 - 1
    dev = target_probs.device
    rows = torch.arange(B, device=dev)
    out = torch.full((B, g1), -1, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    rejected = torch.zeros(B, dtype=torch.bool, device=dev)  # as read: rejected at the previous position
    for i in range(g1):
        x = torch.multinomial(target_probs[:, i].to(torch.float64), 1, generator=generator).squeeze(1)
        late = rejected & ~done  # as read: the token sampled at i + 1 fills the rejected slot i
        out[late, i - 1] = x[late]
        done |= late
        live = ~done
        if i == gamma:  # every draft accepted: the bonus token
            out[live, i] = x[live]
            break
        d = draft_tokens[:, i]
        q_d = draft_probs[rows, i, d].to(torch.float64)
        p_x = target_probs[rows, i, x].to(torch.float64)
        accept = _uniform101((B,), generator, dev) <= q_d / p_x  # the draft's q(d) over the target's p(fresh x)
        keep = live & accept
        out[keep, i] = d[keep]
        miss = live & ~accept
        if patched:
            out[miss, i] = x[miss]
            done |= miss
        else:
            rejected |= miss
    return out


def as_read_verify(target_probs, draft_probs, draft_tokens, generator):
    """OpenVINO GenAI 2026.4's rule as read (module docstring): accept d_i iff r101 <= q_i(d_i) / p_i(x), x a fresh
    sample of p_i; on a rejection the token sampled from position i + 1 takes slot i."""
    return _openvino_rule(target_probs, draft_probs, draft_tokens, generator, patched=False)


def patched_4190_verify(target_probs, draft_probs, draft_tokens, generator):
    """The as-read rule with #4190's fix (PR #4490): on a rejection the fresh sample x ~ p_i is emitted at i."""
    return _openvino_rule(target_probs, draft_probs, draft_tokens, generator, patched=True)


def uniform101_verify(target_probs, draft_probs, draft_tokens, generator):
    """The correct rule (accept with min(1, p/q), else the residual max(0, p - q) normalized; the bonus from p_γ)
    with OpenVINO's 101-level uniform r = k / 100, k in 0..100, accepting iff r <= p / q."""
    B, g1, _ = target_probs.shape
    gamma = g1 - 1
    dev = target_probs.device
    rows = torch.arange(B, device=dev)
    out = torch.full((B, g1), -1, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    for i in range(g1):
        p = target_probs[:, i].to(torch.float64)
        live = ~done
        if i == gamma:
            x = torch.multinomial(p, 1, generator=generator).squeeze(1)
            out[live, i] = x[live]
            break
        d = draft_tokens[:, i]
        q = draft_probs[:, i].to(torch.float64)
        accept = _uniform101((B,), generator, dev) <= p[rows, d] / q[rows, d]
        keep = live & accept
        out[keep, i] = d[keep]
        miss = live & ~accept
        resid = (p - q).clamp_min(0.0)
        mass = resid.sum(1, keepdim=True)
        resid = torch.where(mass > 0, resid / mass.clamp_min(1e-300), p)  # p = q: any rejection is the r = 0 level
        x = torch.multinomial(resid, 1, generator=generator).squeeze(1)
        out[miss, i] = x[miss]
        done |= miss
    return out
