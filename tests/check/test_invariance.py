"""Verdicts invariant to the path (property-based): every trial source × every mode of the one driver.

Generated *lossless* rules (harness.mutants.generated: acceptance scale c_j in (0, 1] with the residual
corrected, uniforms from the generator or torch's global RNG in several shapes and orders, per-row loops
or vectorized, float16 / 32 / 64) are never failed beyond the stated false-alarm rate, and planted slips
(a row reading another row's target or draft law) are failed in every mode. Declared = emitted test
count in every mode that runs its whole plan.

The CI profile (hypothesis profile "ci", the default: `HYPOTHESIS_PROFILE` unset; profiles are registered in
tests/conftest.py) draws few derandomized examples on a small plan; `HYPOTHESIS_PROFILE=thorough` draws the
thorough profile's many random examples of every property here. The full profile is `specdec campaign invariance`
(suites/campaigns/invariance.py -> results/invariance), which measures the false-alarm rate over >= 200 generated
rules per source."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness.check.sampler_source as sampler_source
from harness.check.api import run_verify
from harness.check.config import CheckConfig
from harness.check.draft_step import run_draft_step_check
from harness.check.sampler import run_sampler_check
from harness.check.tree import chain_as_tree, run_tree_check
from harness.mutants.generated import DTYPES, ORDERS, RNG_SOURCES, LosslessRule, as_draft_step, as_generate
from suites.campaigns.invariance import ENGINE_MODES, chain_tree_case, generation_config

# A small plan (TV 0.15 per position on three cheap cases, one of them multi-law) keeps each run well under
# a second; the false-alarm rate holds at any plan size, so the property is the one the production plan has.
CASES = ["rows-differ", "anti-logits", "binary-gamma8"]
PLAN = {"tv": 0.15, "cases": CASES}
MODES = {
    "planned": {},
    "planned-no-early-stop": {"stop_on_fail": False},
    "fixed-n": {"samples": 4_003},  # not a multiple of the 4 laws of rows-differ
    "sequential": {"sequential": True},
}

rules = st.builds(
    LosslessRule,
    scales=st.lists(st.sampled_from([1.0, 0.9, 0.7, 0.5]), min_size=1, max_size=3).map(tuple),
    rng=st.sampled_from(RNG_SOURCES), order=st.sampled_from(ORDERS), loop=st.just("vector"),
    dtype=st.sampled_from(DTYPES))
CI = os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci"


def examples(n: int) -> settings:
    """n derandomized examples under the CI profile; any other profile's own count and randomness."""
    fixed = {"max_examples": n, "derandomize": True} if CI else {}
    return settings(**fixed, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])


FAST = examples(6)


def _check(rule: LosslessRule, mode: str, seed: int, source: str = "sampler"):
    fields = {**PLAN, **MODES[mode], "seed": seed}
    if source == "draft_step":
        return run_draft_step_check(as_draft_step(rule), impl_name=rule.name, **fields)
    if source == "tree":
        fields["cases"] = [chain_tree_case()]
        return run_tree_check(chain_as_tree(rule), impl_name=rule.name, **fields)
    return run_sampler_check(rule, impl_name=rule.name, **fields)


def _declared_equals_emitted(report) -> bool:
    return len(report.tests) == report.declared_tests


@FAST
@given(rule=rules, mode=st.sampled_from(sorted(MODES)), seed=st.integers(0, 10_000))
@pytest.mark.stochastic(false_alarm=0.006)  # 6 examples, no false FAIL 0.001 each
def test_generated_lossless_rules_pass_in_every_mode(rule, mode, seed):
    report = _check(rule, mode, seed)
    # A false alarm is allowed at rate <= 1e-3 per run; over this handful of examples, one would be a
    # 1-in-a-thousand event, so the test treats it as a defect (the full profile measures the rate).
    assert report.verdict != "fail", (rule.name, mode, [t.name for t in report.tests if t.reject])
    # A fixed n may leave a wasteful rule's rarely reached positions short (INCONCLUSIVE, never PASS then);
    # the planned modes top them up.
    assert report.verdict == "pass" or mode == "fixed-n", (rule.name, mode, report.verdict)
    assert _declared_equals_emitted(report), (len(report.tests), report.declared_tests)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("slip", ["target_row", "draft_row"])
