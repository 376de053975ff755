"""The architectures campaign on the campaign runner: every run a journaled cell (a rerun resumes, more seeds run on
top), the README's tables from every row of the journal (one row per family, the last run per seed), the exit code
from this command's runs, bad settings refused before any run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.runner import JOURNAL, run
from suites.campaigns import architectures
from suites.campaigns.architectures import readme
from suites.catalogues.architectures import FAMILIES


def test_readme_has_one_row_per_family_and_counts_seeds_once(tmp_path: Path):
    rows = [{"part": "mutants", "name": "m", "pair": "arch-ssm", "seed": 0, "verdict": "fail", "seconds": 3.0},
            {"part": "mutants", "name": "m", "pair": "arch-ssm", "seed": 0, "verdict": "fail", "seconds": 5.0},
            {"part": "mutants", "name": "m", "pair": "arch-ssm", "seed": 1, "verdict": "pass", "seconds": 4.0},
            {"part": "transformers", "impl": "harness.adapters.hf:assisted_generate", "pair": "arch-swa",
             "settings": ["T=0"], "verdict": "fail", "seconds": 9.0, "message": "greedy | diverges"}]
    text = readme(rows, tmp_path)
    for name in FAMILIES:
        assert sum(line.startswith(f"| {name} |") for line in text.splitlines()) == 1
    assert "| m | arch-ssm | 1/2 |" in text
    assert "['T=0']: FAIL (9 s, TV -): greedy / diverges" in text


def test_reference_runs_are_counted_as_false_alarm_trials_per_plan(tmp_path: Path):
    ref = dict(part="reference", pair="arch-ssm", settings=["T=1"], samples_requested=300, time_budget_s=None,
               seconds=1.0, declared_tests=40)
    rows = [{**ref, "seed": 0, "verdict": "pass", "family_p": 0.5},
            {**ref, "seed": 1, "verdict": "pass", "family_p": 0.01},
            {**ref, "seed": 1, "verdict": "fail", "family_p": 1e-4},  # a rerun of seed 1: the last counts
            {**ref, "seed": 2, "verdict": "pass", "family_p": 1.0, "samples_requested": None}]  # another plan
    text = readme(rows, tmp_path)
    assert "| arch-ssm | ['T=1'], 300 | 2 (0–1) | 1/2 (1%–99%) | 1/2 | 40 | 2.5e-05 |" in text
    assert "| arch-ssm | ['T=1'], planned | 1 (2–2) | 0/1 (0%–98%) | 0/1 | 40 | 2.5e-05 |" in text
    text = readme(rows + [{**ref, "pair": "arch-swa", "seed": 0, "verdict": "pass", "family_p": 0.9}], tmp_path)
    assert "| all families | ['T=1'], 300 | 3 (0–1) | 1/3 (1%–91%) | 1/3 | 40 | 2.5e-05 |" in text
    assert "| all families | ['T=1'], planned |" not in text  # one family only: nothing to pool


def _stub_verify(verdicts: dict, calls: list):
    """`specdec verify` replaced by a stub (every real run takes minutes on CPU): the verdict by implementation."""

    def verify(impl, pair, *, seed, samples, time_budget, settings=None, contexts=None):
        calls.append((impl, pair, seed))
        return {"impl": impl, "pair": pair, "seed": seed, "samples_requested": samples, "time_budget_s": time_budget,
                "settings": settings or "default", "verdict": verdicts.get(impl, "pass"), "seconds": 1.0,
                "declared_tests": 40, "family_p": 0.5, "detectable_tv": 0.1}
    return verify


@pytest.mark.statistical
def test_runs_are_journaled_a_rerun_adds_seeds_and_the_exit_code_is_this_commands(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(architectures, "_verify", _stub_verify({architectures.REFERENCE: "pass"}, calls))
    mutant = "recurrent_state_not_rolled_back"
    argv = ["--only", "mutants", "reference", "--pairs", "arch-ssm", "--mutants", mutant, "--setting", "T=1",
            "--samples", "300", "--out", str(tmp_path)]
    assert run("architectures", argv) == 1  # the stub passes the mutant: not caught
    assert len(calls) == 2
    assert run("architectures", [*argv, "--seeds", "2"]) == 1
    assert len(calls) == 4  # seed 0 resumed, seed 1 of each ran
    assert run("architectures", [*argv, "--first-seed", "1", "--report-only"]) == 1
    assert len(calls) == 4
    record = json.loads((tmp_path / "campaign.json").read_text())
    assert record["kind"] == "campaign.architectures" and len(record["rows"]) == 4
    assert all(r["versions"]["torch"] for r in record["rows"])
    text = (tmp_path / "README.md").read_text()
    assert f"| {mutant} | arch-ssm | 0/2 |" in text and "| arch-ssm | ['T=1'], 300, ≤ 300 s | 2 (0–1) | 0/2" in text
    keys = [json.loads(line)["key"] for line in (tmp_path / JOURNAL).read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 4

    calls.clear()
    monkeypatch.setattr(architectures, "_verify", _stub_verify({architectures.REFERENCE: "fail"}, calls))
    caught = ["--only", "reference", "--pairs", "arch-ssm", "--first-seed", "5", "--samples", "300"]
    assert run("architectures", [*caught, "--out", str(tmp_path / "b")]) == 1  # a reference FAIL: a false alarm
    monkeypatch.setattr(architectures, "_verify", _stub_verify({}, calls))
    assert run("architectures", [*caught, "--out", str(tmp_path / "c")]) == 0


def test_bad_settings_exit_2_before_any_run(tmp_path):
    from harness.cli import main

    assert main(["campaign", "architectures", "--pairs", "arch-nope", "--out", str(tmp_path)]) == 2
    for bad in (["--mutants", "no_such_mutant"], ["--seeds", "-1"], ["--time-budget", "-1"]):
        with pytest.raises(HarnessError):
            run("architectures", [*bad, "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        run("architectures", ["--only", "nope", "--out", str(tmp_path)])
    assert not (tmp_path / JOURNAL).exists()


@pytest.mark.statistical
def test_a_real_greedy_reference_run_is_journaled_and_a_rerun_resumes_it(tmp_path):
    argv = ["--only", "reference", "--pairs", "arch-ssm", "--samples", "50", "--setting", "T=0", "--contexts", "none",
            "--time-budget", "0", "--out", str(tmp_path)]
    assert run("architectures", argv) == 0
    (row,) = json.loads((tmp_path / "campaign.json").read_text())["rows"]
    assert row["impl"] == architectures.REFERENCE and row["verdict"] == "pass" and row["settings"] == ["T=0"]
    assert run("architectures", argv) == 0  # resumed: nothing runs again
    assert len((tmp_path / JOURNAL).read_text().splitlines()) == 1
    assert "| arch-ssm |" in (tmp_path / "README.md").read_text()
