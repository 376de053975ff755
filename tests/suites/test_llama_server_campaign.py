"""suites.campaigns.llama_server on the campaign runner (`specdec campaign llama_server`), with a fake binary,
fake servers and fake engine checks (no llama-server): the cells run against servers started only when a cell needs
one, a rerun resumes (no cell, no server), a run cut by its budget names what it did not run, --fresh forgets the
kept responses too, the exit code follows the verdicts, --build-only only builds, a bad setting exits 2 first."""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path

import pytest

from harness import executor, runner
from harness.cli import main
from harness.served import llama_server as served
from suites.campaigns import llama_server as campaign


class FakeReport:
    def __init__(self, config, verdict="pass"):
        self.verdict, self.seconds, self.detectable_tv = verdict, 1.0, 0.1
        name = "T=1"
        self.cases = [{"name": name, "samples": config.samples, "compared": 4, "bad_sampled": 0, "bad_top": 0,
                       "max_abs_diff": 0.02, "p99_abs_diff": 0.01, "tokens": 40, "consistent_conventions": None}]
        self.tests = [{"name": f"{name}/pit_uniform", "p_value": 0.5, "detectable_tv": 0.1,
                       "reject": verdict == "fail"}]
        self.samples = config.samples

    def to_dict(self):
        return {"verdict": self.verdict, "samples": self.samples, "detectable_tv": self.detectable_tv,
                "seconds": self.seconds, "notes": [], "failure_summary": None, "declared_tests": 1,
                "cases": self.cases, "tests": self.tests}


