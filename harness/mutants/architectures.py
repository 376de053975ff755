"""Mutants of the state handling of hybrid, recurrent and sliding-window models (docs/BUGS.md, the architectures
table; issue 44), planted in the reference's stateful runner (specdec_ref.runners.StatefulRunner) on the target side
(a corrupted draft state only changes q, and Algorithm 1 verifies whatever q the drafts came from: such a bug is
wasteful, not lossy).

Each runs the reference's loop (`harness.mutants.hooked.hooked_generate`) with one runner swapped:
- recurrent state not rolled back (mlx-lm #846: `trim()` a no-op on `ArraysCache`);
- conv state not rolled back (vLLM #39273 and PRs #40738 / #55504; llama.cpp #20075);
- state rolled back only on a partial rejection, never when every draft was rejected (ik_llama.cpp #1754);
- state rolled back one token too far when every draft was rejected (transformers 5.25, found by specdec);
- a zero-draft step after a step that accepted ≥ 2 drafts reading the state of the wrong step (vLLM PR #52942);
  its loop drafts nothing every other step (an n-gram drafter's misses: `zero_draft_every_other_step`, lossless
  alone), so the bug has zero-draft steps inside a sample to strike at;
- a multi-token verify that updates the SSM state as a single step (transformers PR #46741);
- a rotating (sliding-window) cache trimmed without dropping the stale keys (mlx-lm PR #1486);
- a sliding window narrower by block − 1 under multi-token verify (transformers PR #48280; SGLang PR #35209).
The pair each needs is named in `pair` (suites/catalogues/architectures.py).
"""

from __future__ import annotations

import copy

import torch

from harness.mutants.base import register
from harness.mutants.hooked import Hooks, hooked_generate
from specdec_ref.runners import CachedRunner, RecomputeRunner, StatefulRunner

Tensor = torch.Tensor


def _state_layers(cache):
    return [layer for layer in getattr(cache, "layers", ()) if hasattr(layer, "conv_states")]


class _StaleStateRunner(StatefulRunner):
    """On a rollback, the attention layers are restored from the snapshot but the named states (conv and / or
    recurrent) are taken from the live cache, which has absorbed the rejected drafts. `only_full_rejection`:
    the bug strikes only when every draft of the last block was rejected (the rollback happens on partial
    rejections, the ik_llama.cpp pattern)."""

    states: tuple[str, ...] = ("recurrent_states",)
    only_full_rejection = False

    def __init__(self, model, name, n_rows, capabilities=None):
        super().__init__(model, name, n_rows, capabilities)
        self.block_start: list[int] = [0] * n_rows  # the last call's first draft position (its accepted prefix)

    def _row_logits(self, row, seq, n_last):
        out = super()._row_logits(row, seq, n_last)
        self.block_start[row] = len(seq) - n_last + 1  # target: prefix + g drafts, n_last = g + 1
        return out

    def _resume(self, row, keep):
        live, cached = self.caches[row], self.cached[row]
        start, cache = super()._resume(row, keep)
        stale = live is not None and cached is not None and len(cached) > keep
        if self.only_full_rejection:
            stale = stale and keep <= self.block_start[row]  # every draft of the last block rejected
        if stale and cache is not None:
            for kept, used in zip(_state_layers(cache), _state_layers(live), strict=True):
                for attr in self.states:
                    setattr(kept, attr, _cloned(getattr(used, attr)))
        return start, cache


def _cloned(states):
    """A layer's conv / recurrent states (a dict or list of tensors), copied."""
    if isinstance(states, dict):
        return {k: v.clone() if isinstance(v, Tensor) else v for k, v in states.items()}
    return [v.clone() if isinstance(v, Tensor) else v for v in states]


class RecurrentNotRolledBack(_StaleStateRunner):
    states = ("recurrent_states",)


class ConvNotRolledBack(_StaleStateRunner):
    states = ("conv_states",)


class RolledBackOnlyOnPartialRejection(_StaleStateRunner):
    states = ("recurrent_states", "conv_states")
    only_full_rejection = True


class StateOneTokenBackOnFullRejection(StatefulRunner):
    """When every draft of the last block was rejected, the recurrent and conv states are restored to the state
    from *before* the block, so the block's first token (the last sampled one, which is kept) never reaches them,
    while the attention layers hold it: the rollback is one token too far. transformers 5.25 records γ past states
    for a verify forward of γ + 1 tokens (found by specdec: docs/BUGS.md). The wrong state then persists."""

    def __init__(self, model, name, n_rows, capabilities=None):
        super().__init__(model, name, n_rows, capabilities)
        self.block_start: list[int] = [0] * n_rows  # the last call's first draft position
        self.armed: int | None = None  # the length whose advance drops the kept token from the states

    def _row_logits(self, row, seq, n_last):
        keep = CachedRunner._common_prefix(self, row, seq, limit=len(seq) - n_last)
        self.armed = keep if 0 < keep == self.block_start[row] else None  # no draft of the last block kept
        try:
            return super()._row_logits(row, seq, n_last)
        finally:
            self.armed, self.block_start[row] = None, len(seq) - n_last + 1

    def _feed(self, cache, seq, start):
        if self.armed is None or len(seq) != self.armed or cache is None or start != len(seq) - 1:
            return super()._feed(cache, seq, start)
        before = copy.deepcopy(cache)  # the state before the kept token
        logits, cache = super()._feed(cache, seq, start)
        for kept, old in zip(_state_layers(cache), _state_layers(before), strict=True):
            for attr in ("recurrent_states", "conv_states"):
                setattr(kept, attr, _cloned(getattr(old, attr)))
        return logits, cache


