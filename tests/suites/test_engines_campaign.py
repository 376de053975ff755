"""The generic engine battery (suites/campaigns/engines.py) on a fake in-process engine (tests/impls/fake_engine.py):
the correct engine passes every cell, a planted fault fails; the matrix lists every registered engine."""

from __future__ import annotations

import json

import pytest

import tests.impls.fake_engine  # noqa: F401  (registers "fake-engine")
from harness.runner import run

# toy-low (V = 16, 3-token continuations): 1,000 continuations per prompt and setting give a detectable TV of about
# 0.11 local / 0.18 two-sample at power 0.99 (measured: the records' detectable_tv); the bar is set above it, so
# the correct engine PASSes. The false-alarm rate of this check at the gate on this pair, served the same way, is
# 0/100 (results/engine/report.md, `reference_generate`, 1,000 samples).
ARGS = ["--engine", "fake-engine", "--pair", "toy-low", "--samples", "1000", "--tv-bar", "0.3", "--fresh"]


def _records(out):
    return {json.loads(line)["key"]: json.loads(line)["record"] for line in (out / "journal.jsonl").open()}


@pytest.mark.stochastic(false_alarm=0.004, seed=0)  # four sampling cells' PASS 0.001 (the greedy ones are exact)
def test_the_correct_fake_engine_passes_every_cell_and_the_matrix_names_it(tmp_path, capsys):
    assert run("engines", [*ARGS, "--out", str(tmp_path)]) == 0
    records = _records(tmp_path)
    assert len(records) == 6  # draft × (greedy, T=1, T=0.7/top-p 0.9) × (local, off); api / logprobs: not served
    for r in records.values():
        assert r["verdict"] == "pass", r
        assert r["version"] == "fake 1.0" and r["seconds"] > 0
        assert r["check"] == "greedy" or (r["samples"] >= 2000 and 0 < r["detectable_tv"] < 0.3)
    rows = json.loads((tmp_path / "fake-engine.json").read_text())["rows"]
    not_run = {(r["check"], r["truth"]): r["why"] for r in rows if r["verdict"] == "not run"}
    assert set(not_run) == {("api", "local"), ("logprobs", "local"), ("api", "off"), ("logprobs", "off")}
    stops = [json.loads(line) for line in (tmp_path / "engine-stops.jsonl").open()]
    assert {s["method"] for s in stops} == {"draft", None}  # every engine the run started was stopped
    matrix = (tmp_path / "README.md").read_text()
    assert "`fake-engine` | draft | **PASS** (local" in matrix.replace("\n", " ")
    capsys.readouterr()


@pytest.mark.stochastic(false_alarm=0.02, seed=0)  # two FAIL 0.01
def test_a_planted_fault_fails_the_battery(tmp_path, capsys):
    # greedy verification while sampling (the class of SGLang's CPU path): greedy passes, the laws fail
    code = run("engines", [*ARGS, "--out", str(tmp_path), "--engine-option", "mutant=greedy_verify_when_sampling",
                           "--truths", "local"])
    assert code == 1
    records = {r["check"]: r for r in _records(tmp_path).values()}
    assert records["greedy"]["verdict"] == "pass"
    assert records["T=1"]["verdict"] == "fail" and records["T=0.7,top_p=0.9"]["verdict"] == "fail"
    capsys.readouterr()


def test_a_declared_only_or_missing_engine_is_exit_2_in_one_line(tmp_path, capsys):
    from harness.cli import main

    assert main(["campaign", "engines", "--engine", "sglang", "--out", str(tmp_path)]) == 2
    assert "CUDA" in capsys.readouterr().err
    assert main(["campaign", "engines", "--engine", "no-such", "--out", str(tmp_path)]) == 2
    assert "no engine 'no-such'" in capsys.readouterr().err


def test_no_engine_regenerates_the_matrix_of_every_registered_engine(tmp_path, capsys):
    from harness.engines.catalogue import ADAPTERS

    assert run("engines", ["--out", str(tmp_path)]) == 0
    matrix = (tmp_path / "README.md").read_text()
    for name in ADAPTERS:
        assert f"`{name}`" in matrix, name
    assert "not run: not installable on this CPU machine" in matrix  # sglang's cells say why
    assert (tmp_path / "README.md").stat().st_mtime == (tmp_path / "README.md").stat().st_mtime
    before = (tmp_path / "README.md").stat().st_mtime_ns
    assert run("engines", ["--out", str(tmp_path)]) == 0
    assert (tmp_path / "README.md").stat().st_mtime_ns == before  # unchanged: not rewritten
    capsys.readouterr()


def test_the_runner_hands_the_session_object_to_run_cell_and_refuses_it_where_cells_leave_the_process(tmp_path):
    import contextlib
    import dataclasses
    import types

    from harness.errors import HarnessError

    seen = []
    module = types.ModuleType("ctx_campaign")

    @dataclasses.dataclass
    class Config:
        pass

    @contextlib.contextmanager
    def session(config):
        yield {"held": "engines"}

    module.Config, module.session, module.CONTEXT, module.WHERE = Config, session, True, "local"
    module.cells = lambda config: {"a": (1,), "b": (2,)}
    module.run_cell = lambda ctx, x: seen.append((ctx["held"], x)) or {"x": x}
    module.report = lambda run: 0
    assert run("ctx", ["--out", str(tmp_path)], module) == 0
    assert seen == [("engines", 1), ("engines", 2)]
    module.WHERE = None
    with pytest.raises(HarnessError, match="CONTEXT = True needs WHERE"):
        run("ctx", ["--out", str(tmp_path / "2")], module)