@pytest.fixture
def fake(monkeypatch):
    """Fake binary, servers and measurements; each measurement advances the runner's deadline clock by 10 s.
    `fails(config)` says which engine checks FAIL (none by default)."""
    state = {"now": 0.0, "calls": [], "started": [], "builds": 0, "configs": [], "fails": lambda config: False}

    @contextlib.contextmanager
    def server(*, draft, slots, log_path):
        side = "on" if draft else "off"
        state["started"].append(side)
        yield f"http://{side}"

    def build():
        state["builds"] += 1
        return Path("/fake/llama-server")

    def measured(name, fn):
        def call(*args, **kwargs):
            state["now"] += 10
            state["calls"].append(name)
            return fn(*args, **kwargs)
        return call

    def check(config):
        state["configs"].append(config)
        return FakeReport(config, "fail" if state["fails"](config) else "pass")

    monkeypatch.setattr(served, "llama_server", server)
    monkeypatch.setattr(served, "build_llama_server", build)
    monkeypatch.setattr(served, "version", measured("binary", lambda binary: "fake 1"))
    monkeypatch.setattr(campaign, "_check", measured("check", check))
    monkeypatch.setattr(campaign, "_probe", measured("probe", lambda url, api: {
        "endpoint": url, "model": "m", "api": api, "speculative": None, "rows": [], "ground_truths": {}}))
    monkeypatch.setattr(campaign, "_prompt_ids", lambda: [1, 2, 3])
    monkeypatch.setattr(campaign, "reproducer", measured("reproducer", lambda url, ids: {
        "request": {"route": "POST /completion", "body": {}}, "tokens": [4, 5],
        "completion_probabilities": [{"id": 4, "logprob": -1.0, "top_logprobs": [[4, -1.0]]}]}))
    monkeypatch.setattr(campaign, "same_seed_identity", measured("same-seed", lambda on, off, ids, seeds: {
        "requests": seeds, "identical": seeds, "tokens": 16, "setting": "T=1, truncation off"}))
    monkeypatch.setattr(campaign, "_bench", measured("bench", lambda on, off, out, quick: 0))
    monkeypatch.setattr(runner, "deadline", functools.partial(executor.deadline, clock=lambda: state["now"]))
    monkeypatch.setattr(campaign.os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # the README states it
    return state


def _finding(out) -> dict:
    return json.loads((out / "finding.json").read_text())


def test_the_finding_runs_its_cells_against_both_servers_and_a_rerun_resumes(fake, tmp_path, monkeypatch):
    out = tmp_path / "finding"
    assert main(["campaign", "llama_server", "--out", str(out), "--samples", "30"]) == 0
    assert sorted(fake["started"]) == ["off", "on"] and fake["builds"] >= 1
    # 2 calibrations + 4 logprobs checks + 4 token-law runs, each an engine check
    assert fake["calls"].count("check") == 10 and fake["calls"].count("probe") == 4
    envelope = _finding(out)
    finding = envelope["report"]
    assert envelope["kind"] == "campaign.llama_server" and envelope["provenance"]["dtype"] == "not recorded"
    assert finding["tolerance_nats"] == 0.08 and finding["version"] == "fake 1" and finding["not_run"] == []
    calibration = [c for c in fake["configs"] if c.checks == ("logprobs",) and c.logprob_tolerance == float("inf")]
    assert len(calibration) == 2 and {c.endpoint for c in calibration} == {"http://off"} and {c.seed for c in calibration} == {1}
    checks = [c for c in fake["configs"] if c.checks == ("logprobs",) and c not in calibration]
    assert {(c.endpoint, c.logprob_tolerance, c.seed) for c in checks} == {("http://on", 0.08, 0), ("http://off", 0.08, 0)}
    readme = (out / "README.md").read_text()
    assert "Logprobs tolerance: 0.08 nats" in readme and "(exit 0)" in readme and "Not run" not in readme
    assert f"specdec campaign llama_server --samples 30 --out {out}" in readme
    fake["calls"].clear()
    fake["started"].clear()
    (out / "README.md").unlink()
    monkeypatch.setattr(campaign.os, "getloadavg", lambda: (9.0, 9.0, 9.0))  # the rerun's load is not the measurement's
    assert main(["campaign", "llama_server", "--out", str(out), "--samples", "30"]) == 0  # complete: no engine
    assert fake["calls"] == [] and fake["started"] == []
    assert (out / "README.md").read_text() == readme
    assert _finding(out)["report"]["load_at_end"] == finding["load_at_end"] == [1.0, 1.0, 1.0]


def test_a_run_cut_by_its_budget_names_the_cells_not_run_and_fresh_forgets_the_kept_responses(fake, tmp_path):
    out = tmp_path / "finding"
    assert main(["campaign", "llama_server", "--out", str(out), "--samples", "30", "--budget-s", "35"]) == 2
    finding = _finding(out)["report"]  # the binary and 3 probes, then out of time
    assert finding["checks"] == {} and "tolerance_nats" not in finding and len(fake["calls"]) == 4
    assert finding["not_run"][0] == "probe/off/llama-server"
    assert f"**Not run** ({len(finding['not_run'])} cells" in (out / "README.md").read_text()
    fake["calls"].clear()
    assert main(["campaign", "llama_server", "--out", str(out), "--samples", "30"]) == 0
    assert "binary" not in fake["calls"] and fake["calls"].count("probe") == 1
    assert _finding(out)["report"]["not_run"] == []
    (out / "responses").mkdir()
    (out / "responses" / "engine-old.jsonl").write_text("{}\n")
    fake["calls"].clear()
    assert main(["campaign", "llama_server", "--out", str(out), "--samples", "30"]) == 0
    assert fake["calls"] == [] and (out / "responses" / "engine-old.jsonl").exists()  # a plain rerun keeps them
    assert main(["campaign", "llama_server", "--out", str(out), "--samples", "30", "--fresh"]) == 0
    assert fake["calls"].count("check") == 10 and not (out / "responses" / "engine-old.jsonl").exists()


def test_the_exit_code_is_1_when_llama_server_fails_but_not_for_the_undeclared_diagnosis(fake, tmp_path):
    fake["fails"] = lambda config: config.checks != ("logprobs",) and config.processing_order == "standard" \
        and config.extra_body is None  # the undeclared convention only: FAILs by design
    assert main(["campaign", "llama_server", "--out", str(tmp_path / "a"), "--samples", "30"]) == 0
    assert "Sampler chain undeclared: **FAIL**" in (tmp_path / "a" / "README.md").read_text()
    fake["fails"] = lambda config: config.checks == ("logprobs",) and config.endpoint == "http://on" \
        and config.logprob_tolerance != float("inf")  # wrong logprobs with speculation on
    assert main(["campaign", "llama_server", "--out", str(tmp_path / "b"), "--samples", "30"]) == 1
    assert "speculation on **FAIL**" in (tmp_path / "b" / "README.md").read_text()


def test_build_only_builds_every_time_and_measures_nothing(fake, tmp_path, capsys):
    out = tmp_path / "finding"
    for _ in range(2):  # unjournaled: a second run builds (or finds) it again
        assert main(["campaign", "llama_server", "--out", str(out), "--build-only"]) == 0
        assert capsys.readouterr().out.strip().splitlines()[-1] == "/fake/llama-server"
    assert fake["builds"] == 2 and fake["started"] == [] and fake["calls"] == ["binary", "binary"]
    assert not (out / "journal.jsonl").exists() and not (out / "finding.json").exists()


def test_a_bad_setting_exits_2_before_any_cell_runs(fake, tmp_path, capsys):
    assert main(["campaign", "llama_server", "--out", str(tmp_path), "--samples", "0"]) == 2
    assert "--samples must be >= 1" in capsys.readouterr().err
    assert fake["calls"] == [] and fake["started"] == [] and fake["builds"] == 0


def test_runs_expected_to_pass_are_at_the_power_plan_and_every_token_run_has_the_bar(fake, tmp_path):
    """The declared-convention and truncation-off runs (T = 0.7 and T = 1 cells) run at 480 × 16 tokens, the
    undeclared diagnosis at 200 × 4; every token-law check is judged at --inconclusive-tv 0.05; the README states
    each cell's detectable TV against the bar (measured, no projection)."""
    out = tmp_path / "finding"
    assert main(["campaign", "llama_server", "--out", str(out)]) == 0
    tokens = [c for c in fake["configs"] if c.checks != ("logprobs",)]
    plans = {(tuple(s.label for s in c.settings), c.samples, c.length, c.processing_order) for c in tokens}
    assert plans == {(("T=0", "T=0.7", "T=1"), 200, 4, "standard"), (("T=0.7", "T=1"), 480, 16, "llama_cpp"),
                     (("T=1",), 480, 16, "standard"), (("T=1",), 480, 16, "llama_cpp")}
    assert {c.inconclusive_tv for c in tokens} == {campaign.ENGINE_TV_BAR} == {0.05}
    finding = _finding(out)["report"]
    assert finding["tv_bar"] == 0.05 and finding["plans"][campaign.TOKEN_RUNS[1][0]] == {"samples": 480, "length": 16}
    readme = (out / "README.md").read_text()
    assert "Power: 0 of 4 sampling cells reached detectable TV ≤ 0.05" in readme  # the fake reports 0.1 per cell
    assert "480 × 16" in readme
