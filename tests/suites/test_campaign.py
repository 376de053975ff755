"""`specdec mutants`: the campaign's bookkeeping (rates, intervals, exit criterion, report) on a small zoo."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.cli import main
from suites.campaigns.zoo import (
    CampaignConfig,
    below_resolution,
    campaign_ok,
    clopper_pearson,
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
    assert campaign_ok([{**_row("wasteful", float("nan"), wasteful=0), "runs": 0}])[0]  # no run (cut short): not judged
    # below resolution (exact TV < 0.02 at every position): reported, not gated
    assert below_resolution({"exact_tv_a": 0.001, "exact_tv_b": 0.0004}, 0.02)
    assert campaign_ok([_row("mutant", 0.0, exact_tv_a=0.001)])[0]
    assert not below_resolution({"exact_tv_a": 0.001, "exact_tv_b": 0.3}, 0.02)
    # generation level: compared with the joint-law TV the runs' prompt cells promised, not the sampler plan's
    assert below_resolution({"exact_tv_prompt0": 0.031, "exact_tv_prompt1": 0.036, "resolution_tv": 0.09}, 0.02)
    assert not below_resolution({"exact_tv_prompt0": 0.18, "exact_tv_prompt1": 0.39, "resolution_tv": 0.09}, 0.02)
    assert not campaign_ok([_row("mutant", 0.0, exact_tv_prompt0=0.18, resolution_tv=0.09)])[0]
    assert not below_resolution({"exact_tv_prompt0": 0.0, "contract": "generation"}, 0.02)  # no promise: gated


@pytest.mark.end_to_end
def test_the_hook_mutants_exact_tvs_reach_the_zoo_rows():
    """The zoo row of a p/q-hook generation mutant carries its exact TV at both toy prompts."""
    from harness.mutants.registry import get
    from suites.campaigns.zoo import exact_tvs_of

    strong, mild = exact_tvs_of(get("penalties_count_rejected_drafts")), exact_tvs_of(get("penalties_count_rejected_drafts_mild"))
    assert set(strong) == set(mild) == {"exact_tv_prompt0", "exact_tv_prompt1"}
    assert min(strong.values()) > 0.15 and 0.02 < max(mild.values()) < 0.05


@pytest.mark.end_to_end
def test_a_lifted_rule_entry_below_the_plans_resolution_is_reported_not_counted_as_a_miss():
    """relaxed_acceptance_generate (lossy by design) is within TV 0.01 of the target at the default plan's settings
    on the toy prompts (its TV is large only with top-k 3), so 0 of 8 seeds detected is below resolution, not an
    escape; at a finer promised resolution the same row is a miss."""
    from harness.mutants.registry import get
    from suites.campaigns.zoo import exact_tvs_of

    tvs = exact_tvs_of(get("relaxed_acceptance_generate"))
    assert set(tvs) == {"exact_tv_prompt0", "exact_tv_prompt1"}
    assert 0.0 < max(tvs.values()) < 0.01
    row = _row("mutant", 0.0, level="generation", resolution_tv=0.024, **tvs)
    assert campaign_ok([row])[0]
    assert not campaign_ok([{**row, "resolution_tv": 0.001}])[0]


ENTRIES = ["always_accept", "reference_verify"]  # a sampler mutant (caught at once) and the reference control


def _envelope(out) -> dict:
    return json.loads((out / "campaign.json").read_text())


def _cells_run(err: str) -> list[str]:
    """The runner's progress lines: 'campaign zoo: DONE/TOTAL cells'."""
    return [line for line in err.splitlines() if line.startswith("campaign zoo:")]


@pytest.mark.stochastic(false_alarm=0.022, seed='0 and 1')  # two FAIL 0.01 + two PASS 0.001
def test_specdec_mutants_runs_on_the_runner_and_a_rerun_resumes(tmp_path, capsys):
    """`specdec mutants --quick` (what `nox -s lossless` runs): the mutant caught in every seed, the control passes,
    exit 0; the record's config reruns it (`specdec run --config`), resumed from the journal: no run again."""
    out = tmp_path / "q"
    argv = ["mutants", "--quick", "--only", *ENTRIES, "--seeds", "2", "--control-seeds", "2", "--out", str(out)]
    assert main(argv) == 0
    assert _cells_run(capsys.readouterr().err)[-1] == "campaign zoo: 4/4 cells"
    record = _envelope(out)
    assert record["kind"] == "campaign.zoo" and record["provenance"]["seed"] == [0, 1]
    assert record["config"] == {"seeds": 2, "control_seeds": 2, "gate": 1e-3, "compare_plans": False,
                              "only": ENTRIES, "contracts": [], "profile": "full", "quick": True, "threads": None}
    plan = record["summary"]["plan"]
    assert plan["profile"] == "quick" and plan["seeds"] == 2 and plan["curve_seeds"] == 0  # the quick profile's
    assert record["summary"]["ok"] and record["summary"]["runs_made"] == 4
    rows = {r["name"]: r for r in record["rows"]}
    assert (rows["always_accept"]["runs"], rows["always_accept"]["rate_at_gate"]) == (2, 1.0)
    assert (rows["reference_verify"]["runs"], rows["reference_verify"]["failed_runs"]) == (2, 0)
    report = (out / "report.md").read_text()
    assert "Overall: PASS" in report and "Profile: quick" in report and "Partial" not in report
    command = record["summary"]["command"]
    assert command == f"specdec campaign zoo --seeds 2 --control-seeds 2 --only {' '.join(ENTRIES)} --quick --out {out}"
    assert f"Command: `{command}`" in report and report.splitlines()[2].startswith("Generated ")
    assert (out / "campaign.csv").exists() and (out / "detection_vs_samples.png").exists()

    assert main(["run", "--config", str(out / "campaign.json"), "--out", str(out)]) == 0
    assert _cells_run(capsys.readouterr().err) == ["campaign zoo: 4/4 cells"]  # every cell from the journal
    assert "4 of 4 runs were resumed" in (out / "report.md").read_text()
    assert main(["campaign", "zoo", *argv[1:], "--seeds", "3", "--budget-s", "0"]) == 2  # spent: no run starts
    err = capsys.readouterr().err
    assert "1 of 5 planned cells not made" in err and _cells_run(err) == ["campaign zoo: 4/5 cells"]
    assert "Partial: 1 of 5 planned runs not made" in (out / "report.md").read_text()


