"""suites.campaigns.llamacpp on the cell runner: every measurement is a journaled cell, a rerun runs none and
starts no server, a run cut by its budget resumes only the rest, --fresh runs all again (fake servers and
measurements: no llama-cpp-python)."""

from __future__ import annotations

import contextlib
import functools
import json

import pytest

from harness import executor
from suites.campaigns import llamacpp as campaign

GEN = ["generation/harness.adapters.llamacpp:prompt_lookup_generate/gamma=10/order=top_p_before_temperature",
       "generation/harness.adapters.llamacpp:no_verify_generate/gamma=10/order=top_p_before_temperature"]
KEYS = ["probe/on", "probe/off", *GEN, "check/T=1/n=20/length=3", "check/T=0.7,top_p=0.9/n=20/length=3",
        "greedy/tokens=24", "paired/seeds=5/length=3"]
ARGS = ["--samples", "20", "--length", "3", "--paired-seeds", "5"]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Fake servers and measurements; each measurement advances a fake clock by 10 s (the deadline's clock)."""
    monkeypatch.chdir(tmp_path)  # the probes also go to results/engine
    state = {"now": 0.0, "calls": [], "started": []}

    @contextlib.contextmanager
    def server(*, speculative):
        side = "on" if speculative else "off"
        state["started"].append(side)
        yield f"http://{side}"

    def measured(name):
        def fn(*args):
            state["now"] += 10
            state["calls"].append(name)
            return {"probe": lambda url: {"endpoint": url, "model": "m", "speculative": url.endswith("on"),
                                          "rows": [], "ground_truths": {}},
                    "generation": lambda impl, gamma: {
                        "verdict": "fail" if "no_verify" in impl else "pass", "samples": 2000, "detectable_tv": 0.047,
                        "tests": [{"p_value": 1e-9 if "no_verify" in impl else 0.4}],
                        "failure_summary": ["prompts/T=1: position 3 rejects"] if "no_verify" in impl else []},
                    "check": lambda on, off, setting, samples, length: {
                        "verdict": "pass", "samples": samples, "tests": [{"p_value": 0.5}], "detectable_tv": 0.2},
                    "greedy": lambda on, off, tokens: [{"prompt": "1, 2", "identical": True, "tokens": tokens,
                                                        "first_divergence": None}],
                    "paired": lambda on, off, seeds, tokens: 1.0}[name](*args)
        return fn

    monkeypatch.setattr(campaign, "llamacpp_server", server)
    for attr, name in (("_probe", "probe"), ("_generation_check", "generation"), ("_two_sample_check", "check"), ("_greedy_pairs", "greedy"),
                       ("_paired_identity", "paired")):
        monkeypatch.setattr(campaign, attr, measured(name))
    monkeypatch.setattr(campaign, "deadline", functools.partial(executor.deadline, clock=lambda: state["now"]))
    return state


def _keys(out) -> list[str]:
    return [json.loads(line)["key"] for line in (out / "journal.jsonl").read_text().splitlines()]


def test_llamacpp_cells_are_journaled_and_a_rerun_runs_none_and_starts_no_server(fake, tmp_path):
    out = tmp_path / "finding"
    assert campaign.main(["--out", str(out), *ARGS]) == 0
    assert _keys(out) == KEYS
    assert fake["calls"] == ["probe", "probe", "generation", "generation", "check", "check", "greedy", "paired"]
    assert sorted(fake["started"]) == ["off", "on"]
    finding = json.loads((out / "finding.json").read_text())["report"]
    assert [c["setting"] for c in finding["checks"]] == ["T=1", "T=0.7,top_p=0.9"] and finding["not_run"] == []
    assert finding["paired_same_seed_identical"] == 1.0 and set(finding["probe"]) == {"on", "off"}
    report = (out / "report.md").read_text()
    assert "| T=1 | **PASS** | 40 |" in report and "Not run" not in report
    assert "| shipped (`prompt_lookup_generate`) | **PASS** | 2000 | 1 | 0.4 | 0.0470 |" in report
    assert "| planted bug: drafts unverified (`no_verify_generate`) | **FAIL** |" in report
    assert "--impl harness.adapters.llamacpp:prompt_lookup_generate --pair smollm2 --gamma 10 " in report
    assert [g["name"] for g in finding["generation"]] == list(campaign.GENERATION_IMPLS)
    assert (tmp_path / "results/engine/probe-llamacpp-on.json").exists()
    first = (out / "report.md").read_text()
    fake["calls"].clear()
    fake["started"].clear()
    (out / "report.md").unlink()
    assert campaign.main(["--out", str(out), *ARGS]) == 0  # complete: the report again, from the journal only
    assert fake["calls"] == [] and fake["started"] == [] and _keys(out) == KEYS
    assert (out / "report.md").read_text() == first
    assert json.loads((out / "finding.json").read_text())["report"] == finding


def test_llamacpp_run_cut_by_its_budget_resumes_only_the_rest_and_fresh_runs_all(fake, tmp_path):
    out = tmp_path / "finding"
    assert campaign.main(["--out", str(out), *ARGS, "--budget-s", "45"]) == 0  # cut: exit 0, as engine/contexts
    assert _keys(out) == KEYS[:5] and fake["calls"] == ["probe", "probe", "generation", "generation", "check"]
    finding = json.loads((out / "finding.json").read_text())["report"]
    assert finding["not_run"] == KEYS[5:] and "greedy" not in finding
    report = (out / "report.md").read_text()
    assert "**Not run** (3 cells" in report and "`greedy/tokens=24`" in report
    fake["calls"].clear()
    fake["started"].clear()
    assert campaign.main(["--out", str(out), *ARGS]) == 0
    assert fake["calls"] == ["check", "greedy", "paired"] and _keys(out) == KEYS
    assert json.loads((out / "finding.json").read_text())["report"]["not_run"] == []
    fake["calls"].clear()
    fake["started"].clear()
    assert campaign.main(["--out", str(out), *ARGS, "--budget-s", "0"]) == 0  # nothing left: nothing starts
    assert fake["calls"] == [] and fake["started"] == []
    assert campaign.main(["--out", str(out), *ARGS, "--fresh"]) == 0
    assert fake["calls"] == ["probe", "probe", "generation", "generation", "check", "check", "greedy",
                             "paired"] and _keys(out) == KEYS
    assert sorted(fake["started"]) == ["off", "on"]


def test_llamacpp_probe_only_runs_the_probe_cells_and_starts_only_the_server_a_cell_needs(fake, tmp_path):
    out = tmp_path / "finding"
    assert campaign.main(["--out", str(out), "--probe-only", "--budget-s", "5"]) == 0  # one probe, then out of time
    assert _keys(out) == ["probe/on"] and fake["started"] == ["on"]
    assert campaign.main(["--out", str(out), "--probe-only"]) == 0
    assert _keys(out) == ["probe/on", "probe/off"] and fake["started"] == ["on", "off"]
    assert not (out / "report.md").exists() and (tmp_path / "results/engine/probe-llamacpp-off.txt").exists()


def test_llamacpp_two_sample_checks_are_judged_at_the_tv_bar(monkeypatch):
    """A two-sample cell whose detectable TV is above 0.05 is INCONCLUSIVE, never PASS: the bar reaches the check."""
    from harness.served import check

    seen = []

    class Report:
        def to_dict(self):
            return {"verdict": "inconclusive"}

    monkeypatch.setattr(check, "run_engine_check", lambda config: seen.append(config) or Report())
    assert campaign._two_sample_check("http://on", "http://off", {"temperature": 1.0}, 10, 4) == {"verdict": "inconclusive"}
    (config,) = seen
    assert config.inconclusive_tv == campaign.ENGINE_TV_BAR == 0.05 and config.ground_truth == "two-sample"


def test_llamacpp_generation_cells_start_no_server_and_run_the_one_driver(monkeypatch):
    """The generation-level cell is `specdec verify --level generation` on the adapter (run_verify), judged at the
    0.05 bar under llama.cpp's declared order, and touches no server."""
    from harness.check import api

    seen = []

    class Report:
        def to_dict(self):
            return {"verdict": "pass"}

    monkeypatch.setattr(api, "run_verify", lambda config: seen.append(config) or Report())

    class NoServers:
        def __getitem__(self, side):
            raise AssertionError(f"a generation cell started the {side} server")

    row = campaign.finding_cell(NoServers(), "generation", "shipped", campaign.GENERATION_IMPLS["shipped"], 10)
    assert row["generation"]["report"] == {"verdict": "pass"}
    (config,) = seen
    assert (config.level, config.pair, config.gamma, config.processing_order, config.inconclusive_tv) == (
        "generation", "smollm2", 10, "top_p_before_temperature", 0.05)
    assert config.impl == "harness.adapters.llamacpp:prompt_lookup_generate"


def test_llamacpp_ids_cells_run_the_pieces_client_on_the_f32_server_at_the_bar(monkeypatch, tmp_path):
    """`--ids`: one journaled cell per setting against one prompt-lookup server on the F32 GGUF; each is the
    engine check with ids from the server's pieces, the local target, llama.cpp's order and BOS biased out; a
    rerun runs none and starts no server; ids.md states each cell as measured."""
    from harness.models import gguf_f32
    from harness.served import check

    started, seen = [], []

    @contextlib.contextmanager
    def server(*, speculative, model=None):
        started.append((speculative, model))
        yield "http://on-f32"

    class Report:
        def __init__(self, config):
            self.config = config

        def to_dict(self):
            return {"verdict": "pass", "samples": self.config.samples, "detectable_tv": 0.0461,
                    "tests": [{"p_value": 0.3}], "notes": []}

    monkeypatch.setattr(campaign, "llamacpp_server", server)
    monkeypatch.setattr(gguf_f32, "smollm2_models", lambda: (tmp_path / "f32.gguf", tmp_path / "q4.gguf"))
    monkeypatch.setattr(check, "run_engine_check", lambda config: seen.append(config) or Report(config))
    assert campaign.main(["--ids", "--out", str(tmp_path)]) == 0
    assert started == [(True, str(tmp_path / "f32.gguf"))]
    assert len(seen) == 2
    for config in seen:
        assert (config.api, config.ground_truth, config.pair, config.processing_order, config.inconclusive_tv) == (
            "llama-cpp-python", "local", "smollm2", "top_p_before_temperature", 0.05)
        assert config.samples == 480 and config.length == 16 and config.chunk == 1
        assert config.extra_body["top_k"] == 0 and config.extra_body["min_p"] == 0.0
        assert all(dict(s.extras()["logit_bias"]) == {1: -100.0} for s in config.settings)
    md = (tmp_path / "ids.md").read_text()
    assert md.count("| **PASS** | 480 |") == 2 and "0.0461" in md
    assert campaign.main(["--ids", "--out", str(tmp_path)]) == 0  # resumed from the journal
    assert len(seen) == 2 and len(started) == 1
    # --control: the same two cells against the server without speculation, in a journal and report of their own
    assert campaign.main(["--ids", "--control", "--out", str(tmp_path)]) == 0
    assert started[1:] == [(False, str(tmp_path / "f32.gguf"))] and len(seen) == 4
    control = (tmp_path / "ids-control.md").read_text()
    assert "speculation off (control)" in control and control.count("| **PASS** | 480 |") == 2
    assert "prompt lookup on" in (tmp_path / "ids.md").read_text()
    with pytest.raises(SystemExit) as exc:
        campaign.main(["--control", "--out", str(tmp_path)])
    assert exc.value.code == 2
