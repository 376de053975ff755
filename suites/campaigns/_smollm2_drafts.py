"""The SmolLM2 target materialized as safetensors and the drafts the engine campaigns speculate with (a truncated
draft, an EAGLE head, n-gram settings): shared by the vLLM CPU, structured and API-semantics campaigns (no campaign
imports another)."""

from __future__ import annotations

from pathlib import Path

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}


# Model drafts: vLLM's "draft_model" method, which its CPU runner loads, on the
# target's first DRAFT_LAYERS layers + final norm + lm_head (`materialized_truncated_draft`); and its "eagle" method
# on an offline EAGLE-1 head that passes the target's hidden state through (`materialized_eagle_head`: it proposes
# from the target's law one position back). Both as HF safetensors next to the target's; γ = 3.
# part -> (the speculative config but its "model", the pair whose target is the ground truth)
DRAFT_LAYERS = 26


MODEL_DRAFTS = {"draft": ({"method": "draft_model", "num_speculative_tokens": 3}, "smollm2-trunc"),
                "eagle": ({"method": "eagle", "num_speculative_tokens": 3}, "smollm2")}


def materialized_draft(part: str) -> Path:
    """The folder of the `part` draft (MODEL_DRAFTS) of the materialized target (built now if missing)."""
    from harness.models.smollm2 import materialized_eagle_head, materialized_truncated_draft

    return materialized_truncated_draft(DRAFT_LAYERS) if part == "draft" else materialized_eagle_head()


def materialized_smollm2() -> Path:
    """The float32 safetensors the project builds from the embedded GGUF (built now if missing)."""
    from harness.models.smollm2 import default_cache_dir, load_smollm2

    cache = default_cache_dir()
    if not (cache / "specdec_source.json").exists():
        load_smollm2()
    return cache
