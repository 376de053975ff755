"""Structured-output zoo: the reference's speculative loop with the constraint mask misapplied.

Each entry runs `harness.mutants.hooked.hooked_generate` with one hook changed (the constraint sits in
the sampling parameters: specdec_ref.processing masks p and q with the automaton state after the tokens
before each position). The bugs they stand for are public: vLLM #34650 / #48228 (fixing #44297, #44993,
#48516) — drafted positions without a grammar mask, the grammar one token behind when its state changes
inside a block; llama.cpp's server tests — a speculative checkpoint restored without the sampler
(grammar) state. `.settings` on each entry: the constrained setting (and `pair`) under which it shows;
the settings are compiled for the pair only when read (llguidance is imported lazily).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from harness.mutants.base import register
from harness.mutants.generation import target_history_before_block
from harness.mutants.hooked import hooked_generate
from specdec_ref.generate import REFERENCE_HOOKS, Rows, StepHooks, processed

# The automata of the campaign, as regexes over the toy vocabulary (token i = the letter 'a' + i; the
# toy target's likeliest first tokens after its prompts are 5 'f', 14 'o', 2 'c', 0 'a').
# Free prefix, then a marker ('f' = 5), then a constrained part: the state changes inside a block
# (like `</think>` then JSON).
FREE_THEN_CONSTRAINED = "[a-eg-p]*f[a-c]+"
ALTERNATION = "(fc|ad|o)+"  # alternation inside a repetition
# toy-eos (EOS = 5): two tokens of a..e, then the automaton accepts and only EOS may follow (forced end).
FORCED_EOS = "[a-e]{2}"


class LazySettings(Sequence):
    """The entry's settings, built on first use (a constraint spec is cheap; nothing compiles here)."""

    def __init__(self, *fields: dict):
        self._fields, self._settings = fields, None

    def _built(self):
        if self._settings is None:
            from harness.check.settings import Setting
            from harness.check.structured import ConstraintSpec

            self._settings = tuple(Setting(**{k: v for k, v in f.items() if k != "regex"},
                                           constraint=ConstraintSpec("regex", f["regex"])) for f in self._fields)
        return self._settings

    def __getitem__(self, i):
        return self._built()[i]

    def __len__(self) -> int:
        return len(self._fields)


def _without(params):
    return params.without("constraint")


def _with(params, constraint):
    return dataclasses.replace(params, constraint=constraint)


def _q(logits, params, history):
    q = processed(logits, params, history, "draft logits")
    return q, q


# ---------------------------------------------------------------- constraint wrappers (the misapplied masks)

def _wrapper(kind: type, inner, *args):
    """One wrapper per (kind, inner constraint): their mask caches survive across calls."""
    cache = inner.__dict__.setdefault("_specdec_wrappers", {})
    key = (kind, *args)
    if key not in cache:
        cache[key] = kind(inner, *args)
    return cache[key]


def _base():
    from specdec_ref.constraints import TokenConstraint

    return TokenConstraint


class _Lazy:
    """Classes deriving from specdec_ref.constraints.TokenConstraint, defined on first use."""

    @staticmethod
    def behind():
        class Behind(_base()):
            """The state one token behind: the mask after all generated tokens but the last."""

            def __init__(self, inner):
                super().__init__()
                self.inner, self.vocab = inner, inner.vocab
                self.description = f"{inner} (one token behind)"

            def _mask(self, generated, context):
                return self.inner.allowed(generated[:-1], context[:-1])
        return Behind

    @staticmethod
    def with_eos():
        class WithEos(_base()):
            """EOS allowed in every state (before the automaton accepts)."""

            def __init__(self, inner, eos: tuple[int, ...]):
                super().__init__()
                self.inner, self.vocab, self.eos = inner, inner.vocab, list(eos)
                self.description = f"{inner} (EOS always allowed)"

            def _mask(self, generated, context):
                mask = self.inner.allowed(generated, context).clone()
                mask[self.eos] = True
                return mask
        return WithEos


_CLASSES: dict = {}


def _cls(name: str):
    if name not in _CLASSES:
        _CLASSES[name] = getattr(_Lazy, name)()
    return _CLASSES[name]


# ---------------------------------------------------------------- hooks

def _target_first_position_only(logits, params, history):  # logits [A, g+1, V]
    if params.constraint is None:
        return processed(logits, params, history)
    full = processed(logits, params, history)
    free = processed(logits, _without(params), history)
    return torch.cat([full[:, :1], free[:, 1:]], dim=1)


def _draft_unmasked(logits, params, history):
    return _q(logits, _without(params), history)


def _target_unmasked(logits, params, history):
    return processed(logits, _without(params), history)


