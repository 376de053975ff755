"""The demo's plans (its sizes from suites/profiles.py, its generation-level check): shared by the demo and the
contexts campaign, which times the old plan against today's (no campaign imports another)."""

from __future__ import annotations

from harness.check.config import CheckConfig

# The real pair's generation plan: greedy equality, and one sampling setting (temperature and nucleus truncation,
# where processing bugs show) over the context catalogue (suites/catalogues/contexts.py: chat, code and summarize
# prompts and the model's own resampled text, prompt lengths 32-145) at 16 new tokens per sample, the contexts
# cell's default plan: the pooled PIT detects TV <= 0.05 in the time the old plan (two settings x two prompts x 480
# samples of 4 new tokens, pooled TV 0.089) took. `specdec campaign contexts --parts demo` times both in one process.
DEMO_REAL_SETTINGS = ("T=0", "T=0.7,top_p=0.9")


DEMO_REAL_LENGTH = 16  # new tokens per sample on the real pair


OLD_DEMO_PLAN = {"samples": 480, "length": 4, "contexts": "none", "settings": None}  # the plan before, default settings (the timing)


def demo_sizes(quick: bool) -> dict:
    """The demo's sizes: suites/profiles.py DEMO (quick or full)."""
    from suites.profiles import settings

    return settings("demo", "quick" if quick else "full")


def demo_generation_config(pair: str, *, quick: bool = False, **override) -> CheckConfig:
    """The demo's generation level. The real pair (a 135M target with an int8 draft of itself: ~60-120 tokens/s on
    2 CPU cores, compute-bound) is scored against the target in its own float32 (no float64 copy); the toy pair
    (no real model installed) runs `specdec verify`'s default plan. `override`: e.g. OLD_DEMO_PLAN."""
    if pair == "toy":  # the default plan (the catalogue: pooled TV ~0.02 per setting, ~1 minute)
        return CheckConfig(impl="specdec_ref.adapters:generate", level="generation", pair=pair,
                           samples=demo_sizes(quick)["toy_generation_samples"], **override)
    fields = {"samples": demo_sizes(quick)["real_generation_samples"], "length": DEMO_REAL_LENGTH, "contexts": "catalogue",
              "settings": list(DEMO_REAL_SETTINGS), **override}
    return CheckConfig(impl="specdec_ref.adapters:generate", level="generation", pair=pair, score_dtype="model",
                       **fields)