def test_planted_row_slips_fail_in_every_mode(mode, slip):
    report = _check(LosslessRule(slip=slip), mode, seed=11)
    assert report.verdict == "fail", (slip, mode)
    assert any("rows-differ" in t.name for t in report.tests if t.reject)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_draft_and_verify_source_in_every_mode(mode):
    verdict = _check(LosslessRule(scales=(0.7,), rng="global"), mode, 5, "draft_step").verdict
    assert verdict == "pass" or (mode == "fixed-n" and verdict == "inconclusive")
    assert _check(LosslessRule(slip="target_row"), mode, 5, "draft_step").verdict == "fail"


def test_the_tree_source_passes_a_generated_rule_as_a_single_chain():
    report = _check(LosslessRule(scales=(0.8,), rng="global_flat"), "planned", 3, "tree")
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]


@pytest.mark.parametrize("floats", [2e4, 1e5, 4e6])
@pytest.mark.stochastic(false_alarm=0.011, seed=2)  # PASS 0.001 + FAIL 0.01
def test_chunk_size_does_not_change_the_verdict(monkeypatch, floats):
    monkeypatch.setattr(sampler_source, "CHUNK_FLOATS", floats)  # where the source looks it up
    assert _check(LosslessRule(scales=(0.5,)), "planned", 2).verdict == "pass"
    assert _check(LosslessRule(slip="target_row"), "planned", 2).verdict == "fail"


@pytest.mark.stochastic(false_alarm=0.001, seed=4)  # PASS 0.001
def test_rows_one_at_a_time_pass_and_slips_fail():
    """B = 1 wrapping: a rule that loops over rows (each row its own call to the RNG) is judged alike."""
    cases = {"cases": ["rows-differ"], "tv": 0.2}
    assert run_sampler_check(LosslessRule(loop="rows", rng="global"), seed=4, **cases).verdict == "pass"


@pytest.mark.end_to_end
def test_same_seed_same_verdict_with_and_without_early_stop():
    for rule in (LosslessRule(scales=(0.5,)), LosslessRule(slip="draft_row")):
        a = _check(rule, "planned", 9)
        b = _check(rule, "planned-no-early-stop", 9)
        assert a.verdict == b.verdict


def test_config_modes_are_config_fields():
    """Every mode above is a CheckConfig field (the one driver reads it), not a separate code path."""
    fields = set(CheckConfig.__dataclass_fields__)
    assert all(set(m) <= fields for m in MODES.values())


def _one_row_only(rule: LosslessRule):
    def verify(target_probs, draft_probs, draft_tokens, generator):
        if target_probs.shape[0] != 1:
            raise ValueError("this implementation takes one row at a time")
        return rule(target_probs, draft_probs, draft_tokens, generator)

    return verify


def test_b1_wrapping_keeps_the_verdict():
    """An implementation that only takes B = 1 is wrapped by the harness (one call per row): a lossless
    rule still passes and a row slip — here: reading the previous call's law — still fails."""
    from harness.check.api import run_verify

    fields = {"level": "sampler", "cases": ["rows-differ"], "samples": 1_200, "seed": 6}  # one call per row: few rows
    ok = run_verify(CheckConfig(impl=_one_row_only(LosslessRule(scales=(0.6,), rng="global")), **fields))
    assert ok.verdict != "fail", [t.name for t in ok.tests if t.reject]
    assert any("one row at a time" in n or "B = 1" in n or "row" in n for n in ok.notes)

    previous = {}

    def stale(target_probs, draft_probs, draft_tokens, generator):  # uses the law of the previous call
        if target_probs.shape[0] != 1:
            raise ValueError("one row at a time")
        law = previous.get("p", target_probs)
        law = law if law.shape == target_probs.shape else target_probs
        previous["p"] = target_probs.clone()
        return LosslessRule()(law, draft_probs, draft_tokens, generator)

    assert run_verify(CheckConfig(impl=stale, **fields)).verdict == "fail"


