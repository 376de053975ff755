"""Generation-level zoo (§1b `generate`): whole speculative generation with one part swapped.

`hooked_generate` is the reference step loop (`specdec_ref.generate.speculative_generate`) rebuilt
from the reference's pieces (processing, runners, streams, verify, and its private `Rows` row
bookkeeping) with its replaceable parts collected in `Hooks`; with the default
hooks it reproduces `specdec_ref.adapters:generate` token for token (tests/mutants/test_mutants_generation.py
checks it), so each mutant below differs from a lossless loop by exactly one hook. The loop is
rebuilt rather than patched because `speculative_generate` has no injection points: a `hooks=`
argument (or runner / emit factories) there would let this module shrink to the hook definitions.

Names are importable as `harness.mutants.generation:NAME`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from harness.adapters.control import target_only_generate
from harness.mutants.base import declare, register
from harness.mutants.rule import INVERSE_CDF, Rule, normalized
from harness.mutants.sampler import relaxed_acceptance, scaled_acceptance
from specdec_ref.adapters import cache_strategy
from specdec_ref.adapters import generate as _reference_generate
from specdec_ref.generate import (
    REFERENCE_HOOKS,
    GenerationResult,
    Rows,
    StepHooks,
    default_eos,
    processed,
    speculative_generate,
)
from specdec_ref.processing import (
    History,
    SamplingParams,
    check_finite_logits,
    extend_history,
    history_of,
    process,
)
from specdec_ref.runners import RecomputeRunner
from specdec_ref.verify import greedy_verify

Tensor = torch.Tensor


Hooks = StepHooks  # the reference's swappable parts; each mutant below replaces one


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


# ---------------------------------------------------------------- swapped parts

RAW = SamplingParams(1.0)  # softmax of the logits, nothing else


def _target_ignores_sampling(logits, params, history):
    return processed(logits, SamplingParams(0.0) if params.temperature == 0 else RAW)


def _processed_first_position_only(logits, params, history):
    p = processed(logits, params, history)  # [A, g+1, V]
    if params.temperature == 0:
        return p
    return torch.cat([p[:, :1], processed(logits[:, 1:], RAW)], dim=1)


def _draft_q_unprocessed(logits, params, history):
    q = processed(logits, params, history)
    return q, (q if params.temperature == 0 else processed(logits, RAW))


def _argmax_draft(q: Tensor, u: Tensor) -> Tensor:
    return q.argmax(dim=-1)


def _greedy_verify_always(p, q, x, u_accept, u_final, temperature):
    return greedy_verify(p, x)


def _greedy_last_index_on_ties(logits, params, history):
    if params.temperature != 0:
        return processed(logits, params, history)
    check_finite_logits(logits)
    V = logits.shape[-1]
    last = V - 1 - logits.flip(-1).argmax(dim=-1)  # the last maximal index
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    return torch.nn.functional.one_hot(last, V).to(dtype)


def _emit_past_eos(rows: Rows, row: int, tokens: list[int]) -> int:
    """Keeps the whole block even after an EOS inside it; the row stops only after the block."""
    eos, rows.eos = rows.eos, set()
    try:
        kept = rows.emit(row, tokens)
    finally:
        rows.eos = eos
    if row in rows.active and any(t in eos for t in tokens[:kept]):
        rows.active.remove(row)
    return kept


def _emit_dropping_accepted_eos(rows: Rows, row: int, tokens: list[int]) -> int:
    """Accepted drafts equal to EOS are filtered out (the row goes on); only a final EOS stops it."""
    return rows.emit(row, [t for t in tokens[:-1] if t not in rows.eos] + tokens[-1:])


class StaleCacheRunner(RecomputeRunner):
    """A per-row "KV cache" that is never cropped after a rejection.

    Each row keeps the token content its cache would hold: tokens are appended as they are fed and
    rejected drafts are never removed, so later positions attend to them (and are shifted by them).
    A causal model's keys/values for that content equal a recomputation over it, so this is computed
    batched with the reference's RecomputeRunner over the stale content.
    """

    def __init__(self, model, name: str, n_rows: int):
        super().__init__(model, name)
        self.fed: list[Tensor | None] = [None] * n_rows  # the logical sequence last fed, per row
        self.content: list[Tensor | None] = [None] * n_rows  # what the stale cache holds, per row

    def _logits(self, rows, seqs, n_last):
        contents = []
        for row, seq in zip(rows, seqs, strict=True):
            fed, content = self.fed[row], self.content[row]
            common = _common_prefix(fed, seq) if fed is not None else 0
            if content is None or common > len(seq) - n_last:
                content = seq  # first call (or positions to re-score): a fresh fill
            else:
                content = torch.cat([content, seq[common:]])  # the bug: entries past `common` stay
            self.fed[row], self.content[row] = seq, content
            contents.append(content)
        return super()._logits(rows, contents, n_last)


def _common_prefix(a: Tensor, b: Tensor) -> int:
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if len(differ) else n


def _stale_runner(model, name, n_rows, strategy):
    return StaleCacheRunner(model, name, n_rows)


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


def _lifted_rule(hooks: Hooks) -> Rule | None:
    return getattr(hooks.verify, "rule", None)


# ---------------------------------------------------------------- registration

def _zoo(hooks: Hooks, *, kind: str, models: str, needs: tuple[str, ...] = (), pair: str | None = None):
    """Register a §1b `generate` that runs `hooked_generate` with `hooks`; docstring = description."""
    def deco(fn):
        def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed, **extra):
            return hooked_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                   temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                   hooks=hooks, **extra).tokens

        generate.__name__, generate.__qualname__, generate.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        generate.hooks = hooks
        # a p/q-hook entry, or one whose verify hook is an integrable lifted rule: its law is enumerable
        swapped = {"target_probs", "draft_probs"} | ({"verify"} if integrable(_lifted_rule(hooks)) else set())
        if all(getattr(hooks, f.name) is getattr(REFERENCE_HOOKS, f.name) for f in dataclasses.fields(hooks)
               if f.name not in swapped):
            generate.exact_continuation_law = lambda *args: exact_output_law(*args[:5], args[5], hooks, args[6])
        return register(contract="generation", kind=kind, models=models, needs=needs, pair=pair)(generate)
    return deco


_PROCESSING = "temperature ≠ 1 (or top-k / top-p set) and temperature > 0"
_EOS = "a target with an EOS id that the draft proposes and the target accepts (EOS inside a block)"
_CONTEXT = "a context-dependent pair (not const-a*, whose laws ignore the context)"

REFERENCE_GENERATE = declare(
    _reference_generate, "reference_generate", contract="generation", kind="control",
    models="control: the reference (specdec_ref)",
    description="specdec_ref.adapters:generate (recompute for many short rows of a tiny model, else one KV cache for the batch)")
TARGET_ONLY = declare(target_only_generate, "target_only", contract="generation", kind="control",
                      models="control: plain target sampling",
                      description="harness.adapters.control:target_only_generate, the ground truth (ignores the draft)")


@register(contract="generation", kind="control", models="control: the reference, per-row KV-cache path",
          needs=("rows run one at a time: slow for thousands of rows",))
def reference_kv_cache(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed,
                       **extra):
    """The reference with per-row KV caches forced (cropped after every rejection)."""
    return speculative_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                eos_token_id=default_eos(target), cache="cache", **extra).tokens


@_zoo(Hooks(), kind="control", models="control: the mutants' loop with no hook changed")
def hooked_reference(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """`hooked_generate` with the default hooks: the lossless baseline every generation mutant changes."""


@_zoo(Hooks(target_probs=_target_ignores_sampling), kind="mutant", needs=(_PROCESSING,),
      models="vLLM #9834 / PR #10198 (also transformers PR #28166): target ignored temperature/top-k/top-p")
def target_ignores_sampling_params(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k,
                                   top_p, seed):
    """The draft is processed with the request's temperature/top-k/top-p, the target is not (raw
    softmax): the output follows the raw target law."""


@_zoo(Hooks(target_probs=_processed_first_position_only), kind="mutant",
      needs=(_PROCESSING, "accepted drafts (positions ≥ 1 of a block are reached): α not tiny"),
      models="sglang #10617: logit_bias / min_p not applied to every verified position")
def processing_first_position_only(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k,
                                   top_p, seed):
    """Target processing applied to the first verified position of each block only; the positions
    after accepted drafts (and the bonus) use the raw target law."""


@_zoo(Hooks(draft_token=_argmax_draft), kind="mutant", needs=("temperature > 0 and a draft law that is not one-hot",),
      models="transformers #32867 / PR #33534: drafts chosen greedily while q passed on was the softmax")
def draft_greedy_softmax_q(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The draft proposes argmax q, but verification gets the softmax q as if the draft were sampled."""


