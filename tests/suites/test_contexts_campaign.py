"""suites.campaigns.contexts on the cell runner: runs recorded by the earlier per-part journals are resumed, not
run again; every new run is journaled; a rerun past its deadline starts none."""

from __future__ import annotations

import json

from suites.campaigns.contexts import main


def test_contexts_campaign_resumes_the_part_journals_and_journals_new_runs(tmp_path):
    out = tmp_path / "contexts"
    out.mkdir()
    earlier = {"seed": 1000, "verdict": "pass", "fail": False, "seconds": 1.0, "declared_samples": 100}
    (out / "control.json").write_text(json.dumps({"runs": [earlier], "chunks": []}))
    args = ["--out", str(out), "--parts", "control", "--control-seeds", "2", "--control-samples", "100"]
    assert main(args) == 0
    runs = json.loads((out / "control.json").read_text())["runs"]
    assert [r["seed"] for r in runs] == [1000, 1001] and runs[0] == earlier  # 1000 resumed, only 1001 ran
    assert runs[1]["verdict"] == "pass" and runs[1]["declared_samples"] == 100
    keys = [json.loads(line)["key"] for line in (out / "journal.jsonl").read_text().splitlines()]
    assert keys == ["control/1000", "control/1001"]
    assert main([*args, "--control-seeds", "3", "--budget-s", "0"]) == 0  # out of time: nothing new starts
    assert len(json.loads((out / "control.json").read_text())["runs"]) == 2
    summary = json.loads((out / "campaign.json").read_text())["summary"]
    assert summary["control_seeds"] == 2 and summary["control_false_alarms"] == 0