# ---------------------------------------------------------------- the generation source

GENERATION_MODES = ("fixed-n", "fixed-n-no-early-stop")  # on the pair's own prompts (--contexts none)


def _generation(rule: LosslessRule, mode: str, seed: int, pair: str = "toy", **overrides):
    """The rule's generate() checked as `specdec verify --level generation` checks it (run_verify on the config the
    CLI builds); mode "contexts" is the default plan's catalogue (--contexts auto, left at its default)."""
    return run_verify(generation_config(rule, mode, seed, pair=pair, **overrides))


ONE_SETTING = {"settings": ["T=1"]}  # the CI profile: one sampling setting of the battery (the campaign runs them all)


@examples(3)
@given(rule=rules, mode=st.sampled_from(GENERATION_MODES), seed=st.integers(0, 10_000))
@pytest.mark.stochastic(false_alarm=0.003)  # 3 examples, PASS 0.001 each
def test_generated_lossless_rules_pass_a_whole_generate(rule, mode, seed):
    """The rule as the verify step of the reference's loop: a whole generate() that is lossless."""
    report = _generation(rule, mode, seed)
    assert report.verdict == "pass", (rule.name, mode, [t.name for t in report.tests if t.reject])
    assert _declared_equals_emitted(report), (len(report.tests), report.declared_tests)


@pytest.mark.parametrize("mode", GENERATION_MODES)
def test_a_row_slip_inside_generate_fails_in_every_mode(mode):
    report = _generation(LosslessRule(slip="target_row"), mode, seed=5)
    assert report.verdict == "fail", mode
    assert mode != "fixed-n-no-early-stop" or _declared_equals_emitted(report)


@examples(2)
@given(rule=rules, seed=st.integers(0, 10_000))
@pytest.mark.stochastic(false_alarm=0.002)  # 2 examples, PASS 0.001 each
def test_generated_lossless_rules_pass_the_default_contexts_plan(rule, seed):
    """The user's default path: `--contexts auto` (not named), the toy pair's catalogue (random prompts whose
    continuations cross cache-block boundaries, shared prefixes, resampled prefixes) pooled by the PIT."""
    report = _generation(rule, "contexts", seed, **ONE_SETTING)
    assert report.verdict == "pass", (rule.name, [t.name for t in report.tests if t.reject])
    assert any("/contexts/" in t.name for t in report.tests)
    assert _declared_equals_emitted(report), (len(report.tests), report.declared_tests)


@pytest.mark.parametrize("slip", ["target_row", "draft_row"])
@pytest.mark.stochastic(false_alarm=0.02, seed=5)  # FAIL 0.01 + the contexts cell's rejection 0.01
def test_a_row_slip_fails_the_default_contexts_plan(slip):
    """The prompt cells run first and decide it; with every cell run (no early stop) the contexts cell fails it too."""
    report = _generation(LosslessRule(slip=slip), "contexts", seed=5, **ONE_SETTING)
    assert report.verdict == "fail", report.failure_summary()
    report = _generation(LosslessRule(slip=slip), "contexts", seed=5, stop_on_fail=False, **ONE_SETTING)
    assert any("/contexts/" in t.name for t in report.tests if t.reject)