def _target_one_behind(logits, params, history):  # positions ≥ 1 of the block masked one token behind
    full = processed(logits, params, history)
    if params.constraint is None or logits.shape[1] == 1:
        return full
    behind = processed(logits, _with(params, _wrapper(_cls("behind"), params.constraint)), history)
    return torch.cat([full[:, :1], behind[:, 1:]], dim=1)


def _eos_tuple(history) -> tuple[int, ...]:
    return tuple(history.eos) if history is not None else ()


def _target_eos_always(logits, params, history):
    if params.constraint is None or not _eos_tuple(history):
        return processed(logits, params, history)
    return processed(logits, _with(params, _wrapper(_cls("with_eos"), params.constraint, _eos_tuple(history))), history)


def _draft_eos_always(logits, params, history):
    if params.constraint is None or not _eos_tuple(history):
        return _q(logits, params, history)
    return _q(logits, _with(params, _wrapper(_cls("with_eos"), params.constraint, _eos_tuple(history))), history)


# ---------------------------------------------------------------- registration

def _structured(hooks: StepHooks, *, kind: str, models: str, needs: tuple[str, ...], pair: str, settings):
    """Register a §1b `generate` running `hooked_generate` with `hooks` under the constrained `settings`."""
    def deco(fn):
        def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed, **extra):
            return hooked_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                                   temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                   hooks=hooks_for_call(), **extra).tokens

        hooks_for_call = hooks if callable(hooks) and not isinstance(hooks, StepHooks) else (lambda: hooks)
        generate.__name__, generate.__qualname__, generate.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        generate.hooks = None if not isinstance(hooks, StepHooks) else hooks  # exact law: p/q hooks only
        generate.settings = settings
        return register(contract="generation", kind=kind, models=models, needs=needs, pair=pair)(generate)
    return deco


_STATE_CHANGE = LazySettings({"temperature": 1.0, "regex": FREE_THEN_CONSTRAINED})
_EOS_FORCED = LazySettings({"temperature": 1.0, "regex": FORCED_EOS})
_BLOCK = "accepted drafts inside a block where the automaton's state changes (α not tiny, e.g. the toy pair)"
_VLLM = "vLLM #34650 / #48228 (fixing #44297, #44993, #48516)"


@register(contract="generation", kind="control", pair="toy",
          models="control: the reference with a structured-output constraint")
def reference_constrained(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed,
                          **extra):
    """specdec_ref.adapters:generate under the constrained setting in `.settings` (free prefix, then a
    constrained part: the automaton's state changes inside blocks)."""
    return hooked_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                           temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, **extra).tokens


reference_constrained.settings = _STATE_CHANGE
reference_constrained.hooks = REFERENCE_HOOKS


@_structured(StepHooks(target_probs=_target_first_position_only, draft_probs=_draft_unmasked), kind="mutant",
             pair="toy", settings=_STATE_CHANGE, needs=(_BLOCK,),
             models=f"{_VLLM}: drafted positions get no grammar mask (only the first verified position is masked)")
