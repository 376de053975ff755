"""suites.campaigns.check_time on the runner: the session hands each cell the checkouts (this one and a worktree of
--old, removed afterwards); the report's table is one row per run, from the records."""

from __future__ import annotations

import json

from harness.runner import run
from suites.campaigns import check_time


def test_each_run_gets_its_checkout_from_the_session_and_the_table_is_its_records(tmp_path, monkeypatch):
    seen = []

    def one_run(checkout):
        seen.append(checkout)
        return {"verdict": "pass", "rows": 1200, "seconds": 2.0 if checkout == check_time.ROOT else 3.0,
                "load_before": [0.5, 0.25, 0.125]}

    monkeypatch.setattr(check_time, "one_run", one_run)
    assert run("check_time", ["--old", "HEAD", "--rounds", "2", "--out", str(tmp_path)], check_time) == 0
    old = seen[0]
    assert seen == [old, check_time.ROOT, check_time.ROOT, old] and old.name == "old" and not old.exists()
    rows = json.loads((tmp_path / "runs.json").read_text())["rows"]
    assert check_time.timing_rows(rows) == [["1", "old", "pass", "1,200", "3.00", "0.50 0.25 0.12"],
                                            ["1", "new", "pass", "1,200", "2.00", "0.50 0.25 0.12"],
                                            ["2", "new", "pass", "1,200", "2.00", "0.50 0.25 0.12"],
                                            ["2", "old", "pass", "1,200", "3.00", "0.50 0.25 0.12"]]
    assert "new / old = 0.67" in (tmp_path / "report.md").read_text()
