"""Exact joint continuation laws of generation-level p/q-hook mutants beside the target's (issue 46's estimates).

On a toy pair (V = 16) a prompt's next `length` tokens have an enumerable law, for the target
(`harness.check.exact_laws.continuation_law`) and for a mutant that changes only the p or q a step sees
(`harness.mutants.hooked.exact_output_law`). `known_joint_laws` gives them as aligned vectors — the whole
continuation and the token at each position — in the shape `specdec campaign estimate` simulates from.
"""

from __future__ import annotations

HOOK_MUTANTS = ("penalties_count_rejected_drafts", "penalties_count_rejected_drafts_mild")  # lossy, exact law known
CONTROL = "reference_generate"  # its law is the target's (TV 0), at the mild mutant's setting
GENERATION_ENTRIES = (*HOOK_MUTANTS, CONTROL)
PAIRS = {"toy": "0.7", "toy-eos": "eos"}


def exact_laws(name: str, prompt_index: int, length: int = 3, gamma: int = 3) -> tuple[dict, dict, dict]:
    """(target law, the mutant's law, facts) of the continuation at the toy pair's prompt `prompt_index`, under the
    mutant's own setting (float64 models); for `CONTROL`, the target's law twice, at the mild mutant's setting."""
    import torch

    from harness.check.exact_laws import continuation_law
    from harness.models.toy_pairs import TOY_VOCAB, toy_models, toy_prompts
    from harness.mutants.hooked import exact_output_law
    from harness.mutants.registry import get
    from specdec_ref.generate import default_eos, eos_set

    impl = get(HOOK_MUTANTS[1] if name == CONTROL else name)
    target, draft = toy_models(PAIRS[impl.pair], torch.float64)
    eos = eos_set(default_eos(target))
    (setting,) = impl.fn.settings
    prompt = toy_prompts()[prompt_index]
    truth = continuation_law(target, prompt, length, setting, TOY_VOCAB, eos)
    emitted = truth if name == CONTROL else exact_output_law(target, draft, prompt, length, gamma, setting,
                                                             impl.fn.hooks, eos)
    return truth, emitted, {"pair": impl.pair, "setting": setting.label, "prompt": prompt, "vocab": TOY_VOCAB}


def known_joint_laws(names: tuple[str, ...] = GENERATION_ENTRIES, prompts: tuple[int, ...] = (0, 1),
                     length: int = 3) -> list[dict]:
    """One entry per mutant × prompt × {"joint", position 0 … length − 1}: {case, entry, position, p, law,
    exact_tv_full}, p and law aligned (the law's mass off p's outcomes is 1 − its sum)."""
    import numpy as np

    from harness.stats.estimate import joint_vectors, marginal

    out = []
    for name in names:
        for i in prompts:
            truth, emitted, facts = exact_laws(name, i, length)
            _, p, law = joint_vectors(truth, emitted)
            pairs = [("joint", p, law)] + [(t, marginal(truth, t, facts["vocab"]), marginal(emitted, t, facts["vocab"]))
                                          for t in range(length)]
            for where, pt, lt in pairs:
                full = 0.5 * (float(np.abs(lt - pt).sum()) + abs(1 - float(lt.sum())))
                out.append({"case": f"{facts['pair']}/prompt{i} ({facts['setting']}, {length} tokens)", "entry": name,
                            "position": where, "p": pt, "law": lt, "exact_tv_full": full})
    return out
