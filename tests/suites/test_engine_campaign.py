"""`specdec campaign engine` on the campaign runner: a tiny real run (the served reference checked over HTTP, its
probe), a rerun that resumes without starting a server, a run cut short that says so, a served mutant caught, and a
bad setting refused before any cell runs."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from suites.campaigns import engine as campaign


def _counting_starts(monkeypatch) -> list[str]:
    """Every server the campaign starts (the real one), by name."""
    started: list[str] = []
    start = campaign._start

    def counted(name, pair):
        started.append(name)
        return start(name, pair)

    monkeypatch.setattr(campaign, "_start", counted)
    return started


@pytest.mark.stochastic(false_alarm=0.001, seed=0)  # PASS 0.001
def test_a_tiny_run_checks_the_served_reference_and_a_rerun_resumes_without_a_server(tmp_path, monkeypatch, capsys):
    started = _counting_starts(monkeypatch)
    argv = ["campaign", "engine", "--seeds", "1", "--mutant-seeds", "0", "--other-seeds", "0", "--samples", "60",
            "--out", str(tmp_path)]
    assert main(argv) == 0
    assert started == ["reference_generate"]  # one server for the probe and the run
    record = json.loads((tmp_path / "calibration.json").read_text())
    assert record["kind"] == "campaign.engine" and record["provenance"]["git_commit"]
    assert record["config"] == {"seeds": 1, "mutant_seeds": 0, "other_seeds": 0, "samples": 60,
                                "mutant_samples": 2000, "other_samples": 1000}
    (row,) = record["rows"]  # no mutant and no other ground truth was asked for: no row for them
    assert (row["name"], row["ground_truth"], row["runs"], row["rate_at_gate"]) == ("reference_generate", "local", 1, 0.0)
    assert record["summary"]["cells_run"] == record["summary"]["cells"] == 2
    assert json.loads((tmp_path / "probe-serve.json").read_text())["kind"] == "probe"
    report = (tmp_path / "report.md").read_text()
    assert "| `reference_generate` | control | local | 1 | 0.0 % |" in report and "Partial" not in report
    assert "specdec campaign engine --seeds 1" in report

    assert main(argv) == 0 and started == ["reference_generate"]  # resumed from the journal: no server, no run
    assert main([*argv[:3], "2", *argv[4:], "--budget-s", "0"]) == 2  # one more seed, but the time is up
    assert started == ["reference_generate"]
    report = (tmp_path / "report.md").read_text()
    assert "Partial: 2 of 3 runs made" in report and "| control | local | 1 |" in report
    assert json.loads((tmp_path / "calibration.json").read_text())["summary"]["cells_run"] == 2


@pytest.mark.end_to_end
def test_a_served_mutant_is_caught_and_its_server_replaces_the_references():
    """A cell of a mutant row (greedy catches this one at once) and the rows the report builds from it."""
    import types

    with campaign.session(campaign.Config()):
        record = campaign.run_cell("check", "eos_dropped_in_block", "local", "toy-eos", 60, 1000)  # the entry's pair
        assert campaign._UP["names"] == (("eos_dropped_in_block",), "toy-eos")
    assert campaign._UP["stack"] is None  # the session stopped it
    assert record["fail"] and record["first_reject"].startswith("greedy")
    key = "eos_dropped_in_block/local/toy-eos/60/1000"
    run = types.SimpleNamespace(cells={key: ("check", "eos_dropped_in_block", "local", "toy-eos", 60, 1000),
                                       "eos_dropped_in_block/local/toy-eos/60/1001":
                                           ("check", "eos_dropped_in_block", "local", "toy-eos", 60, 1001)},
                                done={key: record})
    (row,) = campaign.rows(run)
    assert (row["kind"], row["runs"], row["rate_at_gate"], row["pair"]) == ("mutant", 1, 1.0, "toy-eos")


@pytest.mark.parametrize("flag", ["--samples", "--seeds"])
def test_a_bad_setting_is_exit_2_before_any_cell_runs(flag, tmp_path, monkeypatch, capsys):
    started = _counting_starts(monkeypatch)
    assert main(["campaign", "engine", flag, "-1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err and "Traceback" not in err
    assert started == [] and not (tmp_path / "journal.jsonl").exists()
