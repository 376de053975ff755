"""The headline TV means one thing: the weakest guarantee among tests that see one law each; a pooled statistic
is never presented as a per-position TV (issue: the pooled PIT over contexts had been labelled "per tested
position")."""

from __future__ import annotations

import numpy as np
import pytest

from harness.check.context_cells import contexts_pit_tests
from harness.check.exact_laws import SupportCount, joint_law_tests
from harness.check.pit import pit_tests
from harness.check.report import CheckReport
from harness.cli import headline_scope, print_check_report

BLOCKS = (16,)


def _uniform_values(n_rows: int = 600, length: int = 20, contexts: int = 50, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    seq = np.repeat(np.arange(n_rows), length)
    step = np.tile(np.arange(length), n_rows)
    ctx = seq % contexts
    return {"u": rng.random(n_rows * length), "step": step, "abs": step + 5 + ctx, "seq": seq,
            "family": np.array(["random"] * (n_rows * length), dtype=object), "context": ctx,
            "off_support": SupportCount(0)}


def _report(tests, level="generation") -> CheckReport:
    report = CheckReport("impl", level, 1e-3, float("nan"), 0.99, 0, tests=tests)
    return report.decide()


def test_every_contexts_test_states_its_scope_and_none_is_one_law():
    tests = contexts_pit_tests(_uniform_values(), ("random",), BLOCKS, 1e-4, 0.99, "c")
    scoped = [t for t in tests if t.details.get("scope")]
    assert {t.details["scope"] for t in scoped} == {"pooled", "per context", "per row"}
    assert all(t.details.get("guarantee") for t in scoped)
    assert not any(t.details["scope"] == "one law" for t in scoped)


def test_a_plan_with_only_pooled_tests_has_a_pooled_headline_never_per_position(capsys):
    report = _report(contexts_pit_tests(_uniform_values(), ("random",), BLOCKS, 1e-4, 0.99, "c"))
    head = report.headline
    assert head["scope"] == "pooled" and head["test"] == "c/pit_uniform"
    assert "not a per-position TV" in head["meaning"]
    assert report.to_dict()["headline"]["scope"] == "pooled"
    print_check_report(report)
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert "per tested position" not in summary and "pooled" in summary, summary


def test_tests_that_see_one_law_carry_the_headline_over_pooled_ones():
    law = {(a, b): 0.25 for a in range(2) for b in range(2)}
    keys = [tuple(int(x) for x in row) for row in np.random.default_rng(1).integers(0, 2, size=(4000, 2))]
    joint = joint_law_tests(keys, law, 1e-4, 0.99, "prompt0")
    pooled = contexts_pit_tests(_uniform_values(), ("random",), BLOCKS, 1e-4, 0.99, "c")
    report = _report(joint + pooled)
    head = report.headline
    assert head["scope"] == "one law" and head["test"].startswith("prompt0/joint_pooled")
    assert report.detectable_tv == max(t.detectable_tv for t in joint[1:])
    assert report.detectable_tv > pooled[1].detectable_tv  # the pooled TV is smaller, and not the headline
    assert headline_scope(report) == "per tested law: one prompt's continuation"
    assert headline_scope(_report(joint, level="sampler")) == "per tested position"


def test_a_prompt_cells_pit_is_one_law_only_at_position_zero():
    rng = np.random.default_rng(2)
    positions, seq = np.tile(np.arange(3), 500), np.repeat(np.arange(500), 3)
    tests = pit_tests(rng.random(1500), positions, seq, SupportCount(0), 1e-4, 0.99, "p")
    scopes = {t.name: t.details.get("scope") for t in tests}
    assert scopes["p/pit_uniform/pos0"] == "one law"
    assert scopes["p/pit_uniform/pos1"] == scopes["p/pit_uniform"] == "pooled"
    assert all(t.details.get("headline") is False for t in tests if "/pos" in t.name)


@pytest.mark.slow
def test_the_default_toy_plan_fails_the_mild_rejected_draft_penalty_bug():
    """penalties_count_rejected_drafts_mild (exact TV 0.031 / 0.036 at the toy prompts) at the default plan with
    the catalogue: the prompt cells keep their 20,000 rows and run first, so it is caught as by the plan without
    contexts (at 2,000 rows per prompt cell it passed)."""
    from harness.check.generation import run_generation_check
    from harness.contexts import plan
    from harness.mutants.registry import get
    from harness.pairs import get_pair

    impl, pair = get("penalties_count_rejected_drafts_mild"), get_pair("toy")
    report = run_generation_check(impl.fn, pair, seed=0, gamma=3, contexts=plan(pair, seed=0),
                                  settings=impl.fn.settings)
    assert report.verdict == "fail"
    assert any("/prompt0/" in t.name for t in report.tests if t.reject)
