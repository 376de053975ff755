"""Generation-level zoo (§1b `generate`): whole speculative generation with one part swapped.

`hooked_generate` is the reference step loop (`specdec_ref.generate.speculative_generate`) rebuilt
from the reference's pieces (processing, runners, streams, verify, and its private `Rows` row
bookkeeping) with its replaceable parts collected in `Hooks`; with the default
hooks it reproduces `specdec_ref.adapters:generate` token for token (tests/test_mutants_generation.py
checks it), so each mutant below differs from a lossless loop by exactly one hook. The loop is
rebuilt rather than patched because `speculative_generate` has no injection points: a `hooks=`
argument (or runner / emit factories) there would let this module shrink to the hook definitions.

Names are importable as `harness.mutants.generation:NAME`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.adapters.control import target_only_generate
from harness.mutants.registry import register
from harness.mutants.rule import Rule
from harness.mutants.sampler import scaled_acceptance
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
from specdec_ref.processing import check_finite_logits
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
) -> GenerationResult:
    """The reference's speculative loop (same random streams, same order of draws) with `hooks`."""
    return speculative_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                eos_token_id=default_eos(target), hooks=hooks,
                                cache=cache or cache_strategy(input_ids, max_new_tokens, target))


# ---------------------------------------------------------------- swapped parts

def _target_ignores_sampling(logits, temperature, top_k, top_p):
    return processed(logits, temperature if temperature == 0 else 1.0, None, None)


def _processed_first_position_only(logits, temperature, top_k, top_p):
    p = processed(logits, temperature, top_k, top_p)  # [A, g+1, V]
    if temperature == 0:
        return p
    return torch.cat([p[:, :1], processed(logits[:, 1:], 1.0, None, None)], dim=1)


def _draft_q_unprocessed(logits, temperature, top_k, top_p):
    q = processed(logits, temperature, top_k, top_p)
    return q, (q if temperature == 0 else processed(logits, 1.0, None, None))


def _argmax_draft(q: Tensor, u: Tensor) -> Tensor:
    return q.argmax(dim=-1)


def _greedy_verify_always(p, q, x, u_accept, u_final, temperature):
    return greedy_verify(p, x)


def _greedy_last_index_on_ties(logits, temperature, top_k, top_p):
    if temperature != 0:
        return processed(logits, temperature, top_k, top_p)
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
    """A sampler-level `Rule` as the verify hook (the greedy rule is kept at temperature 0)."""
    def verify(p, q, x, u_accept, u_final, temperature):
        if temperature == 0:
            return greedy_verify(p, x)
        return rule.from_uniforms(p, q, x, u_accept, u_final)
    return verify


# ---------------------------------------------------------------- registration

def _zoo(hooks: Hooks, *, kind: str, models: str, needs: tuple[str, ...] = (), pair: str | None = None):
    """Register a §1b `generate` that runs `hooked_generate` with `hooks`; docstring = description."""
    def deco(fn):
        def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
            return hooked_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                   temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                   hooks=hooks).tokens

        generate.__name__, generate.__qualname__, generate.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        generate.hooks = hooks
        return register(level="generation", kind=kind, models=models, needs=needs, pair=pair)(generate)
    return deco


_PROCESSING = "temperature ≠ 1 (or top-k / top-p set) and temperature > 0"
_EOS = "a target with an EOS id that the draft proposes and the target accepts (EOS inside a block)"
_CONTEXT = "a context-dependent pair (not const-a*, whose laws ignore the context)"

register("reference_generate", level="generation", kind="control", models="control: the reference (specdec_ref)",
         description="specdec_ref.adapters:generate (recompute for many short rows of a tiny model, else one KV cache for the batch)",
         )(_reference_generate)
register("target_only", level="generation", kind="control", models="control: plain target sampling",
         description="harness.adapters.control:target_only_generate, the ground truth (ignores the draft)",
         )(target_only_generate)


@register(level="generation", kind="control", models="control: the reference, per-row KV-cache path",
          needs=("rows run one at a time: slow for thousands of rows",))
def reference_kv_cache(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The reference with per-row KV caches forced (cropped after every rejection)."""
    return speculative_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                eos_token_id=default_eos(target), cache="cache").tokens


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
