"""suites.campaigns.llama_server on the cell runner: every measurement (probes, logprobs calibration and checks,
reproducers, same-seed requests, token-law runs, bench) is a journaled cell; a rerun runs none
and starts no server; a run cut by its budget resumes only the rest; --fresh runs all again (fake servers,
binary and engine checks: no llama-server)."""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path

import pytest

from harness import executor
from harness.served import llama_server as served
from suites.campaigns import llama_server as campaign

FIRST = ["binary", "probe/on/openai", "probe/on/llama-server", "probe/off/openai", "probe/off/llama-server",
         "calibration/raw/n=8", "calibration/processed/n=8"]
TOKENS = [f"tokens/{run[0]}/n=30/length={campaign.plan(run)[1]}" for run in campaign.TOKEN_RUNS]
LOGPROBS = [f"logprobs/{mode}/speculation-{side}/n=8/tol=0.08" for side in ("off", "on") for mode in ("raw", "processed")]
KEYS = [*FIRST, *LOGPROBS, "reproducer/on", "reproducer/off", "same-seed/n=16", *TOKENS, "bench"]


class FakeReport:
    def __init__(self, config):
        self.verdict, self.seconds, self.detectable_tv = "pass", 1.0, 0.1
        name = "T=1"
        self.cases = [{"name": name, "samples": config.samples, "compared": 4, "bad_sampled": 0, "bad_top": 0,
                       "max_abs_diff": 0.02, "p99_abs_diff": 0.01, "tokens": 40, "consistent_conventions": None}]
        self.tests = [{"name": f"{name}/pit_uniform", "p_value": 0.5, "detectable_tv": 0.1, "reject": False}]
        self.samples = config.samples

    def to_dict(self):
        return {"verdict": self.verdict, "samples": self.samples, "detectable_tv": self.detectable_tv,
                "seconds": self.seconds, "notes": [], "failure_summary": None, "declared_tests": 1,
                "cases": self.cases, "tests": self.tests}


