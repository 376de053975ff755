"""The architectures campaign's table is built from its rows only (one row per family, mutants per seed)."""

from __future__ import annotations

from pathlib import Path

from suites.campaigns.architectures import main, readme
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


def test_unknown_pair_is_a_usage_error(capsys):
    import pytest

    with pytest.raises(SystemExit) as exc:
        main(["--pairs", "arch-nope"])
    assert exc.value.code == 2


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
