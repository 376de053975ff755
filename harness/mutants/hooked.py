"""The loop every generation-level zoo entry runs, and the exact law of its output.

`hooked_generate` is the reference's speculative loop, `specdec_ref.generate.speculative_generate`, called with
`hooks=`: a `StepHooks` (here `Hooks`) names the parts of a step (target and draft laws, the draft token, verify,
the two model runners, emit, the drafts per step), and the generation-level entries of the zoo
(harness.mutants.generation, batched, architectures, structured; the generated rules of harness.mutants.generated)
replace one or more of them. With the default hooks (`REFERENCE_HOOKS`) it is the reference: it
reproduces `specdec_ref.adapters:generate` token for token (tests/mutants/test_mutants_generation.py checks it).

`lifted` makes a sampler-level `Rule` (harness.mutants.rule) the verify hook. `exact_output_law` enumerates, in
float64, the law of what a many-row run of the loop emits for p/q-hook entries and for a lifted rule with a closed
form (`integrable`): the exact value printed beside an estimate, and the exact laws the campaigns and
harness.mutants.joint compare with.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.mutants.rule import INVERSE_CDF, Rule, normalized
from specdec_ref.adapters import cache_strategy
from specdec_ref.generate import (
    REFERENCE_HOOKS,
    GenerationResult,
    StepHooks,
    default_eos,
    speculative_generate,
)
from specdec_ref.processing import History, SamplingParams, extend_history, history_of
from specdec_ref.verify import greedy_verify

Tensor = torch.Tensor

Hooks = StepHooks  # the reference's swappable parts; each generation mutant replaces one


def hooked_generate(
    target,
    draft,
    input_ids: Tensor,  # [B, T] int64
    *,
    max_new_tokens: int,
    gamma: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    seed: int,
    hooks: StepHooks = REFERENCE_HOOKS,
    cache: str | None = None,  # None: the reference adapter's choice (cache_strategy)
    **extra,  # the optional sampling parameters (min_p, logit_bias, ...)
) -> GenerationResult:
    """The reference's speculative loop (same random streams, same order of draws) with `hooks`."""
    return speculative_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                eos_token_id=default_eos(target), hooks=hooks,
                                cache=cache or cache_strategy(input_ids, max_new_tokens, target), **extra)


def lifted(rule: Rule) -> Callable:
    """A sampler-level `Rule` as the verify hook (the greedy rule is kept at temperature 0); the hook carries the
    rule (`verify.rule`), so `exact_output_law` integrates it where the rule has a closed form (`integrable`)."""
    def verify(p, q, x, u_accept, u_final, temperature):
        if temperature == 0:
            return greedy_verify(p, x)
        return rule.from_uniforms(p, q, x, u_accept, u_final)
    verify.rule = rule
    return verify


def integrable(rule: Rule | None) -> bool:
    """Whether `exact_output_law` integrates a lifted rule: per-position uniforms (no shared one), the drafts tested
    as drawn (no greedy drafter) and the final token drawn from its law by the inverse CDF."""
    return rule is not None and rule.analytic and not rule.greedy_draft and rule.draw is INVERSE_CDF


def lifted_rule(hooks: Hooks) -> Rule | None:
    """The sampler-level `Rule` a lifted verify hook carries; None for any other verify hook."""
    return getattr(hooks.verify, "rule", None)


# ---------------------------------------------------------------- exact output law of a hooked loop

def exact_output_law(target, draft, prompt: list[int], length: int, gamma: int, params: SamplingParams,
                     hooks: Hooks = REFERENCE_HOOKS, eos=()) -> dict[tuple[int, ...], float]:
    """Law of the `length` tokens (cut after EOS) a many-row run of `hooked_generate` emits, by enumeration.

    Algorithm 1 over the hooks' p and q, or, where the verify hook is a lifted sampler `Rule` (`lifted`,
    `integrable`), that rule's acceptance probabilities and final law (any other verify hook is not used: for
    p/q-hook and lifted-rule mutants only).
    Block sizes follow a batched run: step k drafts min(γ, length − k − 1) tokens (the slowest row
    decides, and in thousands of rows one row emits a single token per step), rows that need fewer
    tokens keep a prefix of the block. Exact in float64 for small vocabularies (toy pairs)."""
    eos, law, frontier = frozenset(eos), {}, {(): 1.0}
    for step in range(length):
        g = max(0, min(gamma, length - step - 1))
        nxt: dict[tuple[int, ...], float] = {}
        for prefix, mass in frontier.items():
            for tokens, w in _block_law(target, draft, prompt, prefix, g, params, hooks, eos).items():
                kept = _cut(tokens, length - len(prefix), eos)
                done = len(prefix) + len(kept) == length or (kept and kept[-1] in eos)
                bucket = law if done else nxt
                key = prefix + kept
                bucket[key] = bucket.get(key, 0.0) + mass * w
        frontier = nxt
        if not frontier:
            break
    return law


