"""suites.campaigns.llamacpp on the campaign runner (`specdec campaign llamacpp`), with fake servers and
measurements (no llama-cpp-python): the cells run against servers started only when a cell needs one, a rerun
resumes (no cell, no server), a run cut by its budget names what it did not run, the report and the exit code
follow the verdicts, and a bad setting exits 2 before any server starts."""

from __future__ import annotations

import contextlib
import functools
import json

import pytest

from harness import executor, runner
from harness.cli import main
from suites.campaigns import llamacpp as campaign

SMALL = ["--samples", "20", "--length", "3", "--paired-seeds", "5"]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Fake servers and measurements; each measurement advances a fake clock (the runner's deadline) by 10 s.
    `verdicts` sets a generation implementation's or a two-sample setting's verdict."""
    state = {"now": 0.0, "calls": [], "started": [], "verdicts": {}}

    @contextlib.contextmanager
    def server(*, speculative, model=None):
        side = ("on" if speculative else "off") + ("-f32" if model else "")
        state["started"].append(side)
        yield f"http://{side}"

    def measured(name, fn):
        def call(*args):
            state["now"] += 10
            state["calls"].append(name)
            return fn(*args)
        return call

    def generation(impl, gamma):
        verdict = state["verdicts"].get(impl, "fail" if "no_verify" in impl else "pass")
        return {"verdict": verdict, "samples": 2000, "detectable_tv": 0.047,
                "tests": [{"p_value": 1e-9 if verdict == "fail" else 0.4}],
                "failure_summary": ["prompts/T=1: position 3 rejects"] if verdict == "fail" else []}

    def check(on, off, setting, samples, length):
        verdict = state["verdicts"].get(setting.get("temperature"), "pass")
        return {"verdict": verdict, "samples": samples, "tests": [{"p_value": 0.5}], "detectable_tv": 0.2,
                "urls": [on, off]}

    monkeypatch.setattr(campaign, "llamacpp_server", server)
    monkeypatch.setattr(campaign, "_probe", measured("probe", lambda url: {
        "endpoint": url, "model": "m", "speculative": url.endswith("on"), "rows": [], "ground_truths": {}}))
    monkeypatch.setattr(campaign, "_generation_check", measured("generation", generation))
    monkeypatch.setattr(campaign, "_two_sample_check", measured("check", check))
    monkeypatch.setattr(campaign, "_greedy_pairs", measured("greedy", lambda on, off, tokens: [
        {"prompt": "1, 2", "identical": True, "tokens": tokens, "first_divergence": None}]))
    monkeypatch.setattr(campaign, "_paired_identity", measured("paired", lambda on, off, seeds, tokens: 1.0))
    monkeypatch.setattr(runner, "deadline", functools.partial(executor.deadline, clock=lambda: state["now"]))
    monkeypatch.setattr(campaign.os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # the report states it
    return state


def _finding(out) -> dict:
    return json.loads((out / "finding.json").read_text())


def test_the_finding_runs_its_cells_against_both_servers_and_a_rerun_resumes(fake, tmp_path):
    out = tmp_path / "finding"
    assert main(["campaign", "llamacpp", "--out", str(out), *SMALL]) == 0
    assert sorted(fake["started"]) == ["off", "on"]  # the Q4_1 pair; the F32 server is for --ids only
    assert sorted(set(fake["calls"])) == ["check", "generation", "greedy", "paired", "probe"]
    envelope = _finding(out)
    finding = envelope["report"]
    assert envelope["kind"] == "campaign.llamacpp.finding" and envelope["provenance"]["git_commit"]
    assert envelope["config"]["samples"] == 20 and finding["not_run"] == []
    assert {c["setting"] for c in finding["checks"]} == {"T=1", "T=0.7,top_p=0.9"}
    assert all(c["report"]["urls"] == ["http://on", "http://off"] for c in finding["checks"])
    assert finding["paired_same_seed_identical"] == 1.0 and set(finding["probe"]) == {"on", "off"}
    report = (out / "report.md").read_text()
    assert "| T=1 | **PASS** | 40 |" in report and "Not run" not in report  # both endpoints' samples
    assert "| planted bug: drafts unverified (`no_verify_generate`) | **FAIL** |" in report
    assert f"specdec campaign llamacpp --samples 20 --length 3 --paired-seeds 5 --out {out}" in report
    assert (out / "probe-llamacpp-on.json").exists() and (out / "probe-llamacpp-off.txt").exists()
    (out / "report.md").unlink()
    fake["calls"].clear()
    fake["started"].clear()
    assert main(["campaign", "llamacpp", "--out", str(out), *SMALL]) == 0  # complete: the report from the journal
    assert fake["calls"] == [] and fake["started"] == []
    assert (out / "report.md").read_text() == report and _finding(out)["report"]["checks"] == finding["checks"]


def test_a_run_cut_by_its_budget_names_the_cells_not_run_and_the_rerun_runs_only_those(fake, tmp_path):
    out = tmp_path / "finding"
    assert main(["campaign", "llamacpp", "--out", str(out), *SMALL, "--budget-s", "25"]) == 2  # 3 cells, then out
    first = list(fake["calls"])
    not_run = _finding(out)["report"]["not_run"]
    assert len(first) == 3 and len(not_run) == len(campaign.cells(campaign.Config(samples=20, length=3, paired_seeds=5))) - 3
    assert f"**Not run** ({len(not_run)} cells" in (out / "report.md").read_text()
    fake["calls"].clear()
    assert main(["campaign", "llamacpp", "--out", str(out), *SMALL]) == 0
    assert len(fake["calls"]) == len(not_run) and _finding(out)["report"]["not_run"] == []
    fake["calls"].clear()
    assert main(["campaign", "llamacpp", "--out", str(out), *SMALL, "--fresh"]) == 0  # every cell again
    assert len(fake["calls"]) == len(first) + len(not_run)


def test_the_exit_code_is_1_when_llamacpp_fails_and_2_when_the_planted_bug_passes(fake, tmp_path, capsys):
    fake["verdicts"][1.0] = "fail"  # the two-sample check at T = 1
    assert main(["campaign", "llamacpp", "--out", str(tmp_path / "a"), *SMALL]) == 1
    assert "| T=1 | **FAIL** |" in (tmp_path / "a" / "report.md").read_text()
    fake["verdicts"] = {campaign.GENERATION_IMPLS["planted bug: drafts unverified"]: "pass"}
    assert main(["campaign", "llamacpp", "--out", str(tmp_path / "b"), *SMALL]) == 2
    assert "planted bug" in capsys.readouterr().err and (tmp_path / "b" / "report.md").exists()


@pytest.mark.parametrize("argv, says", [(["--control"], "--control goes with --ids"),
                                        (["--samples", "0"], "must be >= 1"),
                                        (["--ids", "--probe-only"], "two runs")])
def test_a_bad_setting_exits_2_before_any_server_starts(fake, tmp_path, capsys, argv, says):
    assert main(["campaign", "llamacpp", "--out", str(tmp_path), *argv]) == 2
    assert says in capsys.readouterr().err
    assert fake["started"] == [] and fake["calls"] == [] and not (tmp_path / "journal.jsonl").exists()


def test_probe_only_runs_the_probes_and_starts_only_the_server_a_cell_needs(fake, tmp_path):
    out = tmp_path / "finding"
    assert main(["campaign", "llamacpp", "--out", str(out), "--probe-only", "--budget-s", "5"]) == 2  # one probe
    assert fake["calls"] == ["probe"] and len(fake["started"]) == 1
    assert main(["campaign", "llamacpp", "--out", str(out), "--probe-only"]) == 0
    assert fake["calls"] == ["probe", "probe"] and sorted(fake["started"]) == ["off", "on"]
    assert not (out / "report.md").exists() and (out / "probe-llamacpp-off.txt").exists()


def test_ids_checks_run_the_pieces_client_on_the_f32_servers_in_the_one_journal(fake, monkeypatch, tmp_path):
    """`--ids`: one cell per setting against the prompt-lookup server on the F32 GGUF; each is the engine check with
    ids from the server's pieces, the local target, llama.cpp's order and BOS biased out, judged at the bar;
    `--ids --control` the same against the server without speculation; both modes and the finding share
    OUT/journal.jsonl (a rerun starts nothing), and --fresh also forgets the kept responses."""
    from harness.models import gguf_f32
    from harness.served import check

    seen = []

    class Report:
        def __init__(self, config):
            self.config = config

        def to_dict(self):
            return {"verdict": "pass", "samples": self.config.samples, "detectable_tv": 0.0461,
                    "tests": [{"p_value": 0.3}], "notes": []}

    monkeypatch.setattr(gguf_f32, "smollm2_models", lambda: (tmp_path / "f32.gguf", tmp_path / "q4.gguf"))
    monkeypatch.setattr(check, "run_engine_check", lambda config: seen.append(config) or Report(config))
    out = tmp_path / "finding"
    assert main(["campaign", "llamacpp", "--ids", "--out", str(out)]) == 0
    assert fake["started"] == ["on-f32"] and len(seen) == 2
    for config in seen:
        assert (config.api, config.ground_truth, config.pair, config.processing_order, config.inconclusive_tv) == (
            "llama-cpp-python", "local", "smollm2", "top_p_before_temperature", 0.05)
        assert config.samples == 480 and config.length == 16 and config.out == str(out / "responses")
        assert config.extra_body["top_k"] == 0 and all(dict(s.extras()["logit_bias"]) == {1: -100.0}
                                                       for s in config.settings)
    md = (out / "ids.md").read_text()
    assert md.count("| **PASS** | 480 |") == 2 and "prompt lookup on" in md
    assert json.loads((out / "ids.json").read_text())["kind"] == "campaign.llamacpp.ids"
    assert main(["campaign", "llamacpp", "--ids", "--out", str(out)]) == 0  # resumed
    assert len(seen) == 2 and fake["started"] == ["on-f32"]
    assert main(["campaign", "llamacpp", "--ids", "--control", "--out", str(out)]) == 0
    assert fake["started"] == ["on-f32", "off-f32"] and len(seen) == 4
    assert "speculation off (control)" in (out / "ids-control.md").read_text()
    assert main(["campaign", "llamacpp", "--out", str(out), *SMALL]) == 0  # the finding beside them
    keys = [json.loads(line)["key"] for line in (out / "journal.jsonl").read_text().splitlines()]
    assert sum(k.startswith("ids/") for k in keys) == 2 and sum(k.startswith("ids-off/") for k in keys) == 2
    (out / "responses").mkdir()
    (out / "responses" / "kept.jsonl").write_text("{}\n")
    assert main(["campaign", "llamacpp", "--ids", "--out", str(out), "--fresh"]) == 0
    assert len(seen) == 6 and not (out / "responses" / "kept.jsonl").exists()


def test_the_two_sample_checks_are_judged_at_the_tv_bar(monkeypatch):
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


def test_the_generation_check_is_the_one_driver_under_llamacpps_order(monkeypatch):
    """The generation-level cell is `specdec verify --level generation` on the adapter (run_verify), judged at the
    0.05 bar under llama.cpp's declared order."""
    from harness.check import api

    seen = []

    class Report:
        def to_dict(self):
            return {"verdict": "pass"}

    monkeypatch.setattr(api, "run_verify", lambda config: seen.append(config) or Report())
    assert campaign._generation_check(campaign.GENERATION_IMPLS["shipped"], 10) == {"verdict": "pass"}
    (config,) = seen
    assert (config.level, config.pair, config.gamma, config.processing_order, config.inconclusive_tv) == (
        "generation", "smollm2", 10, "top_p_before_temperature", 0.05)
    assert config.impl == "harness.adapters.llamacpp:prompt_lookup_generate"
