"""A generation-level implementation that samples the way llama.cpp's server does (tests only).

The reference's speculative loop with p and q both processed under the `llama_cpp` convention
(specdec_ref.processing.ORDERS): top-k 40 / top-p 0.95 / min-p 0.05 for what the request leaves unset,
cut on the temperature-1 law, temperature after. Lossless for the target under that convention.
"""

from __future__ import annotations

from harness.mutants.generation import Hooks, hooked_generate
from specdec_ref.processing import process


def _llama_cpp(logits, params, history):
    return process(logits, params, history, order="llama_cpp", validate=False)


HOOKS = Hooks(target_probs=_llama_cpp, draft_probs=lambda logits, params, history: (_llama_cpp(logits, params, history),) * 2)


def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed, **extra):
    return hooked_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                           temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, hooks=HOOKS, **extra).tokens