def _cut(tokens: tuple[int, ...], room: int, eos) -> tuple[int, ...]:
    out = []
    for t in tokens[:room]:
        out.append(t)
        if t in eos:
            break
    return tuple(out)


def _logits(model, seqs: Tensor, n_last: int) -> Tensor:  # seqs [N, L] -> [N, n_last, V] float64
    with torch.inference_mode():
        return model(input_ids=seqs, attention_mask=torch.ones_like(seqs)).logits[:, -n_last:].double()


def _block_law(target, draft, prompt, prefix, g, params, hooks, eos) -> dict[tuple[int, ...], float]:
    """Law of the tokens one step emits (before truncation) after prompt + prefix, drafting g tokens."""
    base = torch.tensor(list(prompt) + list(prefix), dtype=torch.long)
    V = target.config.vocab_size
    before = history_of([base], [len(prefix)], sorted(eos)) if params.needs_history else None
    paths, weight, q_rows = torch.zeros(1, 0, dtype=torch.long), torch.ones(1, dtype=torch.float64), []
    for _ in range(g):  # every draft path d[:i] with its probability; q at each position
        seqs = torch.cat([base.expand(len(paths), -1), paths], 1)
        hist = None if before is None else _expand_history(before, paths)
        q_sample, q_verify = hooks.draft_probs(_logits(draft, seqs, 1)[:, -1], params, hist)
        q_rows = [r.repeat_interleave(V, 0) for r in q_rows] + [q_verify.double().repeat_interleave(V, 0)]
        weight = (weight.unsqueeze(1) * q_sample.double()).reshape(-1)
        paths = torch.cat([paths.repeat_interleave(V, 0), torch.arange(V).repeat(len(paths)).unsqueeze(1)], 1)
    seqs = torch.cat([base.expand(len(paths), -1), paths], 1)
    block = None if before is None else extend_history(_expand_history(before, paths[:, :0]), paths)
    p = hooks.target_probs(_logits(target, seqs, g + 1), params, block).double()  # [N, g+1, V]
    rule = lifted_rule(hooks)
    step = _rule_step(rule, p, q_rows, paths, g) if integrable(rule) and g > 0 else None
    out: dict[tuple[int, ...], float] = {}
    reach = weight.clone()  # P(draft path, and its first i drafts accepted)
    for i in range(g + 1):
        if step is not None:
            accept, final = step(i)
        elif i == g:
            final = p[:, g]
        else:
            x = paths[:, i]
            q = q_rows[i]
            px, qx = p[torch.arange(len(x)), i, x], q[torch.arange(len(x)), x]
            accept = torch.where(qx > 0, torch.clamp(px / qx.clamp_min(1e-300), max=1.0), torch.ones_like(px))
            residual = (p[:, i] - q).clamp_min(0)
            total = residual.sum(-1, keepdim=True)
            final = torch.where(total > 0, residual / total.clamp_min(1e-300), p[:, i])
        rejected = reach * (1 - accept) if i < g else reach
        for n in torch.nonzero(rejected > 0).flatten().tolist():
            head = tuple(paths[n, :i].tolist())
            for y in torch.nonzero(final[n] > 0).flatten().tolist():
                key = head + (y,)
                out[key] = out.get(key, 0.0) + float(rejected[n] * final[n, y])
        if i < g:
            reach = reach * accept
    return out


def _rule_step(rule: Rule, p: Tensor, q_rows: list[Tensor], paths: Tensor, g: int) -> Callable:
    """For a lifted rule: i -> (P(draft i of each path accepted) [N] (None at i = g), the law of the final token
    after a rejection at i, or of the bonus at i = g [N, V]), from the rule's own views, acceptance and final law
    (as `Rule.from_uniforms` computes them; the same closed forms `Rule.position_laws` integrates)."""
    N = len(paths)
    pv = rule.p_view(normalized(p))  # [N, g+1, V]
    q = torch.stack(q_rows, 1)  # [N, g, V]
    qv = rule.q_view(normalized(q))
    rows = torch.arange(N)

    def step(i: int):
        x_i = paths[:, i] if i < g else torch.zeros(N, dtype=torch.long)
        final = normalized(rule.final(pv, qv, torch.full((N,), i, dtype=torch.long), x_i))
        if i == g:
            return None, final
        if rule.accept_table is None:
            accept = rule.accept.prob(pv[rows, i, x_i], qv[rows, i, x_i])
        else:
            accept = rule.accept_table(pv[:, i], qv[:, i])[rows, x_i]
        return accept, final

    return step


def _expand_history(history: History, paths: Tensor) -> History:
    """A one-row history repeated for every draft path, with the path's tokens appended."""
    n = len(paths)
    return History(torch.cat([history.seq.expand(n, -1), paths], 1), history.n_generated.expand(n) + paths.shape[1],
                   history.eos)
