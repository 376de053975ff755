"""Cost model: break-even acceptance, and the measured pass costs on the campaign runner (toy pair)."""

from __future__ import annotations

import json

import pytest

from harness.bench.theory import expected_tokens_per_call
from harness.errors import HarnessError
from harness.runner import JOURNAL, run
from suites.campaigns.bench_costs import GAMMAS, break_even_alpha, cost_table


@pytest.mark.parametrize("gamma,r,c", [(1, 1.0, 0.1), (2, 1.4, 0.2), (4, 2.0, 0.05), (8, 3.0, 0.3)])
def test_break_even_alpha_solves_speedup_one(gamma, r, c):
    a = break_even_alpha(gamma, r, c)
    assert a is not None and 0 < a < 1
    assert expected_tokens_per_call(a, gamma) == pytest.approx(r + gamma * c, rel=1e-9)
    assert expected_tokens_per_call(a * 0.99, gamma) < r + gamma * c  # below α* it does not pay off


def test_break_even_edge_cases():
    assert break_even_alpha(3, 1.0, 0.0) == pytest.approx(0.0, abs=1e-12)  # a free draft pays at any α
    assert break_even_alpha(2, 2.5, 0.3) is None  # 3 tokens at most, but a step costs 3.1 passes


def test_cost_table_from_measured_seconds():
    rows = cost_table({1: 0.01, 2: 0.012, 3: 0.015}, {"d": 0.002}, gammas=(1, 2), alphas={"d": 0.6})
    assert [(r["gamma"], round(r["c"], 6), round(r["r"], 6)) for r in rows] == [(1, 0.2, 1.2), (2, 0.2, 1.5)]
    assert rows[0]["speedup_at_measured_alpha"] == pytest.approx(expected_tokens_per_call(0.6, 1) / (1.2 + 0.2))


@pytest.mark.end_to_end
def test_a_run_on_the_runner_times_every_pass_and_writes_the_report_never_resuming(tmp_path):
    argv = ["--pair", "toy", "--repeats", "1", "--threads", "1", "--alphas", "toy=0.6", "--out", str(tmp_path)]
    assert run("bench_costs", argv) == 0
    record = json.loads((tmp_path / "costs.json").read_text())
    assert record["kind"] == "campaign.bench_costs" and record["config"]["pair"] == "toy"
    assert set(record["summary"]["target_seconds"]) == {"1", "2", "3", "4", "5", "7", "9"}
    assert all(v > 0 for v in record["summary"]["target_seconds"].values())
    assert {r["gamma"] for r in record["rows"]} == set(GAMMAS) and all(r["c"] > 0 for r in record["rows"])
    assert all(r["speedup_at_measured_alpha"] > 0 for r in record["rows"])  # --alphas toy=0.6
    assert "Break-even" in (tmp_path / "report.md").read_text()
    assert not (tmp_path / JOURNAL).exists()  # a ratio comes from one run: never journaled, never resumed
    for flag in ("--report-only", "--fresh"):  # nothing to report from or to forget: no such flags
        with pytest.raises(SystemExit) as exited:
            run("bench_costs", [*argv, flag])
        assert exited.value.code == 2


def test_bad_settings_exit_2_before_any_pass_is_timed(tmp_path):
    from harness.cli import main

    assert main(["campaign", "bench_costs", "--pair", "nope", "--out", str(tmp_path)]) == 2
    for bad in (["--repeats", "0"], ["--alphas", "toy:0.6"], ["--threads", "0"]):
        with pytest.raises(HarnessError):
            run("bench_costs", ["--pair", "toy", *bad, "--out", str(tmp_path)])
    assert not (tmp_path / "costs.json").exists()
