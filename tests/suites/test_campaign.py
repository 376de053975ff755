"""`specdec mutants`: the campaign's bookkeeping (rates, intervals, exit criterion, report) on a small zoo."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from suites.campaigns.zoo import (
    CampaignConfig,
    below_resolution,
    campaign_ok,
    clopper_pearson,
    run_campaign,
    write_report,
)


def test_clopper_pearson_known_values():
    lo, hi = clopper_pearson(0, 200)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 200), rel=1e-6)  # the "0/200 -> at most 1.8 %" of the report
    lo, hi = clopper_pearson(10, 200)
    assert lo < 0.05 < hi


def _row(kind, rate, failed=0, wasteful=None, **extra):
    return {"name": f"x-{kind}", "kind": kind, "rate_at_gate": rate, "failed_runs": failed, "runs": 20,
            "wasteful_runs": wasteful, **extra}


def test_exit_criterion_flags_escapes_false_alarms_and_silent_wasteful():
    assert campaign_ok([_row("mutant", 1.0), _row("control", 0.0), _row("wasteful", 0.0, wasteful=3)])[0]
    ok, problems = campaign_ok([_row("mutant", 0.9)])
    assert not ok and "detected in only 90%" in problems[0]
    assert not campaign_ok([_row("control", 0.05, failed=1)])[0]
    assert not campaign_ok([_row("equivalent", 0.05, failed=1)])[0]
    assert not campaign_ok([_row("wasteful", 0.0, wasteful=0)])[0]
    # below resolution (exact TV < 0.02 at every position): reported, not gated
    assert below_resolution({"exact_tv_a": 0.001, "exact_tv_b": 0.0004}, 0.02)
    assert campaign_ok([_row("mutant", 0.0, exact_tv_a=0.001)])[0]
    assert not below_resolution({"exact_tv_a": 0.001, "exact_tv_b": 0.3}, 0.02)
    # generation level: compared with the joint-law TV the runs' prompt cells promised, not the sampler plan's
    assert below_resolution({"exact_tv_prompt0": 0.031, "exact_tv_prompt1": 0.036, "resolution_tv": 0.09}, 0.02)
    assert not below_resolution({"exact_tv_prompt0": 0.18, "exact_tv_prompt1": 0.39, "resolution_tv": 0.09}, 0.02)
    assert not campaign_ok([_row("mutant", 0.0, exact_tv_prompt0=0.18, resolution_tv=0.09)])[0]
    assert not below_resolution({"exact_tv_prompt0": 0.0, "level": "generation"}, 0.02)  # no promise: gated


@pytest.mark.statistical
def test_the_hook_mutants_exact_tvs_reach_the_zoo_rows():
    """The zoo row of a p/q-hook generation mutant carries its exact TV at both toy prompts."""
    from harness.mutants.registry import get
    from suites.campaigns.zoo import exact_tvs_of

    strong, mild = exact_tvs_of(get("penalties_count_rejected_drafts")), exact_tvs_of(get("penalties_count_rejected_drafts_mild"))
    assert set(strong) == set(mild) == {"exact_tv_prompt0", "exact_tv_prompt1"}
    assert min(strong.values()) > 0.15 and 0.02 < max(mild.values()) < 0.05


@pytest.mark.statistical
def test_small_campaign_catches_the_mutant_and_passes_the_controls(tmp_path):
    config = CampaignConfig(seeds=3, control_seeds=3, curve_rows=(100,), curve_seeds=2, workers=2,
                            only=("always_accept", "reference_verify", "accept_less_equal", "always_reject"))
    result = run_campaign(config)
    rows = {r["name"]: r for r in result["rows"]}
    assert rows["always_accept"]["rate_at_gate"] == 1.0 and rows["always_accept"]["runs"] == 3
    assert rows["reference_verify"]["failed_runs"] == 0 and rows["reference_verify"]["runs"] == 3
    assert rows["accept_less_equal"]["failed_runs"] == 0
    assert rows["always_reject"]["wasteful_runs"] == 3  # lossless, and reported as wasteful
    assert all(r["worker_seconds"] > 0 for r in result["rows"])
    assert [c["rows_per_case"] for c in result["curve"]] == [100]
    summary = write_report(result, tmp_path)
    assert summary["ok"]
    report = (tmp_path / "report.md").read_text()
    assert "Overall: PASS" in report and "always_accept" in report
    data = json.loads((tmp_path / "campaign.json").read_text())
    assert data["provenance"]["git_commit"] and (tmp_path / "campaign.csv").exists()


@pytest.mark.statistical
def test_quick_profile_and_cli(tmp_path, capsys):
    quick = CampaignConfig.quick()
    assert quick.profile == "quick" and quick.curve_seeds == 0 and 5 <= quick.seeds < CampaignConfig().seeds
    out = tmp_path / "q"
    assert main(["mutants", "--quick", "--only", "always_accept", "reference_verify", "--seeds", "2",
                 "--control-seeds", "2", "--out", str(out)]) == 0
    assert "Profile: quick" in (out / "report.md").read_text()
    assert main(["mutants", "--only", "always_acept", "--out", str(out)]) == 2
    assert "Did you mean 'always_accept'" in capsys.readouterr().err


@pytest.mark.statistical
def test_campaign_runs_every_step_family():
    """The zoo's tree and draft-and-verify entries run through their own checks (mutants caught)."""
    from suites.campaigns.zoo import CampaignConfig, run_campaign

    names = ("specinfer_q_for_unsampled_candidates", "argmax_drafts_softmax_q", "block_token_level_accept")
    from harness.mutants import implementations

    present = tuple(n for n in names if n in {i.name for i in implementations()})
    assert len(present) >= 2
    result = run_campaign(CampaignConfig(seeds=1, only=present, workers=1))
    rows = {r["name"]: r for r in result["rows"]}
    assert {rows[n]["level"] for n in present} == {"tree", "draft_step", "sampler"}
    assert all(rows[n]["rate_at_gate"] == 1.0 for n in present)


def test_a_campaigns_fixed_generation_plan_runs_every_generation_entry_at_its_n():
    """params and structured run the zoo's generation entries at their own fixed n per prompt cell, without the
    contexts cells; without it a mutant runs the default plan and a control the declared control n."""
    from harness.mutants.registry import get
    from suites.campaigns.zoo import _tasks

    names = ("penalties_count_rejected_drafts", "reference_generate")
    fixed = _tasks(CampaignConfig(seeds=2, control_seeds=2, generation_samples=300, only=names), [get(n) for n in names])
    assert len(fixed) == 4 and all(t.samples == 300 and t.plan == "prompts" for t in fixed)
    default = _tasks(CampaignConfig(seeds=2, control_seeds=2, only=names), [get(n) for n in names])
    assert {(t.name, t.samples, t.plan) for t in default} == {("penalties_count_rejected_drafts", 0, "default"),
                                                              ("reference_generate", 100, "default")}