@pytest.mark.slow
@pytest.mark.parametrize("slip", ["", "target_row"])
def test_the_real_pair_default_contexts_plan_passes_a_lossless_rule_and_fails_a_slip(slip):
    """The embedded SmolLM2 pair: its chat / code / summarize prompts through the chat template (many prompt
    lengths, one generate() call per length) and the target's resampled prefixes, at the default --contexts."""
    from harness.models.smollm2 import smollm2_available

    available, why = smollm2_available()
    if not available:
        pytest.skip(f"SmolLM2 not available: {why}")
    rule = LosslessRule(slip=slip) if slip else LosslessRule(scales=(0.7,), rng="global", order="residual_first")
    report = _generation(rule, "contexts", seed=3, pair="smollm2")
    assert report.verdict == ("fail" if slip else "pass"), [t.name for t in report.tests if t.reject]
    assert any("/contexts/" in t.name for t in report.tests)


# ---------------------------------------------------------------- in-process vs executor


@pytest.mark.stochastic(false_alarm=0.022, seed=2)  # per level PASS 0.001 + FAIL 0.01
def test_in_process_and_on_an_executor_the_same_verdicts_and_statistics():
    """The same configurations run here and on a local dask cluster (harness.executor): the same draws,
    so the same verdicts and p-values, for a lossless rule and a slip, at the sampler and generation levels."""
    pytest.importorskip("distributed")
    from harness.check import matrix

    runs = []
    for base, impls in (
        (CheckConfig(level="sampler", cases=["rows-differ", "anti-logits"], tv=0.15, seed=2),
         "impl=harness.mutants.generated:half_acceptance,harness.mutants.sampler:row_slip_target"),
        (CheckConfig(level="generation", pair="toy", samples=600, seed=2, contexts="none"),
         "impl=harness.mutants.generated:global_rng_generate,harness.mutants.generated:row_slip_target_generate"),
    ):
        vary = matrix.parse_vary([impls])
        configs = matrix.expand(base, vary)
        runs.append((matrix.run_matrix(configs, vary, threads=1), matrix.run_matrix(configs, vary, workers=1, threads=1)))
    for here, there in runs:
        assert [c["verdict"] for c in here.cells] == [c["verdict"] for c in there.cells]
        assert sorted(c["verdict"] for c in here.cells) == ["fail", "pass"]
        for a, b in zip(here.cells, there.cells, strict=True):
            assert [t["p_value"] for t in a["report"]["tests"]] == [t["p_value"] for t in b["report"]["tests"]]


@pytest.mark.end_to_end
def test_a_generation_verdict_does_not_depend_on_what_ran_before_in_the_process():
    """An implementation drawing from torch's global RNG gets it seeded from the run seed, per cell and call
    (before this, its draws continued whatever state earlier work left: in-process and executor disagreed)."""
    import torch

    def p_values():
        report = _generation(LosslessRule(rng="global_flat"), "fixed-n", seed=8)
        return [t.p_value for t in report.tests]

    first = p_values()
    torch.rand(12_345)
    assert p_values() == first


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_input_dtypes_keep_the_verdict(dtype):
    """The laws handed to the implementation in float16 / 32 / 64: a lossless rule passes, a slip fails."""
    import torch

    kind = getattr(torch, dtype)
    ok = run_sampler_check(LosslessRule(scales=(0.7,)), dtype=kind, seed=12, **PLAN)
    assert ok.verdict == "pass", [t.name for t in ok.tests if t.reject]
    assert run_sampler_check(LosslessRule(slip="draft_row"), dtype=kind, seed=12, **PLAN).verdict == "fail"


# ---------------------------------------------------------------- the engine source (over HTTP)

def _engine(rule: LosslessRule, mode: str, seed: int):
    """The rule as the verify step of the reference's loop, served by `specdec serve` and checked over HTTP."""
    from harness.pairs import get_pair
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig
    from harness.served.serve import serving

    with serving(as_generate(rule), get_pair("toy")) as server:
        return run_engine_check(EngineConfig(endpoint=server.url, pair="toy", seed=seed, **ENGINE_MODES[mode]))