@_zoo(Hooks(draft_probs=_draft_q_unprocessed), kind="mutant", needs=(_PROCESSING,),
      models="transformers #47932 / PR #47961: draft sampled from processed logits, raw logits returned as q")
def draft_q_unprocessed(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """Drafts are sampled from the processed q, verification is handed the raw (temperature 1) q."""


@_zoo(Hooks(target_runner=_stale_runner), kind="mutant",
      needs=(_CONTEXT, "rejections followed by further steps (α < 1, max_new_tokens > γ + 1)"),
      models="vLLM PR #9730: stale KV entries kept after a rejection (target side)")
def stale_target_cache(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The target's per-row cache is never cropped: after a rejection the rejected drafts stay in its
    context, so later target laws are computed on a corrupted prefix."""


@_zoo(Hooks(draft_runner=_stale_runner), kind="equivalent",
      models="vLLM PR #9730 on the draft side: a corrupted draft cache changes q, not the output law")
def stale_draft_cache(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The draft's cache is never cropped, so it conditions on rejected tokens. Cannot change the output
    law (the drafts still come from the q that is verified); it only changes the draft, hence α: on real
    models it lowers acceptance (the vLLM report), on the toy pairs the change is within noise."""


@_zoo(Hooks(verify=lifted(scaled_acceptance.rule)), kind="wasteful",
      models="lossless, acceptance λ·α (λ = 0.8): see harness.mutants.sampler:scaled_acceptance")
def scaled_acceptance_generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p,
                               seed):
    """Algorithm 1 with acceptance λ·min(1, p/q) and residual norm(p − λ·min(p, q)): lossless, fewer
    accepted drafts per step (the greedy rule is unchanged at temperature 0)."""


@_zoo(Hooks(verify=lifted(relaxed_acceptance.rule)), kind="mutant", pair="toy",
      needs=("temperature > 0", "a draft that over-drafts one of the target's top 3 tokens (q(x) > p(x) ≥ 0.5·max p): "
             "the toy pair"),
      models="lossy by design: relaxed acceptance (TensorRT-LLM PR #3865) in a whole generate(), the rule of "
             "harness.mutants.sampler:relaxed_acceptance; `specdec serve --impl` plants it in a served engine")
def relaxed_acceptance_generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """Each step verifies with relaxed acceptance: a draft among the target's 3 likeliest tokens with p(x) ≥
    0.5·max p is kept outright, others with the exact probability min(1, p/q), residual as the reference (the greedy
    rule at temperature 0); its exact continuation law is enumerable on a toy pair, so estimates print it."""


@_zoo(Hooks(emit=_emit_past_eos), kind="mutant", needs=(_EOS,), pair="toy-eos",
      models="failure mode: EOS inside an accepted block not honoured (tokens after it are returned)")
def eos_continues_in_block(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """Returns the whole accepted block even when an EOS sits inside it (stops only after the block)."""


@_zoo(Hooks(emit=_emit_dropping_accepted_eos), kind="mutant", needs=(_EOS,), pair="toy-eos",
      models="failure mode: EOS inside an accepted block dropped (special tokens filtered from drafts)")
def eos_dropped_in_block(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """An EOS accepted as a draft is removed and generation continues; only a final EOS stops a row."""


@_zoo(Hooks(verify=_greedy_verify_always), kind="mutant", needs=("temperature > 0",),
      models="sglang PR #31214: verification silently greedy when temperature > 0")
def greedy_verify_when_sampling(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p,
                                seed):
    """Uses the greedy rule (accept while draft = argmax p, emit argmax p) at every temperature."""


@_zoo(Hooks(target_probs=_greedy_last_index_on_ties), kind="mutant", pair="toy-tied",
      needs=("temperature 0", "exactly tied target logits (e.g. two identical LM-head rows)",
             "a token-for-token comparison with target-only greedy"),
      models="vLLM #7627: greedy tie-break `>` vs `>=` on exactly tied logits")
def greedy_tie_last_index(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """At temperature 0 the target's argmax takes the last maximal index; plain greedy takes the first."""


# ---------------------------------------------------------------- the sampling parameters beyond T / top-k / top-p
# (min_p, logit_bias, penalties, ...). Each mutant drops one parameter from one part of the step; `settings` are the sampling
# settings (harness.check.settings.Setting) under which it shows, on `pair`.

def _target_dropping(names: tuple[str, ...], where: str) -> Callable:
    """A target hook that processes without `names` at the block positions `where` selects:
    "after_first" (positions ≥ 1: after an accepted draft, and the bonus), "verified" (every position
    but the bonus, whose law is the one a plain target step samples), "all"."""
    def target_probs(logits, params, history):  # logits [A, g+1, V]
        full = processed(logits, params, history)
        if params.temperature == 0:
            return full
        dropped = processed(logits, params.without(*names), history)
        keep = torch.zeros(logits.shape[1], dtype=torch.bool)  # positions processed correctly
        if where == "after_first":
            keep[0] = True
        elif where == "verified":
            keep[-1] = True
        return torch.where(keep.view(1, -1, 1).to(logits.device), full, dropped)
    return target_probs


def target_history_before_block(logits, params, history):
    """Every position of the block processed with the history at its first position (earlier drafts unseen)."""
    if history is None:
        return processed(logits, params, history)
    stale = History(history.seq[:, :1].expand_as(history.seq), history.n_generated[:, :1].expand_as(
        history.n_generated), history.eos)
    return processed(logits, params, stale)


def _params_mutant(hooks: Hooks, *, settings: tuple, pair: str, needs: tuple[str, ...], models: str):
    """`_zoo` for the parameter mutants, recording the settings (and pair) under which each shows."""
    def deco(fn):
        generate = _zoo(hooks, kind="mutant", models=models, needs=needs, pair=pair)(fn)
        generate.settings = settings
        return generate
    return deco


def _setting(**kwargs):
    from harness.check.settings import Setting

    return Setting(**kwargs)


_ACCEPTED = "accepted drafts (positions ≥ 1 of a block are reached): α not tiny, e.g. the toy pair"


@_params_mutant(Hooks(target_probs=_target_dropping(("min_p",), "after_first")),
                settings=(_setting(temperature=1.0, min_p=0.2),), pair="toy", needs=("min_p set", _ACCEPTED),
                models="vLLM #42744 / PR #42802, sglang #10617: min_p not applied on verified positions")
def min_p_first_position_only(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed,
                              **extra):
    """min_p applied at the first verified position of each block only; later positions (after an
    accepted draft) and the bonus token use the law without min_p."""


@_params_mutant(Hooks(target_probs=_target_dropping(("logit_bias",), "all")),
                settings=(_setting(temperature=1.0, logit_bias=((2, 1.5), (5, -2.0))),), pair="toy",
                needs=("logit_bias set",),
                models="vLLM #42744 / PR #42802: logit_bias honoured by the drafter, not the verifier")
def logit_bias_draft_only(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed,
                          **extra):
    """logit_bias is added to the draft's logits (q) but not the target's (p): the output follows the
    unbiased target."""


@_params_mutant(Hooks(target_probs=target_history_before_block),
                settings=(_setting(temperature=1.0, repetition_penalty=3.0, presence_penalty=2.0),), pair="toy",
                needs=("a penalty set", _ACCEPTED),
                models="SGLang #33643 (also vLLM #18902): penalties not updated for tokens accepted in the block")
def penalties_from_prefix_before_block(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k,
                                       top_p, seed, **extra):
    """The target's penalties at every position of a block are computed from the tokens before the
    block: drafts accepted earlier in the same block are not counted."""


@_params_mutant(Hooks(target_probs=_target_dropping(("repetition_penalty", "frequency_penalty", "presence_penalty"),
                                                    "all")),
                settings=(_setting(temperature=1.0, repetition_penalty=2.0),), pair="toy", needs=("a penalty set",),
                models="TensorRT-LLM #17701: penalties silently ignored on the speculative path (draft only)")
def penalty_draft_only(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed,
                       **extra):
    """Repetition / frequency / presence penalties applied to the draft's law but not the target's."""


@_params_mutant(Hooks(target_probs=_target_dropping(("min_new_tokens",), "verified")),
                settings=(_setting(temperature=1.0, min_new_tokens=2),), pair="toy-eos",
                needs=("min_new_tokens set", "an EOS the draft proposes early (toy-eos)"),
                models="TensorRT-LLM #17955: min_length honoured by the sampler, EOS still accepted from drafts")
def min_new_tokens_bonus_only(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p,
                              seed, **extra):
    """EOS is masked before min_new_tokens only in the law of the target's own sampled token (bonus /
    plain step); the target probabilities that verify drafts (and their residuals) keep EOS."""


@_params_mutant(Hooks(target_probs=_target_dropping(("bad_words_ids",), "verified")),
                settings=(_setting(temperature=1.0, bad_words_ids=((5,), (12, 12))),), pair="toy",
                needs=("bad_words_ids set", "the draft proposes a bad word"),
                models="TensorRT-LLM #17955, SGLang #27769: bad words / custom processors skipped when verifying")
def bad_words_bonus_only(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed,
                         **extra):
    """Bad words are masked only in the bonus token's law; verified positions keep them."""


def _top_p_before_temperature(logits, params, history):
    return process(logits, params, history, order="top_p_before_temperature", validate=False)


@_params_mutant(Hooks(target_probs=_top_p_before_temperature,
                      draft_probs=lambda logits, params, history: (_top_p_before_temperature(logits, params, history),) * 2),
                settings=(_setting(temperature=0.7, top_p=0.9),), pair="toy",
                needs=("temperature ≠ 1 with top-p",),
                models="romsto/Speculative-Decoding: top-p applied before temperature (a convention, not a "
                       "verification bug: lossless for the target under that order)")
def top_p_before_temperature(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed,
                             **extra):
    """p and q both processed with top-p cut on the temperature-1 law, temperature applied after: exact
    for the target under that convention, lossy against the documented order."""


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
    rule = _lifted_rule(hooks)
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


# A correct control under the new parameters: the reference with every one of them set at once (one
# cell per prompt keeps 200 calibration seeds affordable); its false-alarm rate is the claim the parameters campaign measures.
ALL_PARAMETERS = dict(temperature=0.8, top_p=0.95, min_p=0.05, repetition_penalty=1.2, logit_bias=((5, 1.0),),
                      frequency_penalty=0.5, presence_penalty=0.5, bad_words_ids=((12, 12),))


@register(contract="generation", kind="control", pair="toy",
          models="control: the reference with every optional sampling parameter set")
def reference_all_parameters(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed,
                             **extra):
    """specdec_ref.adapters:generate run under the settings in `.settings` (all parameters at once)."""
    return _reference_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                               temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, **extra)


reference_all_parameters.settings = (_setting(**ALL_PARAMETERS),)


# ---------------------------------------------------------------- position- and context-dependent faults
# Bugs that a 4-token prompt and 3 new tokens never reach: they act at a cache-block boundary, after the
# first steps, across prompts that share a prefix, or only once a token repeats. The runner mutants
# recompute every call (RecomputeRunner) and edit what a paged / prefix cache would have served.

PAGE = 16  # the cache-block size the boundary mutants model


class BoundaryStaleRunner(RecomputeRunner):
    """At every verified position whose token lands on absolute index t ≡ 0 (mod PAGE) the logits are the
    previous position's (the law of index t − 1): a stale page entry at the block boundary."""

    def _logits(self, rows, seqs, n_last):
        extra = int(min(len(s) for s in seqs) > n_last)  # one more position on the left when there is one
        full = super()._logits(rows, seqs, n_last + extra)  # [A, n_last + extra, V]
        out = full[:, extra:].clone()
        for a, seq in enumerate(seqs):
            for i in range(n_last):
                index = len(seq) - n_last + i + 1  # the absolute index of the token these logits predict
                if index % PAGE == 0 and (extra or i > 0):
                    out[a, i] = full[a, i + extra - 1]
        return out


class LateStaleCacheRunner(StaleCacheRunner):
    """StaleCacheRunner whose rows crop correctly for their first `after` calls, then stop cropping."""

    after = 4

    def __init__(self, model, name: str, n_rows: int):
        super().__init__(model, name, n_rows)
        self.row_calls = [0] * n_rows

    def _logits(self, rows, seqs, n_last):
        for row in rows:
            self.row_calls[row] += 1
            if self.row_calls[row] <= self.after:  # still correct: the cache holds exactly the sequence
                self.fed[row], self.content[row] = None, None
        return super()._logits(rows, seqs, n_last)


class PrefixKeyedRunner(RecomputeRunner):
    """A prefix cache keyed by the first PAGE tokens only: a prompt whose first block equals an earlier
    row's (same length, different later tokens) is served that row's cached prompt."""

    def __init__(self, model, name: str, n_rows: int):
        super().__init__(model, name)
        self.prompt: list[Tensor | None] = [None] * n_rows  # what each row's prompt is served as
        self.length: list[int] = [0] * n_rows
        self.by_key: dict = {}

    def _logits(self, rows, seqs, n_last):
        served = []
        for row, seq in zip(rows, seqs, strict=True):
            if self.prompt[row] is None:  # first call: the prompt is the whole sequence
                key = (len(seq), tuple(seq[:PAGE].tolist())) if len(seq) > PAGE else None
                self.prompt[row] = self.by_key.setdefault(key, seq) if key else seq
                self.length[row] = len(seq)
            served.append(torch.cat([self.prompt[row], seq[self.length[row]:]]))
        return super()._logits(rows, served, n_last)


def _boundary_runner(model, name, n_rows, strategy):
    return BoundaryStaleRunner(model, name)


def _late_stale_runner(model, name, n_rows, strategy):
    return LateStaleCacheRunner(model, name, n_rows)


def _prefix_keyed_runner(model, name, n_rows, strategy):
    return PrefixKeyedRunner(model, name, n_rows)


_POSITIONS = ("contexts whose continuations reach absolute index 16 (the context catalogue: harness/contexts.py); "
              "the pair's 4-token prompts with 3 new tokens never do")


@_zoo(Hooks(target_runner=_boundary_runner), kind="mutant", needs=(_POSITIONS,), pair="toy",
      models="failure mode: a stale KV page at a 16-token block boundary (paged caches: vLLM, SGLang, TensorRT-LLM)")
def stale_page_at_block_boundary(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p,
                                 seed):
    """Greedy and sampling: the target logits of a token at absolute index ≡ 0 (mod 16) are the previous
    position's."""


_BOUNDARY_HOOKS = Hooks(target_runner=_boundary_runner)


@register(contract="generation", kind="mutant", pair="toy", needs=(_POSITIONS, "temperature > 0"),
          models="failure mode: a stale KV page at a 16-token block boundary on the sampling path only (the "
                 "greedy path exact): a generate() that passed the old two-prompt battery")
def stale_page_at_block_boundary_sampling(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k,
                                          top_p, seed, **extra):
    """At temperature > 0 the target logits of a token at absolute index ≡ 0 (mod 16) are the previous
    position's; greedy decoding is exact."""
    hooks = REFERENCE_HOOKS if temperature == 0 else _BOUNDARY_HOOKS
    return hooked_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                           temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, hooks=hooks, **extra).tokens


stale_page_at_block_boundary_sampling.hooks = _BOUNDARY_HOOKS


@_zoo(Hooks(target_runner=_late_stale_runner), kind="mutant",
      needs=(_CONTEXT, f"continuations of more than {LateStaleCacheRunner.after} steps (e.g. 40 new tokens)",
             "rejected drafts"),
      models="failure mode: rollback after a rejection correct for the first steps, wrong later (a cache "
             "manager that stops cropping once a row's cache is reallocated)")
def rollback_wrong_after_step_k(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """Rows crop their KV cache after rejections for their first 4 target calls, then keep the rejected
    drafts' entries (later positions attend to them)."""


@_zoo(Hooks(target_runner=_prefix_keyed_runner), kind="mutant",
      needs=("prompts of equal length that share their first 16 tokens and differ later (the catalogue's random "
             "family)", "them in one call"),
      models="failure mode: prefix-cache hit keyed on the first block only (block-hash chain not followed)")
def prefix_cache_first_block_key(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """A prompt whose first 16 tokens (and length) equal an earlier row's is served that row's prompt: its
    continuation follows the other prompt's law."""


def _history_with_whole_block(logits, params, history):
    """Penalties at every position of the block count all of the block's drafts, also those after the position
    (the drafts that are rejected when the block stops there)."""
    if history is None:
        return processed(logits, params, history)
    last = history.seq[:, -1:].expand_as(history.seq)
    n = history.n_generated[:, -1:].expand_as(history.n_generated)
    return processed(logits, params, History(last, n, history.eos))  # the whole block, at every position


_REPEATS = "a penalty set and rejected drafts (α < 1); repeats (V = 16 and 40 new tokens: many)"

PRESENCE_STRONG = _setting(temperature=1.0, presence_penalty=3.0)
PRESENCE_MILD = _setting(temperature=1.0, presence_penalty=0.1)


@_params_mutant(Hooks(target_probs=_history_with_whole_block), settings=(PRESENCE_STRONG,), pair="toy",
                needs=(_REPEATS,), models="failure mode: penalties count the block's rejected drafts (strong: "
                                          "presence penalty 3)")
def penalties_count_rejected_drafts(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p,
                                    seed, **extra):
    """The target's presence / frequency / repetition penalties at every position of a block count every
    drafted token of the block, including the drafts after that position."""


@_params_mutant(Hooks(target_probs=_history_with_whole_block), settings=(PRESENCE_MILD,), pair="toy",
                needs=(_REPEATS,), models="failure mode: penalties count the block's rejected drafts (mild: "
                                          "presence penalty 0.1)")
def penalties_count_rejected_drafts_mild(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k,
                                         top_p, seed, **extra):
    """As penalties_count_rejected_drafts, at presence penalty 0.1 (exact TV 0.031 and 0.036 at the toy prompts)."""


def _counted_from_prompt(history: History | None) -> History | None:
    if history is None:
        return None
    total = (history.seq >= 0).sum(-1)  # prompt + generated tokens at each position
    return History(history.seq, total, history.eos)


def _target_min_new_from_prompt(logits, params, history):
    return processed(logits, params, _counted_from_prompt(history))


def _draft_min_new_from_prompt(logits, params, history):
    q = processed(logits, params, _counted_from_prompt(history))
    return q, q


MIN_NEW_8 = _setting(temperature=1.0, min_new_tokens=8)


@_params_mutant(Hooks(target_probs=_target_min_new_from_prompt, draft_probs=_draft_min_new_from_prompt),
                settings=(MIN_NEW_8,), pair="toy-eos", needs=("min_new_tokens set", "an EOS (toy-eos)"),
                models="failure mode: min_new_tokens counted over prompt + generated tokens (min_length semantics)")
def min_new_tokens_counted_from_prompt(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k,
                                       top_p, seed, **extra):
    """EOS is masked while prompt + generated tokens are fewer than min_new_tokens (so not at all once the
    prompt is that long), in both p and q."""


GARBAGE_TEMPERATURES = (0.85, 1.15)  # what the uninitialized slots held, alternating over the batch's rows


def _garbage_temperature_at_drafts(logits, params, history):
    """Positions 0 … γ−1 of the block (the drafts' positions) are scaled by a per-row temperature that is not the
    request's (even rows 0.85, odd rows 1.15); the bonus position γ keeps the request's."""
    rows = torch.arange(logits.shape[0], device=logits.device) % 2
    scale = torch.tensor([1.0 / t for t in GARBAGE_TEMPERATURES], dtype=logits.dtype, device=logits.device)[rows]
    scaled = logits.clone()
    scaled[:, :-1] = logits[:, :-1] * scale[:, None, None]
    return processed(scaled, params, history, "target logits")


@_params_mutant(Hooks(target_probs=_garbage_temperature_at_drafts), settings=(_setting(temperature=1.0),), pair="toy",
      needs=("temperature > 0", "rows of one call (a batch) at different garbage values: the law is flattened at "
             "some rows and sharpened at others, which a PIT pooled over rows averages away"),
      models="the vLLM CPU expand kernel (found by this harness in vLLM 0.32 CPU): temperature left "
             "uninitialized at the draft positions, a per-slot garbage value")
def temperature_garbage_at_draft_positions(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k,
                                           top_p, seed, **extra):
    """The target law at the drafts' positions of each block uses a per-row temperature (0.8 or 1.25 times the
    request's, alternating over the rows of the call); the bonus position uses the request's."""


CONTEXT_MUTANTS = (stale_page_at_block_boundary, stale_page_at_block_boundary_sampling, rollback_wrong_after_step_k,
                   prefix_cache_first_block_key, penalties_count_rejected_drafts, penalties_count_rejected_drafts_mild,
                   min_new_tokens_counted_from_prompt, temperature_garbage_at_draft_positions)
for _fn in CONTEXT_MUTANTS:
    _fn.contexts = True  # the campaign runs them on the default plan with the context catalogue (harness/contexts.py)
del _fn  # the registry reads this module's names: one name per entry