def mask_first_position_only(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The draft is unconstrained and the target's law is masked at the first position of each block only;
    later positions (after accepted drafts) and the bonus token are unconstrained."""


@_structured(StepHooks(draft_probs=_draft_unmasked), kind="control", pair="toy", settings=_STATE_CHANGE, needs=(),
             models="control: the mask on the target only (an unconstrained drafter): lossless, lower acceptance")
def mask_target_not_draft(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The drafter ignores the constraint; every target position is masked. Algorithm 1 with the draft's
    own (unmasked) q stays exact: disallowed drafts are rejected (p = 0 there)."""


@_structured(StepHooks(target_probs=_target_unmasked), kind="mutant", pair="toy", settings=_STATE_CHANGE,
             needs=("a constraint the target's unconstrained law violates",),
             models="failure mode: the grammar mask given to the drafter only (the verifier's law unconstrained)")
def mask_draft_not_target(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The draft's law is masked, the target's is not: residual and bonus tokens follow the unconstrained
    target."""


@_structured(StepHooks(target_probs=_target_one_behind), kind="mutant", pair="toy", settings=_STATE_CHANGE,
             needs=(_BLOCK,),
             models=f"{_VLLM}: grammar state one token behind inside a drafted block (`{{{{`, invalid JSON)")
def grammar_state_one_behind(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """Positions ≥ 1 of each block are verified against the mask of the state one token behind (the
    drafts are masked correctly)."""


@_structured(StepHooks(target_probs=target_history_before_block), kind="mutant", pair="toy", settings=_STATE_CHANGE,
             needs=(_BLOCK,),
             models=f"{_VLLM}: every drafted position verified with the mask of the state before the block")
def mask_from_block_start_state(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """Every position of a block is verified with the mask of the state before the block (the prompt's
    state at the first step): the state is not advanced through the block's drafts."""


@_structured(StepHooks(target_probs=_target_eos_always, draft_probs=_draft_eos_always), kind="mutant",
             pair="toy-eos", settings=_EOS_FORCED, needs=("a pair with an EOS the target likes (toy-eos)",),
             models="failure mode: EOS allowed before the automaton accepts (truncated JSON with a stop reason)")
def eos_before_accepting(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """EOS is allowed in every state of the automaton, for p and q alike (an incomplete output can end)."""


# ---------------------------------------------------------------- the stateful mutant: no rollback

class _NoRollbackTracker:
    """Per call: the tokens each row's grammar has consumed. Every draft is consumed while drafting and never
    rolled back after a rejection; the emitted correction is consumed on top of them."""

    def __init__(self):
        self.rows: Rows | None = None
        self.consumed: dict[int, tuple[int, ...]] = {}
        self.pending: list[list[int]] = []

    def active(self, n: int) -> list[int]:
        return list(range(n)) if self.rows is None else list(self.rows.active)

    def committed(self, row: int) -> int:
        return 0 if self.rows is None else len(self.rows.out[row])


def _no_rollback_hooks() -> StepHooks:
    tracker = _NoRollbackTracker()

    def stale(params):
        if params.constraint is None:
            return params
        inner = params.constraint

        class Stale(_base()):
            vocab = inner.vocab
            description = f"{inner} (never rolled back)"

            def mask_rows(self, seq, n_generated):
                lead, flat, counts = seq.shape[:-1], seq.reshape(-1, seq.shape[-1]).tolist(), n_generated.reshape(-1)
                rows = tracker.active(lead[0])
                per = max(1, len(flat) // lead[0])
                masks = []
                for idx, (row_seq, n) in enumerate(zip(flat, counts.tolist(), strict=True)):
                    r = rows[idx // per]
                    tail = n - tracker.committed(r)
                    mine = tuple(row_seq[len(row_seq) - tail:]) if tail > 0 else ()
                    masks.append(inner.allowed(tracker.consumed.get(r, ()) + mine))
                return torch.stack(masks).reshape(*lead, inner.vocab)

        return _with(params, Stale())

    def target_probs(logits, params, history):
        return processed(logits, stale(params), history)

    def draft_probs(logits, params, history):
        return _q(logits, stale(params), history)

    def verify(p, q, x, u_accept, u_final, temperature):
        tracker.pending = x.tolist()
        return REFERENCE_HOOKS.verify(p, q, x, u_accept, u_final, temperature)

    def emit(rows, row, tokens):
        if tracker.rows is None:
            tracker.rows = rows
        drafts = tracker.pending.pop(0) if tracker.pending else []
        kept = rows.emit(row, tokens)
        tracker.consumed[row] = tracker.consumed.get(row, ()) + tuple(drafts) + tuple(tokens[-1:])
        return kept

    return StepHooks(target_probs=target_probs, draft_probs=draft_probs, verify=verify, emit=emit)


@_structured(_no_rollback_hooks, kind="mutant", pair="toy", settings=_STATE_CHANGE,
             needs=("rejections followed by further steps inside the constrained part (α < 1, max_new_tokens > 1)",),
             models="llama.cpp server tests: a speculative checkpoint restored without the grammar state (ghost "
                    "tokens in the grammar); vLLM #55313: a desynchronised json_schema grammar")
def grammar_not_rolled_back(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The grammar consumes every draft while drafting and is not rolled back after a rejection: later masks
    come from a state that includes the rejected drafts (and the correction on top of them)."""


# ---------------------------------------------------------------- the masked step (sampler level, not in the zoo:
# its contract takes the masks; tests/check/test_structured.py runs these through harness.check.structured_step)

def _step(p, q, x, allowed, generator, p_mask, q_mask):
    from specdec_ref.adapters import mask_laws
    from specdec_ref.verify import verify_step

    return verify_step(p if p_mask is None else mask_laws(p, p_mask), q if q_mask is None else mask_laws(q, q_mask),
                       x, generator).tokens


def step_target_mask_only(p, q, x, allowed, generator):
    """p masked at every position, q passed on unmasked (the drafts were drawn from the masked q)."""
    return _step(p, q, x, allowed, generator, allowed, None)


def step_mask_first_position_only(p, q, x, allowed, generator):
    """Every position masked with the first position's mask (drafted positions get no mask of their own)."""
    first = allowed[:, :1].expand_as(allowed)
    return _step(p, q, x, allowed, generator, first, first[:, :-1])


def step_state_one_behind(p, q, x, allowed, generator):
    """Position i ≥ 1 masked with position i − 1's mask (the grammar one token behind inside the block)."""
    behind = torch.cat([allowed[:, :1], allowed[:, :-1]], dim=1)
    return _step(p, q, x, allowed, generator, behind, behind[:, :-1])


STEP_MUTANTS = (step_target_mask_only, step_mask_first_position_only, step_state_one_behind)
