"""transformers' own speculative decoders behind the §1b contract (the implementations under test).

- `assisted_generate`: `target.generate(..., assistant_model=draft)` (assisted generation).
- `prompt_lookup_generate`: `target.generate(..., prompt_lookup_num_tokens=γ)`; the draft is unused.
transformers runs these for one row at a time, so rows are looped here with a seed per row.
Sampling settings are passed explicitly (top_k=0 / top_p=1.0 when off) so the generation config's
defaults (top_k=50) can never sneak in, and an attention mask is always given (a prompt holding the
pad id would otherwise be silently masked).
The optional parameters map onto transformers' own: min_p, repetition_penalty, bad_words_ids and
min_new_tokens by name, logit_bias as `sequence_bias` {(id,): bias}. transformers has no OpenAI
frequency / presence penalty, so these adapters do not accept them (the check skips those settings).
A structured-output `constraint` (specdec_ref.constraints.TokenConstraint) becomes transformers'
`prefix_allowed_tokens_fn` (its PrefixConstrainedLogitsProcessor), allowing after the prompt what the
automaton allows after the tokens generated so far.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from harness.adapters.loading import pad_rows
from specdec_ref.generate import default_eos


def eos_list(model) -> list[int]:
    eos = default_eos(model)
    if eos is None:
        return []
    return [eos] if isinstance(eos, int) else list(eos)


def hf_sampling_kwargs(min_p=None, logit_bias=None, repetition_penalty=None, bad_words_ids=None,
                       min_new_tokens=0) -> dict:
    """The optional sampling parameters as transformers `generate()` keyword arguments (unset ones left out)."""
    out = {"min_p": min_p, "repetition_penalty": repetition_penalty, "bad_words_ids": bad_words_ids,
           "min_new_tokens": min_new_tokens or None,
           "sequence_bias": {(int(k),): float(b) for k, b in logit_bias.items()} if logit_bias else None}
    return {k: v for k, v in out.items() if v is not None}


def prefix_allowed_tokens_fn(constraint, prompt_length: int):
    """transformers' `prefix_allowed_tokens_fn(batch_id, input_ids)` for a constraint (prompts of one length)."""
    def allowed(batch_id: int, input_ids: torch.Tensor) -> list[int]:
        generated = input_ids[prompt_length:].tolist()
        return constraint.allowed(generated, input_ids.tolist()).nonzero().flatten().tolist()
    return allowed


def _constrained(constraint, input_ids) -> dict:
    return {} if constraint is None else {"prefix_allowed_tokens_fn": prefix_allowed_tokens_fn(constraint,
                                                                                               input_ids.shape[1])}


def hf_generate(target, input_ids, *, max_new_tokens, temperature, top_k, top_p, seed, **mode) -> torch.Tensor:
    """transformers' own `generate()` row by row (no assistant unless `mode` names one); [B, N], -1 after EOS.

    `mode`: generate() keyword arguments (assistant_model, prompt_lookup_num_tokens, hf_sampling_kwargs)."""
    eos = eos_list(target)
    rows = []
    for b in range(input_ids.shape[0]):
        prompt = input_ids[b : b + 1]
        torch.manual_seed(seed * 100_003 + b)
        sampling = dict(do_sample=False) if temperature == 0 else dict(
            do_sample=True, temperature=float(temperature), top_k=int(top_k or 0), top_p=float(top_p or 1.0))
        out = target.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new_tokens,
            eos_token_id=eos or None, pad_token_id=eos[0] if eos else 0, **sampling, **mode,
        )[0, prompt.shape[1]:]
        stop = [i for i, tok in enumerate(out.tolist()) if tok in eos]
        rows.append(out[: stop[0] + 1] if stop else out)  # after EOS: -1 (pad_rows)
    return pad_rows(rows)


@contextlib.contextmanager
def fixed_assistant_schedule(draft, gamma: int) -> Iterator[None]:
    """Make transformers draft exactly γ tokens per step.

    transformers 5 reads the candidate count and schedule from the *assistant's* generation_config (the
    `num_assistant_tokens=` argument of `generate` is not used), and its default "heuristic" schedule
    writes the adapted count back into that config, so it drifts from call to call (measured: γ = 1
    whatever was asked, after a few calls). Set it on the draft for the call, then restore it.
    """
    config = draft.generation_config
    wanted = {"num_assistant_tokens": gamma, "num_assistant_tokens_schedule": "constant",
              "assistant_confidence_threshold": 0.0}
    before = {key: getattr(config, key, None) for key in wanted}
    for key, value in wanted.items():
        setattr(config, key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            setattr(config, key, value)


def assisted_generate(target, draft, input_ids: torch.Tensor, *, max_new_tokens: int, gamma: int,
                      temperature: float, top_k: int | None, top_p: float | None, seed: int,
                      min_p: float | None = None, logit_bias: dict[int, float] | None = None,
                      repetition_penalty: float | None = None, bad_words_ids: list[list[int]] | None = None,
                      min_new_tokens: int = 0, constraint=None) -> torch.Tensor:
    """transformers assisted generation with a fixed γ (constant candidate schedule)."""
    extra = hf_sampling_kwargs(min_p, logit_bias, repetition_penalty, bad_words_ids, min_new_tokens)
    extra.update(_constrained(constraint, input_ids))
    with fixed_assistant_schedule(draft, gamma):
        return hf_generate(target, input_ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                           top_p=top_p, seed=seed, assistant_model=draft, **extra)


def prompt_lookup_generate(target, draft, input_ids: torch.Tensor, *, max_new_tokens: int, gamma: int,
                           temperature: float, top_k: int | None, top_p: float | None, seed: int,
                           min_p: float | None = None, logit_bias: dict[int, float] | None = None,
                           repetition_penalty: float | None = None, bad_words_ids: list[list[int]] | None = None,
                           min_new_tokens: int = 0, constraint=None) -> torch.Tensor:
    """transformers prompt-lookup decoding (n-gram drafts from the prompt); `draft` is ignored."""
    del draft
    extra = hf_sampling_kwargs(min_p, logit_bias, repetition_penalty, bad_words_ids, min_new_tokens)
    extra.update(_constrained(constraint, input_ids))
    return hf_generate(target, input_ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                       top_p=top_p, seed=seed, prompt_lookup_num_tokens=gamma, **extra)
