"""The batched-cache reference path (specdec_ref/batched.py) in the zoo: a control and its stale-cache bug.

- `reference_batched_cache` (control): the reference with one KV cache for the whole batch forced, also on
  the toy pairs (where the adapter would recompute), so the exact joint-law tests cover that code path;
- `stale_batched_target_cache` (mutant, the vLLM PR #9730 class in batched form): the target's shared
  cache never kills the columns of rejected drafts, so later target laws also attend to rejected tokens.
"""

from __future__ import annotations

from harness.mutants.base import register
from harness.mutants.hooked import Hooks, hooked_generate
from specdec_ref.batched import BatchedCache
from specdec_ref.runners import BatchedRunner, make_runner


class _StaleBatchedCache(BatchedCache):
    def truncate(self, keep) -> None:  # the bug: a rejected draft's columns stay live
        return None


def _stale_batched_runner(model, name, n_rows, strategy):
    runner = BatchedRunner(model, name)
    runner.state = _StaleBatchedCache()
    return runner


def _batched_runner(model, name, n_rows, strategy):
    return make_runner(model, name, n_rows, "batched")


def _register(hooks: Hooks, *, kind: str, models: str, needs: tuple[str, ...] = ()):
    def deco(fn):
        def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
            return hooked_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                   temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, hooks=hooks).tokens

        generate.__name__, generate.__qualname__, generate.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        generate.hooks = hooks
        return register(contract="generation", kind=kind, models=models, needs=needs)(generate)
    return deco


@_register(Hooks(target_runner=_batched_runner, draft_runner=_batched_runner), kind="control",
           models="control: the reference, one KV cache for the whole batch")
def reference_batched_cache(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The reference with the batched KV cache forced for target and draft (per-row caches for one row)."""


@_register(Hooks(target_runner=_stale_batched_runner, draft_runner=_batched_runner), kind="mutant",
           needs=("a context-dependent pair", "rejections followed by further steps (α < 1, max_new_tokens > γ + 1)"),
           models="vLLM PR #9730 in a batched cache: rejected drafts' KV entries stay visible (target side)")
def stale_batched_target_cache(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p,
                               seed):
    """The target's shared cache never drops the columns of rejected drafts: later target laws are
    computed on a context that still contains them."""