class ZeroDraftStaleState(StatefulRunner):
    """A call that verifies no draft (n_last = 1) right after a step that accepted ≥ 2 reads the previous step's
    incoming state (the wrong state "column") and feeds only the newest token on top of it."""

    def __init__(self, model, name, n_rows, capabilities=None):
        super().__init__(model, name, n_rows, capabilities)
        self.block_start: list[int] = [0] * n_rows  # the last call's first draft position

    def _row_logits(self, row, seq, n_last):
        keep, previous = len(seq) - n_last, self.block_start[row]
        self.block_start[row] = keep + 1
        before = [s for s in self.snapshots[row] if s <= previous]
        if n_last == 1 and keep - previous >= 2 and before:  # no draft now, ≥ 2 accepted by the last step
            cache = copy.deepcopy(self.snapshots[row][max(before)])  # the previous step's incoming state
            logits, cache = self._feed(cache, seq, keep)  # the accepted tokens never reach the state
            self.caches[row], self.cached[row] = cache, seq
            return logits[-n_last:]
        return super()._row_logits(row, seq, n_last)


class MultiTokenAsSingleStep(StatefulRunner):
    """A cached forward of k > 1 tokens updates the state as one step: each verified position after the first is
    computed from the state after the block's first token only (only the first verified token is right)."""

    def _feed(self, cache, seq, start):
        if start == 0 or cache is None or len(seq) - start <= 1:
            return super()._feed(cache, seq, start)
        cache, first = self._forward(cache, seq, start, start + 1)
        outs = [first]
        after_first = copy.deepcopy(cache)
        for t in range(start + 1, len(seq)):
            cache, logits = self._forward(copy.deepcopy(after_first), _shifted(seq, t, start + 1), start + 1,
                                          start + 2)
            outs.append(logits)
        return torch.cat(outs), cache


def _shifted(seq: Tensor, t: int, at: int) -> Tensor:
    """seq with token t moved to position `at` (the state after position at − 1 then sees token t next)."""
    return torch.cat([seq[:at], seq[t : t + 1]])


class StaleKeysAfterTrim(StatefulRunner):
    """A rollback of a rotating (sliding-window) cache that only moves its length back: the window's buffer keeps
    the rejected drafts' keys and has already evicted the older keys they pushed out. Full-attention layers are
    cropped correctly."""

    def _resume(self, row, keep):
        live, cached = self.caches[row], self.cached[row]
        if live is None or cached is None or len(cached) <= keep:
            return super()._resume(row, keep)
        drop = len(cached) - keep
        sliding = [layer for layer in live.layers if getattr(layer, "is_sliding", False)]
        if not sliding or any(layer.cumulative_length - drop < layer.sliding_window for layer in sliding):
            return super()._resume(row, keep)  # not past the window: nothing was evicted, a crop is exact
        for layer in live.layers:
            if getattr(layer, "is_sliding", False):
                layer.cumulative_length -= drop  # the bug: the stale keys stay in the buffer
            else:
                layer.crop(-drop)
        self.cached[row] = cached[:keep]
        return keep, live


class NarrowWindowVerify(RecomputeRunner):
    """Multi-token verify passes (n_last > 1) run with every sliding window narrower by n_last − 1 (the window
    sized for one query: SGLang PR #35209, flashinfer #3864); single-token passes are right."""

    def __init__(self, model, name, n_rows=None):
        super().__init__(model, name)
        self.narrow: dict[int, object] = {}

    def _logits(self, rows, seqs, n_last):
        if n_last <= 1:
            return super()._logits(rows, seqs, n_last)
        if n_last not in self.narrow:
            self.narrow[n_last] = _narrowed(self.model, n_last - 1)
        model, self.model = self.model, self.narrow[n_last]
        try:
            return super()._logits(rows, seqs, n_last)
        finally:
            self.model = model


def _narrowed(model, by: int):
    narrow = copy.deepcopy(model)
    for config in {id(c): c for c in (narrow.config, narrow.config.get_text_config())}.values():
        if getattr(config, "sliding_window", None):
            config.sliding_window = max(1, config.sliding_window - by)
    for module in narrow.modules():
        if isinstance(getattr(module, "sliding_window", None), int):
            module.sliding_window = max(1, module.sliding_window - by)
    return narrow


def _runner(cls):
    def make(model, name, n_rows, strategy):
        return cls(model, name, n_rows)
    return make


