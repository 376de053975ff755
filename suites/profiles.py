"""Named run sizes of the policy: `full` (the published calibration), `ci` (what CI runs), `quick` (a smoke run of a
few minutes). A campaign's config takes its defaults from `full`; `--profile NAME` (or a campaign's `--quick`) applies
the overrides named here, and a flag given on the command line overrides the profile. Light: no imports."""

# suites/campaigns/zoo.py (`specdec mutants`): the quick profile is `nox -s lossless`'s (every mutant still runs at the
# default plan and must be caught in every seed, every control must pass, with fewer seeds, no detection-vs-samples
# curve and one run per below-resolution mutant); its rates are a smoke test.
ZOO = {
    "full": {},
    "quick": dict(seeds=8, control_seeds=20, curve_seeds=0, below_resolution_seeds=1, generation_control_seeds=3,
                  slow_generation_seeds=2, step_control_seeds=3),
}

# suites/campaigns/demo.py (`specdec demo`; --quick: a minute or two). None: the check's own plan.
DEMO = {
    "full": dict(sampler_samples=None, toy_generation_samples=None, real_generation_samples=None,
                 ngram_new_tokens=64, ngram_prompts=8, synthetic_new_tokens=48),
    "quick": dict(sampler_samples=3_000, toy_generation_samples=300, real_generation_samples=48,
                  ngram_new_tokens=32, ngram_prompts=3, synthetic_new_tokens=32),
}

PROFILES = {"zoo": ZOO, "demo": DEMO}


def settings(campaign: str, profile: str) -> dict:
    """The overrides of `profile` for `campaign` (a KeyError names neither: callers check the choices)."""
    return dict(PROFILES[campaign][profile])
