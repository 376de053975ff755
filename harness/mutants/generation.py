"""Generation-level zoo (§1b `generate`): whole speculative generation with one part swapped.

The mutants, and the equivalent and wasteful entries, run `hooked_generate` (harness.mutants.hooked: the reference's
loop, `specdec_ref.generate.speculative_generate`, called with `hooks=`) with a part of the step swapped for one
defined here (target or draft processing, the draft token, verify, a lifted sampler rule among them, emit) or for a
faulty cache runner (harness.mutants.cache_runners). Each swaps one hook, or the target and the draft laws together
where the fault is in both (`min_new_tokens_counted_from_prompt`, `top_p_before_temperature`), so it differs from a
lossless loop by exactly that part. The controls: the reference (`reference_generate`; `reference_kv_cache`, its
per-row caches forced; `reference_all_parameters`, under every optional sampling parameter), the loop with no hook
changed (`hooked_reference`) and plain target sampling (`target_only`).

The sections: the step's parts; the sampling parameters beyond T / top-k / top-p (each entry carries the `settings`
under which it shows); position- and context-dependent faults (`CONTEXT_MUTANTS`, run with the context catalogue).
An entry made by `_zoo` whose swapped parts are p/q hooks or an integrable lifted rule carries
`exact_continuation_law` (harness.mutants.hooked.exact_output_law).

Names are importable as `harness.mutants.generation:NAME`; the loop's names (`Hooks`, `hooked_generate`,
`exact_output_law`) and the cache runners (`PAGE`, `BoundaryStaleRunner`, `PrefixKeyedRunner`) are re-exported for
the modules that take them from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from harness.adapters.control import target_only_generate
from harness.mutants.base import declare, register
from harness.mutants.cache_runners import (
    PAGE,  # noqa: F401 - re-exported
    BoundaryStaleRunner,
    LateStaleCacheRunner,
    PrefixKeyedRunner,
    StaleCacheRunner,
)
from harness.mutants.hooked import Hooks, exact_output_law, hooked_generate, integrable, lifted, lifted_rule
from harness.mutants.sampler import relaxed_acceptance, scaled_acceptance
from specdec_ref.adapters import generate as _reference_generate
from specdec_ref.generate import REFERENCE_HOOKS, Rows, default_eos, processed, speculative_generate
from specdec_ref.processing import History, SamplingParams, check_finite_logits, process
from specdec_ref.verify import greedy_verify

Tensor = torch.Tensor

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


def _stale_runner(model, name, n_rows, strategy):
    return StaleCacheRunner(model, name, n_rows)


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
        swapped = {"target_probs", "draft_probs"} | ({"verify"} if integrable(lifted_rule(hooks)) else set())
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
# first steps, across prompts that share a prefix, or only once a token repeats. The runner mutants'
# runners (harness.mutants.cache_runners) recompute every call and edit what a paged / prefix cache would have served.

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
    """The target law at the drafts' positions of each block uses a per-row temperature (0.85 or 1.15 times the
    request's, alternating over the rows of the call); the bonus position uses the request's."""


CONTEXT_MUTANTS = (stale_page_at_block_boundary, stale_page_at_block_boundary_sampling, rollback_wrong_after_step_k,
                   prefix_cache_first_block_key, penalties_count_rejected_drafts, penalties_count_rejected_drafts_mild,
                   min_new_tokens_counted_from_prompt, temperature_garbage_at_draft_positions)
for _fn in CONTEXT_MUTANTS:
    _fn.contexts = True  # the campaign runs them on the default plan with the context catalogue (harness/contexts.py)
del _fn  # the registry reads this module's names: one name per entry
