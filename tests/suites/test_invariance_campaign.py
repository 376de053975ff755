"""suites.campaigns.invariance on the campaign runner: every run journaled, a rerun resumes without running
anything."""

from __future__ import annotations

import json

import pytest

from harness.cli import main as specdec
from harness.reporting import rate
from suites.campaigns.invariance import invariance_cells, source_rows


def main(argv: list[str]) -> int:
    return specdec(["campaign", "invariance", *argv])


@pytest.mark.stochastic(false_alarm=0.08, seed="the campaign's, one per run")  # eight slips FAIL 0.01
def test_invariance_campaign_journals_every_run_and_resumes(tmp_path):
    out = tmp_path / "inv"
    cells, slips = invariance_cells(["sampler"], 2, 1e-3)
    assert len(slips) == 8  # two planted slips in each of the four driver modes
    main(["--rules", "2", "--sources", "sampler", "--out", str(out)])  # 2 rules: the CI is too wide to say "ok"
    journal = (out / "journal.jsonl").read_text().splitlines()
    assert len(journal) == len(cells) + len(slips)
    first = json.loads((out / "runs.json").read_text())
    assert all(s["verdict"] == "fail" for s in first["summary"]["slips"]) and len(first["rows"]) == 2
    (row,) = source_rows(first["rows"], ["sampler"])  # report.md's table, from the rows it is rendered from
    verdicts = [r["verdict"] for r in first["rows"]]
    assert row == ["sampler", 2, rate(verdicts.count("fail"), 2), verdicts.count("inconclusive"), 0]
    main(["--rules", "2", "--sources", "sampler", "--out", str(out), "--budget-s", "0"])  # nothing may start
    again = json.loads((out / "runs.json").read_text())
    assert again["rows"] == first["rows"] and again["summary"]["slips"] == first["summary"]["slips"]
    assert (out / "journal.jsonl").read_text().splitlines() == journal


def test_a_campaign_cut_short_says_so(tmp_path):
    out = tmp_path / "inv"
    assert main(["--rules", "2", "--sources", "sampler", "--out", str(out), "--budget-s", "0"]) == 2
    assert "planned runs not made" in (out / "report.md").read_text()
