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
