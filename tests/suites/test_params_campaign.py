"""The params campaign on the campaign runner: a small real run (exact TVs, a mutant caught, the control), a rerun
that resumes, and bad settings refused before any cell runs."""

from __future__ import annotations

import json

import pytest

from harness.errors import HarnessError
from harness.runner import JOURNAL, run

SMALL = ["--only", "bad_words_bonus_only", "reference_all_parameters", "--seeds", "1", "--control-seeds", "1",
         "--samples", "300", "--local-workers", "1"]


def _keys(out) -> list[str]:
    return [json.loads(line)["key"] for line in (out / JOURNAL).read_text().splitlines()]


@pytest.mark.stochastic(false_alarm=0.021, seed='2000 and 2001')  # two FAIL 0.01 + PASS 0.001
def test_a_small_run_catches_the_mutant_and_a_rerun_resumes(tmp_path):
    assert run("params", [*SMALL, "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "campaign.json").read_text())
    assert record["kind"] == "campaign.params" and record["provenance"]["git_commit"]
    rows = {r["name"]: r for r in record["rows"]}
    assert set(rows) == {"bad_words_bonus_only", "reference_all_parameters"}
    assert rows["bad_words_bonus_only"]["failed_runs"] == 1 and rows["reference_all_parameters"]["failed_runs"] == 0
    assert rows["bad_words_bonus_only"]["exact_tv_prompt0"] > 0.5  # the exact-TV cell's numbers in the row
    assert rows["reference_all_parameters"]["exact_tv_prompt0"] < 1e-12
    tvs = json.loads((tmp_path / "exact_tv.json").read_text())["report"]
    assert set(tvs) == set(rows) and tvs["bad_words_bonus_only"]["pair"] == "toy"
    assert "bad_words_bonus_only" in (tmp_path / "report.md").read_text()
    assert len(_keys(tmp_path)) == 4  # two entries' exact TVs and one check each
    assert run("params", [*SMALL, "--seeds", "2", "--out", str(tmp_path)]) == 0
    assert len(_keys(tmp_path)) == 5  # only the mutant's new seed ran
    assert json.loads((tmp_path / "campaign.json").read_text())["rows"][0]["runs"] == 2
    assert record["summary"]["command"].startswith("specdec campaign params --seeds 1 --control-seeds 1 --samples 300")


def test_bad_settings_exit_before_any_cell_runs(tmp_path):
    with pytest.raises(HarnessError, match="not an entry"):
        run("params", ["--only", "no_such_mutant", "--out", str(tmp_path)])
    with pytest.raises(HarnessError, match="--samples"):
        run("params", ["--samples", "0", "--out", str(tmp_path)])
    assert not (tmp_path / JOURNAL).exists()


def test_every_seed_of_an_entry_is_a_cell_at_its_own_pair_and_the_fixed_plan():
    from suites.campaigns.params import CONTROL, MUTANTS, Config, cells

    planned = [args[1] for args in cells(Config(seeds=2, control_seeds=3, samples=500)).values() if args[0] == "check"]
    assert len(planned) == 2 * len(MUTANTS) + 3
    assert sum(t["name"] == CONTROL for t in planned) == 3
    assert all(t["samples"] == 500 and t["plan"] == "prompts" and t["pair"] in ("toy", "toy-eos") for t in planned)
