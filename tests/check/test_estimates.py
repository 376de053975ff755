"""`--estimate` at the generation level (issue 46): the joint law of a toy prompt's continuation and each position's,
with the exact value beside the estimate for a p/q-hook zoo entry."""

from harness.check.generation import run_generation_check
from harness.mutants.registry import get
from harness.pairs import get_pair


def test_generation_estimate_reports_the_joint_and_each_position_with_the_exact_tv():
    impl = get("penalties_count_rejected_drafts")  # exact joint TV 0.177 at toy prompt 0 (suites/campaigns/contexts)
    report = run_generation_check(impl.fn, get_pair(impl.pair), samples=4000, prompts=1, settings=impl.fn.settings,
                                  seed=3, estimate=True)
    assert report.verdict == "fail"
    estimates = report.estimates
    assert [e["position"] for e in estimates] == ["joint", 0, 1, 2]
    joint = estimates[0]
    assert abs(joint["exact_tv_full"] - 0.1768) < 1e-3
    assert all(e["low"] <= e["exact_tv"] <= e["high"] for e in estimates)
    assert max(e["exact_tv_full"] for e in estimates[1:]) <= joint["exact_tv_full"] + 1e-12  # a marginal's TV ≤ joint
    assert any("the whole continuation (joint law)" in line for line in report.estimate_lines())


def test_generation_estimate_of_the_reference_holds_zero_and_has_no_exact_law_without_hooks():
    ref = get("reference_generate")
    report = run_generation_check(ref.fn, get_pair("toy"), samples=4000, prompts=1,
                                  settings=get("penalties_count_rejected_drafts_mild").fn.settings, seed=4, estimate=True)
    assert report.verdict == "pass"
    assert all(e["low"] == 0.0 and "exact_tv" not in e for e in report.estimates)


def test_without_estimate_the_generation_report_has_none():
    impl = get("penalties_count_rejected_drafts")
    report = run_generation_check(impl.fn, get_pair(impl.pair), samples=500, prompts=1, settings=impl.fn.settings)
    assert report.estimates == []