def test_a_journaled_failure_of_a_control_is_exit_1(tmp_path, capsys):
    """The report judges the runs the journal holds (--report-only: none runs): a control that FAILed is exit 1;
    an entry with no run is not judged, and runs not made are exit 2."""
    from harness.executor import JOURNAL, Journal
    from suites.campaigns import zoo

    config = zoo.ZooConfig(only=["reference_verify"], control_seeds=2, quick=True)
    journal = Journal(tmp_path / JOURNAL)
    for i, (key, (task, _)) in enumerate(zoo.cells(config).items()):
        journal.append(key, {"task": dataclasses.asdict(task), "fail": i == 0, "family_p": 1e-6 if i == 0 else 1.0,
                             "samples": 9312, "resolution_tv": None, "wasteful": False, "seconds": 1.0})
    assert main(["mutants", "--quick", "--only", "reference_verify", "--control-seeds", "2", "--out", str(tmp_path),
                 "--report-only"]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM: control reference_verify failed 1 of 2 runs at the gate" in out and "overall: FAIL" in out
    assert "Overall: FAIL" in (tmp_path / "report.md").read_text()
    # nothing journaled for an entry: its row is not judged, and the runs not made are exit 2
    assert main(["mutants", "--quick", "--only", "always_reject", "--out", str(tmp_path / "none"), "--report-only"]) == 2
    assert "specdec: error: campaign zoo: 8 of 8 planned cells not made" in capsys.readouterr().err


@pytest.mark.parametrize("argv,needle", [
    (["--seeds", "0"], "--seeds and --control-seeds must be >= 1"),
    (["--false-alarm-rate", "1.5"], "--false-alarm-rate must be in (0, 1)"),
    (["--only", "always_acept"], "Did you mean 'always_accept'"),
    (["--compare-plans", "--contract", "sampler"], "--compare-plans compares the generation level's plans"),
    (["--threads", "0"], "--threads must be >= 1"),
])
def test_a_bad_setting_is_exit_2_before_any_run(argv, needle, tmp_path, capsys):
    assert main(["mutants", "--quick", *argv, "--out", str(tmp_path / "z")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and not _cells_run(err)
    assert not (tmp_path / "z").exists()  # refused before the journal (or anything) was written


def test_the_flags_resolve_to_the_profiles_sizes():
    """`ZooConfig.plan()`: the profile's sizes (suites/profiles.py), a size given on the command line over them."""
    from suites.campaigns.zoo import CampaignConfig, ZooConfig

    assert ZooConfig().plan() == CampaignConfig()
    quick = ZooConfig(quick=True, seeds=3).plan()
    assert quick == CampaignConfig.quick(seeds=3) and quick.control_seeds == CampaignConfig.quick().control_seeds
    assert ZooConfig(profile="quick").plan() == CampaignConfig.quick()


@pytest.mark.stochastic(false_alarm=0.03, seed=0)  # three FAIL 0.01
def test_campaign_runs_every_step_family(tmp_path):
    """The zoo's tree and draft-and-verify entries run through their own checks (mutants caught)."""
    from harness.mutants import implementations
    from harness.runner import run

    names = ("specinfer_q_for_unsampled_candidates", "argmax_drafts_softmax_q", "block_token_level_accept")
    present = tuple(n for n in names if n in {i.name for i in implementations()})
    assert len(present) >= 2
    argv = ["--quick", "--seeds", "1", "--only", *present, "--local-workers", "1", "--out", str(tmp_path)]
    assert run("zoo", argv) == 0  # the quick profile: no curve, one run each
    rows = {r["name"]: r for r in json.loads((tmp_path / "campaign.json").read_text())["rows"]}
    assert {rows[n]["contract"] for n in present} == {"tree", "draft_step", "sampler"}
    assert all(rows[n]["rate_at_gate"] == 1.0 for n in present)


def test_a_campaigns_fixed_generation_plan_runs_every_generation_entry_at_its_n():
    """params and structured run the zoo's generation entries at their own fixed n per prompt cell, without the
    contexts cells; without it a mutant runs the default plan and a control the declared control n."""
    from harness.mutants.registry import get
    from suites.campaigns._zoo_plan import _tasks

    names = ("penalties_count_rejected_drafts", "reference_generate")
    fixed = _tasks(CampaignConfig(seeds=2, control_seeds=2, generation_samples=300, only=names), [get(n) for n in names])
    assert len(fixed) == 4 and all(t.samples == 300 and t.plan == "prompts" for t in fixed)
    default = _tasks(CampaignConfig(seeds=2, control_seeds=2, only=names), [get(n) for n in names])
    assert {(t.name, t.samples, t.plan) for t in default} == {("penalties_count_rejected_drafts", 0, "default"),
                                                              ("reference_generate", 100, "default")}
