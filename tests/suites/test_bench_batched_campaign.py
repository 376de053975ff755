"""The bench_batched campaign on the campaign runner: each part a cell on the pair loaded once, never journaled;
the report holds this run's parts only; bad settings exit 2 before any part runs."""

from __future__ import annotations

import json

import pytest

from harness.errors import HarnessError
from harness.runner import JOURNAL, run

SMALL = ["--pair", "toy", "--length", "3", "--threads", "1"]


@pytest.mark.stochastic(false_alarm=0.001, seed=0)  # the check part: no false FAIL 0.001
def test_the_check_part_states_its_achieved_tv_and_a_skipped_part_is_absent(tmp_path):
    """The check part states the achieved detectable TV (not the generation level's NaN target) and keeps the whole
    report; a part this run skipped is absent, never taken from an earlier run (nothing is journaled)."""
    assert run("bench_batched", [*SMALL, "--rows", "0", "--samples", "300", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "batched.json").read_text())
    data = record["report"]
    tv = data["check"]["detectable_tv"]
    assert tv == tv and 0 < tv < 1 and data["check"]["report"]["tests"] and data["check"]["verdict"] != "fail"
    assert "throughput" not in data and "nan" not in (tmp_path / "report.md").read_text()
    assert record["config"]["samples"] == 300 and record["provenance"]["git_commit"]
    assert not (tmp_path / JOURNAL).exists()
    assert run("bench_batched", [*SMALL, "--rows", "4", "--samples", "0", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "batched.json").read_text())["report"]
    assert "check" not in data  # not merged from the last run
    t = data["throughput"]
    assert t["batched"]["tokens"] == t["transformers"]["tokens"] == 4 * 3 and t["ratio_transformers_over_batched"] > 0
    assert "tokens/s" in (tmp_path / "report.md").read_text()


def test_bad_settings_exit_2_before_any_part_runs(tmp_path):
    from harness.cli import main

    assert main(["campaign", "bench_batched", "--pair", "nope", "--out", str(tmp_path)]) == 2
    for bad in (["--rows", "0", "--samples", "0"], ["--rows", "-1"], ["--length", "0"], ["--gamma", "0"]):
        with pytest.raises(HarnessError):
            run("bench_batched", [*SMALL, *bad, "--out", str(tmp_path)])
    assert not (tmp_path / "batched.json").exists()