def zero_draft_every_other_step(gamma, rows, active, step) -> int:
    """A draft schedule with zero-draft steps inside a sample, as an n-gram drafter that finds no match every
    other step: γ drafts on even steps, none on odd ones. Lossless on its own (the schedule is fixed before the
    step's draws); tests/specdec_ref/test_stateful.py checks it token for token against plain greedy."""
    return 0 if step % 2 else min(gamma, max(rows.remaining(b) for b in active) - 1)


def _state_mutant(cls, *, pair: str, models: str, needs: tuple[str, ...], drafts=None):
    """Register a §1b `generate`: the reference's loop with the target runner `cls` (and the draft schedule
    `drafts`, default the reference's); docstring = description."""
    hooks = Hooks(target_runner=_runner(cls), **({"drafts": drafts} if drafts else {}))

    def deco(fn):
        def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed, **extra):
            return hooked_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                   temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, hooks=hooks,
                                   cache="cache", **extra).tokens

        generate.__name__, generate.__qualname__, generate.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        generate.hooks = hooks
        return register(contract="generation", kind="mutant", models=models, needs=needs, pair=pair)(generate)
    return deco


_REJECTIONS = "rejections followed by further steps (α < 1, max_new_tokens > γ + 1)"
_STATE = "a model with recurrent state (SSM / linear attention)"
_WINDOW = "a sliding-window model and contexts longer than the window"


@_state_mutant(RecurrentNotRolledBack, pair="arch-ssm", needs=(_STATE, _REJECTIONS),
               models="mlx-lm #846 / PR #1109 (trim() a no-op on ArraysCache: Qwen3-Next skips tokens); vLLM #39273")
def recurrent_state_not_rolled_back(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p,
                                    seed):
    """After a rejection the recurrent (SSM) state keeps the rejected drafts; attention and conv state are right."""


@_state_mutant(ConvNotRolledBack, pair="arch-conv",
               needs=("a model with a short-convolution state (LFM2, Mamba)", _REJECTIONS),
               models="vLLM #39273 / PRs #40738, #55504 (conv state); llama.cpp #20075, #26695")
def conv_state_not_rolled_back(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """After a rejection the short-convolution state keeps the rejected drafts' inputs."""


@_state_mutant(RolledBackOnlyOnPartialRejection, pair="arch-ssm",
               needs=(_STATE, "steps where every draft is rejected (α well below 1)"),
               models="ik_llama.cpp #1639, #1754 (893 of 1,005 verifies used the wrong state)")
def state_rolled_back_only_on_partial_rejection(target, draft, input_ids, *, max_new_tokens, gamma, temperature,
                                                top_k, top_p, seed):
    """The state is restored when some drafts were accepted, not when all were rejected."""


@_state_mutant(StateOneTokenBackOnFullRejection, pair="arch-linear",
               needs=(_STATE, "steps where every draft is rejected (α well below 1)"),
               models="transformers 5.25 generate(): γ past states recorded for a verify of γ + 1 tokens (found by "
                      "specdec, docs/BUGS.md; Qwen3-Next, Jamba, Bamba, Mamba2)")
def state_one_token_back_on_full_rejection(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k,
                                           top_p, seed):
    """When every draft is rejected, the recurrent / conv state is restored to before the block: the kept token is
    missing from it."""


@_state_mutant(ZeroDraftStaleState, pair="arch-ssm", drafts=zero_draft_every_other_step,
               needs=(_STATE, "a step that verifies no draft right after one that accepted ≥ 2 (here: every other "
                      "step drafts nothing, as an n-gram drafter's misses; samples longer than γ + 1)"),
               models="vLLM #39273 / PR #52942 (GDN 'none' mode: a stale state column after ≥ 2 accepted)")
def zero_draft_step_reads_wrong_state(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k,
                                      top_p, seed):
    """An n-gram-like schedule (every other step drafts nothing); a zero-draft step right after a step that
    accepted ≥ 2 reads that step's incoming state."""


@_state_mutant(MultiTokenAsSingleStep, pair="arch-ssm", needs=(_STATE, _REJECTIONS),
               models="transformers PR #46741 (Mamba2 mixers: a cached forward with seq_len > 1 in the single-step "
                      "branch)")
def multi_token_verify_as_single_step(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p,
                                      seed):
    """A multi-token verify updates the SSM state as one step: only the first verified position is right."""


@_state_mutant(StaleKeysAfterTrim, pair="arch-swa", needs=(_WINDOW, _REJECTIONS),
               models="mlx-lm PR #1486 (RotatingKVCache trim); transformers PR #48280")
def rotating_cache_trim_keeps_stale_keys(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k,
                                         top_p, seed):
    """Rolling back a sliding-window cache only moves its length: the rejected drafts' keys stay in the window."""


@_state_mutant(NarrowWindowVerify, pair="arch-swa", needs=(_WINDOW, "multi-token verify (γ ≥ 2)"),
               models="SGLang PR #35209, #39287; flashinfer #3864; transformers PR #48280 (window off by up to "
                      "block − 1)")
def sliding_window_narrow_by_block(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p,
                                   seed):
    """Multi-token verify runs every sliding window narrower by block − 1."""
