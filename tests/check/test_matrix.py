"""`specdec verify --vary`: a matrix of configurations, here or on dask workers, journaled and resumable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.check import matrix
from harness.check.config import CheckConfig
from harness.errors import HarnessError
from harness.executor import Journal

BASE = CheckConfig(impl="specdec_ref.adapters:verify", cases=["anti-logits"])
IMPLS = "impl=specdec_ref.adapters:verify,tests.impls.broken:always_accept"


def test_vary_values_are_typed_by_their_field_and_crossed():
    vary = matrix.parse_vary([IMPLS, "seed=0,1,2", "false-alarm-rate=1e-3", "--tv=0.05"])
    assert vary == [("impl", ["specdec_ref.adapters:verify", "tests.impls.broken:always_accept"]),
                    ("seed", [0, 1, 2]), ("false_alarm_rate", [1e-3]), ("tv", [0.05])]
    configs = matrix.expand(BASE, vary)
    assert len(configs) == 6 and {c.seed for c in configs} == {0, 1, 2}
    assert all(c.tv == 0.05 and c.cases == ["anti-logits"] for c in configs)
    # a sampling setting holds commas: one value per --vary, repeated --vary add values
    settings = matrix.parse_vary(["setting=T=0.7,top_p=0.9", "setting=T=1"])
    assert [c.settings for c in matrix.expand(BASE, settings)] == [["T=0.7,top_p=0.9"], ["T=1"]]


@pytest.mark.parametrize("item,message", [
    ("gama=1,3", "did you mean 'gamma'"),
    ("seed", "FIELD=V1,V2"),
    ("seed=one", "bad value 'one'"),
    ("seed=1,1", "listed twice"),
    ("level=sampler,generation", "FIELD=V1,V2"),  # the level is not varied (the engine has its own flags)
])
def test_bad_vary_is_a_usage_error(item, message):
    with pytest.raises(HarnessError, match=message):
        matrix.parse_vary([item])


def test_every_configuration_is_validated_before_anything_runs():
    with pytest.raises(HarnessError):
        matrix.expand(BASE, matrix.parse_vary(["gamma=3,0"]))  # gamma 0 is invalid
    with pytest.raises(HarnessError, match="engine"):
        matrix.expand(CheckConfig(level="engine"), matrix.parse_vary(["seed=0,1"]))


def _verdicts(result):
    return [(c["config"]["impl"], c["config"]["seed"], c["verdict"]) for c in result.cells]


@pytest.mark.stochastic(false_alarm=0.022, seed='0 and 1')  # two PASS 0.001 + two FAIL 0.01
def test_matrix_gives_each_configuration_its_own_verdict_and_resumes_from_its_journal(tmp_path, monkeypatch):
    vary = matrix.parse_vary([IMPLS, "seed=0,1"])
    configs = matrix.expand(BASE, vary)
    journal = Journal(tmp_path / "cells.jsonl")
    first = matrix.run_matrix(configs, vary, journal=journal, threads=1)
    assert _verdicts(first) == [("specdec_ref.adapters:verify", 0, "pass"), ("specdec_ref.adapters:verify", 1, "pass"),
                                ("tests.impls.broken:always_accept", 0, "fail"),
                                ("tests.impls.broken:always_accept", 1, "fail")]
    assert first.exit_code() == 1 and not any(c["resumed"] for c in first.cells)
    # Rerun on the same journal: nothing is computed again, and the report says where each cell came from.
    monkeypatch.setattr(matrix, "run_cell", lambda *a: pytest.fail("a finished cell was run again"))
    again = matrix.run_matrix(configs, vary, journal=Journal(tmp_path / "cells.jsonl"), threads=1)
    assert _verdicts(again) == _verdicts(first) and all(c["resumed"] for c in again.cells)
    assert "from the journal" in matrix.markdown(again, "cmd")
    # A changed configuration is a different cell: never served from another configuration's record.
    other = matrix.expand(CheckConfig(impl="specdec_ref.adapters:verify", cases=["anti-logits"], tv=0.05),
                          matrix.parse_vary(["seed=0"]))
    assert matrix.cell_key(other[0]) not in Journal(tmp_path / "cells.jsonl").load()


def test_exit_code_is_the_most_serious_outcome():
    def result(*verdicts):
        return matrix.MatrixResult([{"verdict": v} for v in verdicts], 0.0, "here")

    assert result("pass", "pass").exit_code() == 0
    assert result("pass", "inconclusive").exit_code() == 3
    assert result("pass", "inconclusive").exit_code(allow_inconclusive=True) == 0
    assert result("inconclusive", "error").exit_code() == 2
    assert result("error", "fail", "pass").exit_code() == 1


@pytest.mark.end_to_end
def test_matrix_on_a_local_dask_cluster_matches_in_process():
    pytest.importorskip("distributed")
    vary = matrix.parse_vary([IMPLS, "seed=0,1"])
    configs = matrix.expand(BASE, vary)
    here = matrix.run_matrix(configs, vary, threads=1)
    there = matrix.run_matrix(configs, vary, workers=2, threads=1)
    assert there.executor == "a local dask cluster of 2 workers"
    assert _verdicts(there) == _verdicts(here)
    for a, b in zip(here.cells, there.cells, strict=True):  # same seeds: the same draws, the same statistics
        assert a["samples"] == b["samples"]
        assert [t["p_value"] for t in a["report"]["tests"]] == [t["p_value"] for t in b["report"]["tests"]]


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "harness", "verify", *args], capture_output=True, text=True,
                          cwd=cwd, env={"PYTHONPATH": str(cwd), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})


@pytest.mark.stochastic(false_alarm=0.011, seed=0)  # PASS 0.001 + FAIL 0.01
def test_cli_matrix_exit_codes_and_report(tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "m"
    run = _cli("--impl", "specdec_ref.adapters:verify", "--vary", IMPLS, "--cases", "anti-logits",
               "--threads", "1", "--matrix-out", str(out), cwd=root)
    assert run.returncode == 1, run.stderr
    assert "FAIL" in run.stdout and "PASS" in run.stdout and "1 of 2 configurations" in run.stderr
    assert (out / "report.md").exists() and (out / "journal.jsonl").read_text().count("\n") == 2
    # usage errors: one line, exit 2, nothing run
    for bad in (["--vary", "gama=1"], ["--vary", "seed=0", "--cases", "nope"], ["--workers", "2"]):
        run = _cli("--impl", "specdec_ref.adapters:verify", *bad, "--matrix-out", str(tmp_path / "x"), cwd=root)
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert "Traceback" not in run.stderr
