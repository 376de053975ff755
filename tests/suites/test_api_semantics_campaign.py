"""suites.campaigns.api_semantics (`specdec campaign api_semantics`): the toy parts run the real API check against
`specdec serve` (a planted bug FAILs, the correct server PASSes, results.json keeps the keys this run did not
measure); the llama-server part, with a fake binary, server and check, runs each side once, through the native
route, on enough slots for n, and exits 1 on a FAIL (a finding); a rerun resumes; a bad setting exits 2."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.cli import main
from harness.envelope import read_result, write_result
from harness.records import provenance
from harness.served import check as served_check
from harness.served import llama_server as served
from suites.campaigns import api_semantics as campaign


def test_the_toy_parts_catch_a_planted_bug_pass_the_correct_server_and_keep_other_keys(tmp_path, monkeypatch):
    out = tmp_path / "api"
    out.mkdir()
    write_result(out / "results.json", "finding.api_semantics", config={}, provenance=provenance(seed=0),
                 report={"detection_at_old": {"x": []}})
    argv = ["campaign", "api_semantics", "--parts", "false_alarms,detection", "--seeds", "1", "--mutants",
            "ids_past_stop", "--out", str(out)]
    assert main(argv) == 0
    report = read_result(out / "results.json").report
    assert [r["verdict"] for r in report["false_alarms"]] == ["pass"]
    assert report["detection"] == {"ids_past_stop": [{"seed": 100, "verdict": "fail", "rejected": ["stop_strings"]}]}
    assert report["detection_at_old"] == {"x": []}  # measured before, not by this run: kept
    assert report["false_alarms"][0]["cases"][0]["stop_requests"] > 0

    def no_cell(*args):
        raise AssertionError("a journaled cell ran again")

    monkeypatch.setattr(campaign, "_toy", no_cell)
    assert main(argv) == 0  # complete: resumed from the journal, nothing runs
    assert read_result(out / "results.json").report["detection"] == report["detection"]


class _Report:
    def __init__(self, verdict):
        failing = verdict == "fail"
        self.verdict, self.notes = verdict, ["API check: not offered by the engine, so not tested: min_tokens (x)"]
        self.tests = [SimpleNamespace(name="api/T=0.7/prompt0/logprobs_aligned", reject=failing, p_value=0.0 if failing else 1.0,
                                      details={"message": "16 tokens, 2 logprobs" if failing else ""})]
        self.cases = [{"name": "api/T=0.7/prompt0", "stop_requests": 5, "_api": object()}]


@pytest.fixture
def fake_llama(monkeypatch):
    state = {"started": [], "configs": []}

    @contextlib.contextmanager
    def server(*, draft, slots, ctx, log_path):
        state["started"].append((draft, slots))
        yield f"http://{'draft' if draft else 'off'}"

    def check(config):
        state["configs"].append(config)
        return _Report("fail" if config.endpoint == "http://draft" else "pass")

    monkeypatch.setattr(served, "llama_server", server)
    monkeypatch.setattr(served, "find_binary", lambda: Path("/fake/llama-server"))
    monkeypatch.setattr(served, "version", lambda binary: "fake 1")
    monkeypatch.setattr(served_check, "run_engine_check", check)
    return state


def test_the_llama_server_part_runs_each_side_through_the_native_route_and_a_fail_exits_1(fake_llama, tmp_path):
    from harness.served.api import N_CHOICES

    out = tmp_path / "api"
    argv = ["campaign", "api_semantics", "--parts", "llama_server", "--out", str(out)]
    assert main(argv) == 1  # the draft side FAILs: a finding
    assert fake_llama["started"] == [(False, N_CHOICES), (True, N_CHOICES)]  # n = N_CHOICES in one request
    assert {(c.api, c.concurrency, c.checks, c.api_length, c.api_seeds, c.prompts) for c in fake_llama["configs"]} \
        == {("llama-server", 1, ("api",), 16, 2, 1)}
    envelope = json.loads((out / "llama_server.json").read_text())
    assert envelope["kind"] == "finding.api_semantics_llama_server"
    results = envelope["report"]["results"]
    assert results["draft"]["verdict"] == "fail" and results["draft"]["rejected"] == ["logprobs_aligned"]
    assert results["off"]["verdict"] == "pass" and results["off"]["version"] == "fake 1"
    assert "not offered" in results["off"]["notes"][0] and "_api" not in results["off"]["cases"][0]
    assert len(results["off"]["load_at_start"]) == 3 and not (out / "results.json").exists()
    fake_llama["started"].clear()
    assert main(argv) == 1 and fake_llama["started"] == []  # resumed: no server


@pytest.mark.parametrize("flag", [["--parts", "sglang"], ["--seeds", "0"], ["--mutants", "nope"],
                                  ["--llama-sides", "on"], ["--pair", "smollm2"]])
def test_a_bad_setting_exits_2_before_any_cell(flag, tmp_path, capsys):
    assert main(["campaign", "api_semantics", "--out", str(tmp_path / "x"), *flag]) == 2
    assert not (tmp_path / "x" / "journal.jsonl").exists()
