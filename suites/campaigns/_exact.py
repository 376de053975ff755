"""Exact TVs of the generation mutants whose output law is enumerable on the toy pair (the p/q-hook mutants and the
sampler rules lifted into generate()): shared by the zoo and the contexts campaign (no campaign imports another)."""

from __future__ import annotations

import torch

from harness.mutants import get

HOOK_MUTANTS = ("penalties_count_rejected_drafts", "penalties_count_rejected_drafts_mild",
                "min_new_tokens_counted_from_prompt")  # p/q-hook mutants: their output law is enumerable


def exact_tvs_at(impl, settings, length: int = 3, gamma: int = 3) -> list[float]:
    """Per toy prompt (the first two): the largest TV over `settings` between `impl`'s exact output law
    (`exact_output_law`, float64) and the target's, 4-token prompts, `length` new tokens."""
    from harness.check.exact_laws import continuation_law, total_variation
    from harness.models.toy_pairs import toy_models, toy_prompts
    from harness.mutants.generation import exact_output_law
    from specdec_ref.generate import default_eos, eos_set

    target, draft = toy_models({"toy": "0.7", "toy-eos": "eos"}[impl.pair or "toy"], torch.float64)
    eos = eos_set(default_eos(target))
    return [max(float(total_variation(exact_output_law(target, draft, p, length, gamma, s, impl.fn.hooks, eos),
                                      continuation_law(target, p, length, s, 16, eos))) for s in settings)
            for p in toy_prompts()[:2]]


def exact_tvs(length: int = 3, gamma: int = 3) -> dict:
    """Per hook mutant and toy prompt: TV between its exact output law and the target's, at the mutant's setting.
    The runner mutants (block boundary, rollback after step k, prefix key) are exactly the reference there (no
    index reaches 16, at most 3 steps, no shared 16-token prefix): TV 0 by construction; at 40-token continuations
    nothing is enumerable (16^40)."""
    out = {}
    for name in HOOK_MUTANTS:
        impl = get(name)
        (setting,) = impl.fn.settings
        out[name] = {"pair": impl.pair, "setting": setting.label,
                     "tv_per_prompt": exact_tvs_at(impl, (setting,), length, gamma)}
    return out