@pytest.mark.parametrize("mode", sorted(ENGINE_MODES))
@pytest.mark.stochastic(false_alarm=0.011, seed=4)  # PASS 0.001 + FAIL 0.01
def test_the_engine_source_passes_a_lossless_rule_and_fails_a_slip_in_every_mode(mode):
    ok = _engine(LosslessRule(scales=(0.5, 0.9), rng="global", order="residual_first"), mode, seed=4)
    assert ok.verdict == "pass", (mode, [t.name for t in ok.tests if t.reject])
    assert _declared_equals_emitted(ok), (len(ok.tests), ok.declared_tests)
    if mode == "contexts":  # the engine level's default with a local target: its contexts cells ran
        assert any("/contexts/" in t.name for t in ok.tests)
    bad = _engine(LosslessRule(slip="target_row"), mode, seed=4)
    assert bad.verdict == "fail", mode
    assert mode != "fixed-n-no-early-stop" or _declared_equals_emitted(bad)


@pytest.mark.end_to_end
def test_a_served_verdict_does_not_depend_on_what_ran_before_in_the_process():
    """`specdec serve` seeds torch's global RNG per call from the request seed (its own stream): a rule drawing
    from it gives the same statistics for the same seed whatever ran before (it did not, and a campaign's 194th
    run could not be reproduced alone)."""
    import torch

    rule = LosslessRule(scales=(0.7,), rng="global")
    first = [t.p_value for t in _engine(rule, "fixed-n-no-early-stop", seed=11).tests]
    torch.rand(12_345)
    assert [t.p_value for t in _engine(rule, "fixed-n-no-early-stop", seed=11).tests] == first


# ---------------------------------------------------------------- the pieces path (--api llama-cpp-python)

@pytest.mark.stochastic(false_alarm=0.011, seed=4)  # PASS 0.001 + FAIL 0.01
def test_the_pieces_path_passes_a_lossless_rule_and_fails_a_rejection_slip():
    """The rule's generate() on toy-pieces served in llama-cpp-python's dialect (text pieces, no ids, n = 1) and
    read back with --api llama-cpp-python: a lossless rule passes; sampling p instead of the residual at a
    rejection fails (as it does through the token-ids path). The row slips need two rows per call: at one row per
    request the rule they plant is lossless, so this path has no batch to slip in."""
    from suites.campaigns.invariance import PIECES_MODES, pieces_engine_check

    ok = pieces_engine_check(LosslessRule(scales=(0.7,), rng="global", order="residual_first"), seed=4,
                             **PIECES_MODES["fixed-n"])
    assert ok.verdict == "pass", [t.name for t in ok.tests if t.reject]
    assert _declared_equals_emitted(ok)
    bad = pieces_engine_check(LosslessRule(slip="residual_p"), seed=4, **PIECES_MODES["fixed-n"])
    assert bad.verdict == "fail"


# ---------------------------------------------------------------- ground truth (b): a speculation-off scorer

@pytest.mark.parametrize("mode", ["fixed-n", "small-requests"])
@pytest.mark.parametrize("slip", ["target_row", "draft_row"])
@pytest.mark.stochastic(false_alarm=0.011, seed=4)  # PASS 0.001 + FAIL 0.01
def test_the_scored_path_passes_a_lossless_rule_and_fails_both_row_slips_in_every_mode(mode, slip):
    """The engine source's loop scored by a speculation-off `specdec serve` (ground truth b), in one request per
    chunk of 400 and in 7-row requests over 401 rows (the path a wide top k takes): the same verdicts as the local
    target gives."""
    from suites.campaigns.invariance import SCORE_MODES, scored_engine_check

    ok = scored_engine_check(LosslessRule(scales=(0.5, 0.9), rng="global", order="residual_first"), seed=4,
                             **SCORE_MODES[mode])
    assert ok.verdict == "pass", (mode, [t.name for t in ok.tests if t.reject])
    assert _declared_equals_emitted(ok)
    bad = scored_engine_check(LosslessRule(slip=slip), seed=4, **SCORE_MODES[mode])
    assert bad.verdict == "fail", (mode, slip)