@pytest.fixture
def fake(monkeypatch):
    """Fake binary, servers and measurements; each measurement advances the deadline's clock by 10 s."""
    state = {"now": 0.0, "calls": [], "started": []}

    @contextlib.contextmanager
    def server(*, draft, slots, log_path):
        side = "on" if draft else "off"
        state["started"].append(side)
        yield f"http://{side}"

    def measured(name, fn):
        def call(*args, **kwargs):
            state["now"] += 10
            state["calls"].append(name(*args, **kwargs) if callable(name) else name)
            return fn(*args, **kwargs)
        return call

    monkeypatch.setattr(served, "llama_server", server)
    monkeypatch.setattr(served, "build_llama_server", lambda: Path("/fake/llama-server"))
    monkeypatch.setattr(served, "version", measured("version", lambda binary: "fake 1"))
    monkeypatch.setattr(campaign, "_check", measured(
        lambda config: "tokens" if config.checks != ("logprobs",) else f"logprobs@{config.endpoint}", FakeReport))
    monkeypatch.setattr(campaign, "_probe", measured("probe", lambda url, api: {
        "endpoint": url, "model": "m", "api": api, "speculative": None, "rows": [], "ground_truths": {}}))
    monkeypatch.setattr(campaign, "_prompt_ids", lambda: [1, 2, 3])
    monkeypatch.setattr(campaign, "reproducer", measured("reproducer", lambda url, ids: {
        "request": {"route": "POST /completion", "body": {}}, "tokens": [4, 5],
        "completion_probabilities": [{"id": 4, "logprob": -1.0, "top_logprobs": [[4, -1.0]]}]}))
    monkeypatch.setattr(campaign, "same_seed_identity", measured("same-seed", lambda on, off, ids, seeds: {
        "requests": seeds, "identical": seeds, "tokens": 16, "setting": "T=1, truncation off"}))
    monkeypatch.setattr(campaign, "_bench", measured("bench", lambda on, off, out, quick: 0))
    monkeypatch.setattr(campaign, "deadline", functools.partial(executor.deadline, clock=lambda: state["now"]))
    monkeypatch.setattr(campaign.os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # the README states it
    return state


def _keys(out) -> list[str]:
    return [json.loads(line)["key"] for line in (out / "journal.jsonl").read_text().splitlines()]


EVERY_CALL = ["version", *["probe"] * 4, *["logprobs@http://off"] * 2, *["logprobs@http://off"] * 2,
              *["logprobs@http://on"] * 2, "reproducer", "reproducer", "same-seed", *["tokens"] * 4, "bench"]


def test_llama_server_cells_are_journaled_and_a_rerun_runs_none_and_starts_no_server(fake, tmp_path, monkeypatch):
    out = tmp_path / "finding"
    assert campaign.main(["--out", str(out), "--samples", "30"]) == 0
    assert _keys(out) == KEYS and fake["calls"] == EVERY_CALL
    assert sorted(fake["started"]) == ["off", "on"]
    finding = json.loads((out / "finding.json").read_text())["report"]
    assert finding["tolerance_nats"] == 0.08 and finding["version"] == "fake 1" and finding["not_run"] == []
    assert list(finding["checks"]) == [f"logprobs/{m}/speculation-{s}" for s in ("off", "on") for m in ("raw", "processed")] \
        + [f"tokens/{run[0]}" for run in campaign.TOKEN_RUNS]
    readme = (out / "README.md").read_text()
    assert "Logprobs tolerance: 0.08 nats" in readme and "(exit 0)" in readme and "Not run" not in readme
    fake["calls"].clear()
    fake["started"].clear()
    (out / "README.md").unlink()
    monkeypatch.setattr(campaign.os, "getloadavg", lambda: (9.0, 9.0, 9.0))  # the rerun's load is not the measurement's
    assert campaign.main(["--out", str(out), "--samples", "30"]) == 0  # complete: README again, no engine
    assert fake["calls"] == [] and fake["started"] == [] and _keys(out) == KEYS
    assert (out / "README.md").read_text() == readme
    assert json.loads((out / "finding.json").read_text())["report"] == finding
    assert finding["load_at_start"] == finding["load_at_end"] == [1.0, 1.0, 1.0]


def test_llama_server_run_cut_by_its_budget_resumes_only_the_rest_and_fresh_runs_all(fake, tmp_path):
    out = tmp_path / "finding"
    assert campaign.main(["--out", str(out), "--samples", "30", "--budget-s", "55"]) == 0  # 6 cells, then out of time
    assert _keys(out) == KEYS[:6] and fake["calls"] == EVERY_CALL[:6]
    finding = json.loads((out / "finding.json").read_text())["report"]
    assert "tolerance_nats" not in finding and finding["checks"] == {}  # the calibration was cut: no tolerance
    assert finding["not_run"][:1] == ["calibration/processed/n=8"] and len(finding["not_run"]) == len(KEYS) - 6
    assert "**Not run** (13 cells" in (out / "README.md").read_text()
    fake["calls"].clear()
    assert campaign.main(["--out", str(out), "--samples", "30"]) == 0
    assert fake["calls"] == EVERY_CALL[6:] and _keys(out) == KEYS
    assert json.loads((out / "finding.json").read_text())["report"]["not_run"] == []
    fake["calls"].clear()
    fake["started"].clear()
    assert campaign.main(["--out", str(out), "--samples", "30", "--fresh"]) == 0
    assert fake["calls"] == EVERY_CALL and _keys(out) == KEYS and sorted(fake["started"]) == ["off", "on"]


def test_llama_server_runs_expected_to_pass_are_at_the_power_plan_and_every_token_run_has_the_bar(fake, tmp_path,
                                                                                                  monkeypatch):
    """The declared-convention and truncation-off runs (T = 0.7 and T = 1 cells) run at 480 × 16 tokens, the
    undeclared diagnosis at 200 × 4; every token-law check is judged at --inconclusive-tv 0.05; the README states
    each cell's detectable TV against the bar (measured, no projection)."""
    configs = []
    checked = campaign._check

    def spy(config):
        configs.append(config)
        return checked(config)

    monkeypatch.setattr(campaign, "_check", spy)
    out = tmp_path / "finding"
    assert campaign.main(["--out", str(out)]) == 0
    tokens = [c for c in configs if c.checks != ("logprobs",)]
    plans = {(tuple(s.label for s in c.settings), c.samples, c.length, c.processing_order) for c in tokens}
    assert plans == {(("T=0", "T=0.7", "T=1"), 200, 4, "standard"), (("T=0.7", "T=1"), 480, 16, "llama_cpp"),
                     (("T=1",), 480, 16, "standard"), (("T=1",), 480, 16, "llama_cpp")}
    assert {c.inconclusive_tv for c in tokens} == {campaign.ENGINE_TV_BAR} == {0.05}
    finding = json.loads((out / "finding.json").read_text())["report"]
    assert finding["tv_bar"] == 0.05 and finding["plans"][campaign.TOKEN_RUNS[1][0]] == {"samples": 480, "length": 16}
    readme = (out / "README.md").read_text()
    assert "Power: 0 of 4 sampling cells reached detectable TV ≤ 0.05" in readme  # the fake reports 0.1 per cell
    assert "not run (a projection" not in readme and "480 × 16" in readme


def test_llama_server_fresh_forgets_the_kept_responses_too(fake, tmp_path):
    out = tmp_path / "finding"
    (out / "responses").mkdir(parents=True)
    (out / "responses" / "engine-old.jsonl").write_text("{}\n")
    assert campaign.main(["--out", str(out), "--samples", "30"]) == 0
    assert (out / "responses" / "engine-old.jsonl").exists()  # a plain rerun resumes them
    assert campaign.main(["--out", str(out), "--samples", "30", "--fresh"]) == 0
    assert not (out / "responses" / "engine-old.jsonl").exists()
