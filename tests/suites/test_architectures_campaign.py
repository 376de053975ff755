"""The architectures campaign on the campaign runner: every run a journaled cell (a rerun resumes, more seeds run on
top), the README's tables from every row of the journal (one row per family, the last run per seed), the exit code
from this command's runs, bad settings refused before any run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.runner import JOURNAL, run
from suites.campaigns import architectures
from suites.campaigns.architectures import readme
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
    assert [r[0] for r in architectures.family_rows(rows)] == list(FAMILIES)
    assert architectures.mutant_rows(rows) == [["m", "arch-ssm", "1/2", "5"]]  # seed 0's last run, seed 1
    swa = next(r for r in architectures.family_rows(rows) if r[0] == "arch-swa")
    assert swa[4] == "['T=0'], planned: FAIL (9 s, TV -): greedy / diverges"  # a bar in a message: not a cell end


def test_the_reference_column_keeps_one_run_per_seed_and_plan(tmp_path: Path):
    """Seed 0 at the default plan and seed 0 at ['T=1'], 3000 are two runs: neither hides the other (the report
    once keyed runs by seed alone, and a later run at another plan replaced the default-plan PASS)."""
    ref = dict(part="reference", pair="arch-ssm", seed=0, verdict="pass", seconds=1.0, time_budget_s=None)
    rows = [{**ref, "settings": "default", "samples_requested": None, "seconds": 2877.0},
            {**ref, "settings": ["T=1"], "samples_requested": 3000, "contexts": "none"}]
    reference = next(r for r in architectures.family_rows(rows) if r[0] == "arch-ssm")[3]
    assert reference == ("2 runs, 0 FAIL; default, planned: PASS (2877 s, TV -); ['T=1'], 3000, contexts none: PASS "
                         "(1 s, TV -)")


def test_reference_runs_are_counted_as_false_alarm_trials_per_plan(tmp_path: Path):
    ref = dict(part="reference", pair="arch-ssm", settings=["T=1"], samples_requested=300, time_budget_s=None,
               seconds=1.0, declared_tests=40)
    rows = [{**ref, "seed": 0, "verdict": "pass", "family_p": 0.5},
            {**ref, "seed": 1, "verdict": "pass", "family_p": 0.01},
            {**ref, "seed": 1, "verdict": "fail", "family_p": 1e-4},  # a rerun of seed 1: the last counts
            {**ref, "seed": 2, "verdict": "pass", "family_p": 1.0, "samples_requested": None}]  # another plan
    assert architectures.false_alarm_rows(rows) == [
        ["arch-ssm", "['T=1'], 300", "2 (0–1)", "1/2 (1.3%–98.7%)", "1/2", "40", "2.5e-05"],
        ["arch-ssm", "['T=1'], planned", "1 (2–2)", "0/1 (0.0%–97.5%)", "0/1", "40", "2.5e-05"]]
    more = rows + [{**ref, "pair": "arch-swa", "seed": 0, "verdict": "pass", "family_p": 0.9}]
    pooled = [r for r in architectures.false_alarm_rows(more) if r[0] == "all families"]
    assert pooled == [["all families", "['T=1'], 300", "3 (0–1)", "1/3 (0.8%–90.6%)", "1/3", "40", "2.5e-05"]]  # one
    #   family only at the planned plan: nothing to pool
    assert "| all families | ['T=1'], 300 | 3 (0–1) |" in readme(more, tmp_path)


def _stub_verify(verdicts: dict, calls: list):
    """`specdec verify` replaced by a stub (every real run takes minutes on CPU): the verdict by implementation."""

    def verify(impl, pair, *, seed, samples, time_budget, settings=None, contexts=None):
        calls.append((impl, pair, seed))
        return {"impl": impl, "pair": pair, "seed": seed, "samples_requested": samples, "time_budget_s": time_budget,
                "settings": settings or "default", **({"contexts": contexts} if contexts else {}),
                "verdict": verdicts.get(impl, "pass"), "seconds": 1.0,
                "declared_tests": 40, "family_p": 0.5, "detectable_tv": 0.1}
    return verify


@pytest.mark.end_to_end
def test_runs_are_journaled_a_rerun_adds_seeds_and_the_exit_code_is_this_commands(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(architectures, "_verify", _stub_verify({architectures.REFERENCE: "pass"}, calls))
    mutant = "recurrent_state_not_rolled_back"
    argv = ["--parts", "mutants,reference", "--pairs", "arch-ssm", "--mutants", mutant, "--setting", "T=1",
            "--samples", "300", "--out", str(tmp_path)]
    assert run("architectures", argv) == 0  # the stub passes the mutant: at a T = 1 plan measured, not gated
    assert len(calls) == 2
    assert run("architectures", [*argv, "--seeds", "2"]) == 0
    assert len(calls) == 4  # seed 0 resumed, seed 1 of each ran
    assert run("architectures", [*argv, "--first-seed", "1", "--report-only"]) == 0
    assert len(calls) == 4
    record = json.loads((tmp_path / "campaign.json").read_text())
    assert record["kind"] == "campaign.architectures" and len(record["rows"]) == 4
    assert all(r["versions"]["torch"] for r in record["rows"])
    rows = json.loads((tmp_path / "campaign.json").read_text())["rows"]
    assert architectures.other_plan_rows(rows)[0][:4] == [mutant, "arch-ssm", "['T=1'], 300, ≤ 300 s", "0/2"]
    assert architectures.false_alarm_rows(rows)[0][:4] == ["arch-ssm", "['T=1'], 300, ≤ 300 s", "2 (0–1)",
                                                            "0/2 (0.0%–84.2%)"]
    assert f"| {mutant} | arch-ssm |" in (tmp_path / "README.md").read_text()
    keys = [json.loads(line)["key"] for line in (tmp_path / JOURNAL).read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 4

    calls.clear()
    monkeypatch.setattr(architectures, "_verify", _stub_verify({architectures.REFERENCE: "fail"}, calls))
    caught = ["--parts", "reference", "--pairs", "arch-ssm", "--first-seed", "5", "--samples", "300"]
    assert run("architectures", [*caught, "--out", str(tmp_path / "b")]) == 1  # a reference FAIL: a false alarm
    monkeypatch.setattr(architectures, "_verify", _stub_verify({}, calls))
    assert run("architectures", [*caught, "--out", str(tmp_path / "c")]) == 0


def test_bad_settings_exit_2_before_any_run(tmp_path):
    from harness.cli import main

    assert main(["campaign", "architectures", "--pairs", "arch-nope", "--out", str(tmp_path)]) == 2
    for bad in (["--mutants", "no_such_mutant"], ["--seeds", "-1"], ["--time-budget", "-1"], ["--threads", "0"]):
        with pytest.raises(HarnessError):
            run("architectures", [*bad, "--out", str(tmp_path)])
    with pytest.raises(HarnessError, match="unknown part 'nope'"):
        run("architectures", ["--parts", "nope", "--out", str(tmp_path)])
    assert not (tmp_path / JOURNAL).exists()


@pytest.mark.end_to_end
def test_a_real_greedy_reference_run_is_journaled_and_a_rerun_resumes_it(tmp_path):
    argv = ["--parts", "reference", "--pairs", "arch-ssm", "--samples", "50", "--setting", "T=0", "--contexts", "none",
            "--time-budget", "0", "--out", str(tmp_path)]
    assert run("architectures", argv) == 0
    (row,) = json.loads((tmp_path / "campaign.json").read_text())["rows"]
    assert row["impl"] == architectures.REFERENCE and row["verdict"] == "pass" and row["settings"] == ["T=0"]
    assert run("architectures", argv) == 0  # resumed: nothing runs again
    assert len((tmp_path / JOURNAL).read_text().splitlines()) == 1
    assert "| arch-ssm |" in (tmp_path / "README.md").read_text()


# --- the engine part (llama-server): fakes for the binary, the conversion, the server and the engine check ----------

class _EngineReport:
    def __init__(self, verdict: str):
        self.verdict, self.samples, self.detectable_tv, self.seconds = verdict, 8000, 0.077, 2.0

    def failure_summary(self):
        return ["T=1 | prompt 1: TV 0.3"] if self.verdict == "fail" else []


@pytest.fixture
def engine(monkeypatch, tmp_path):
    """A fake llama-server: `state["verdicts"][(side, setting)]` is the check's verdict (pass by default),
    `state["no_start"]` the sides whose server does not start; every server start is counted."""
    import contextlib

    state = {"verdicts": {}, "no_start": set(), "started": [], "checks": []}
    monkeypatch.setattr(architectures, "_engine_binary", lambda: Path("/fake/llama-server"))
    monkeypatch.setattr(architectures, "_engine_version", lambda binary: {"binary": str(binary), "version": "fake 1",
                                                                          "llama.cpp": "fake"})
    monkeypatch.setattr(architectures, "_engine_models", lambda pair, work, log: {
        "target_hf": work / "hf", "target": work / "t.gguf", "draft": work / "d.gguf"})

    @contextlib.contextmanager
    def server(binary, target, draft, log):
        side = "off" if draft is None else "draft"
        if side in state["no_start"]:
            raise HarnessError("llama-server exited with code 1 while starting")
        state["started"].append(side)
        log.write_text("draft acceptance = 0.50000 (    6 accepted /    12 generated), mean len =  1.50\n" * 2
                       if draft is not None else "")
        yield f"http://{side}"

    def check(config):
        side = config.endpoint.removeprefix("http://")
        setting = "T=0" if config.settings[0].temperature == 0 else "T=1"
        state["checks"].append((side, setting, config.extra_body, config.length, config.prompt_texts))
        return _EngineReport(state["verdicts"].get((side, setting), "pass"))

    monkeypatch.setattr(architectures, "_engine_server", server)
    monkeypatch.setattr(architectures, "_engine_check", check)
    monkeypatch.setattr(architectures, "_engine_greedy", lambda url, prompt: [
        {"tokens": [7, 23, 16], "draft_n": 4, "draft_n_accepted": 2}] * 3)
    return state


def test_engine_part_checks_each_pair_with_speculation_off_and_on_and_a_rerun_resumes(tmp_path, engine):
    argv = ["--parts", "engine", "--pairs", "arch-ssm-hybrid", "--out", str(tmp_path)]
    assert run("architectures", argv) == 0
    assert engine["started"] == ["off", "draft"]
    greedy = [c for c in engine["checks"] if c[1] == "T=0"]
    law = [c for c in engine["checks"] if c[1] == "T=1"]
    assert [c[3] for c in greedy] == [16, 16] and all(c[2] is None for c in greedy)
    assert all(c[2]["top_k"] == 0 and c[2]["min_p"] == 0 for c in law)  # llama-server's truncation off at T = 1
    assert greedy[0][4] == ("t1 t2 t3 t4", "t5 t9 t7 t30 t11 t2 t40 t17 t8 t3 t21 t6")  # the pair's prompts as words
    rows = json.loads((tmp_path / "campaign.json").read_text())["rows"]
    draft = next(r for r in rows if r["side"] == "draft")
    assert draft["drafts"] == {"requests": 2, "drafted": 24, "accepted": 12}  # from the server's log
    assert draft["engine"]["version"] == "fake 1" and draft["samples_requested"] == architectures.ENGINE_SAMPLES
    (off, on) = architectures.engine_rows(rows)
    assert on[:4] == ["arch-ssm-hybrid", "hybrid SSM, Mamba + attention + MoE (Jamba)", "draft model", "PASS (2 s)"]
    assert "12 of 24 drafted tokens accepted" in on[5] and "one answer ×3: 7 23 16" in on[5]
    assert "| arch-ssm-hybrid |" in (tmp_path / "README.md").read_text()
    assert run("architectures", argv) == 0
    assert engine["started"] == ["off", "draft"]  # resumed: no server started again


def test_an_engine_that_fails_is_a_finding_and_one_that_cannot_be_checked_exits_2(tmp_path, engine):
    engine["verdicts"][("draft", "T=1")] = "fail"
    argv = ["--parts", "engine", "--pairs", "arch-conv", "--out", str(tmp_path / "a")]
    assert run("architectures", argv) == 0  # the engine's verdicts are findings, not gates
    on = architectures.engine_rows(json.loads((tmp_path / "a" / "campaign.json").read_text())["rows"])[1]
    assert on[:5] == ["arch-conv", "conv hybrid, short conv + attention (LFM2)", "draft model", "PASS (2 s)",
                      "FAIL (2 s, TV 0.077): T=1 / prompt 1: TV 0.3"]
    engine["no_start"].add("draft")
    assert run("architectures", [*argv[:-1], str(tmp_path / "b")]) == 2
    on = architectures.engine_rows(json.loads((tmp_path / "b" / "campaign.json").read_text())["rows"])[1]
    assert on[3].startswith("ERROR: server: ") and "while starting" in on[3]


def test_a_pair_whose_config_the_converter_drops_is_also_run_as_converted(tmp_path, engine):
    """arch-swa: the catalogue's config (llama-server differs from transformers with speculation off) and
    arch-swa@gguf, the same weights with the fields llama.cpp's converter assumes, for both sides."""
    assert run("architectures", ["--parts", "engine", "--pairs", "arch-swa", "arch-conv", "--out", str(tmp_path)]) == 0
    assert engine["started"] == ["off", "draft"] * 3  # arch-swa, arch-swa@gguf, arch-conv (no variant)
    rows = json.loads((tmp_path / "campaign.json").read_text())["rows"]
    assert [(r["pair"], r["side"]) for r in rows] == [(p, s) for p in ("arch-swa", "arch-swa@gguf", "arch-conv")
                                                      for s in ("off", "draft")]
    gguf = [r for r in architectures.engine_rows(rows) if r[0] == "arch-swa@gguf"]
    assert [r[1:4] for r in gguf] == [["sliding window (Gemma 3); config as converted: query_pre_attn_scalar = "
                                       "head_dim = 8, both layers sliding (window 8)", side, "PASS (2 s)"]
                                      for side in ("speculation off", "draft model")]


def test_the_variant_sets_the_saved_config_fields_for_converter_and_ground_truth(tmp_path, monkeypatch):
    """_engine_models on PAIR@gguf: both saved folders carry the fields (nested ones key by key) before conversion;
    the plain pair keeps the catalogue's."""
    import harness.models.gguf_convert as gguf_convert

    seen = {}

    def convert(root, path, out, extra=(), log=None):
        seen[(path.parent.parent.name, path.name)] = json.loads((path / "config.json").read_text())
        return out

    monkeypatch.setattr(gguf_convert, "convert", convert)
    for label in ("arch-mamba2-hybrid", "arch-mamba2-hybrid@gguf"):
        models = architectures._engine_models(label, tmp_path / label, None)
        assert models["target_hf"] == tmp_path / label / "hf" / "target"
    for role in ("target", "draft"):
        plain, variant = seen[("arch-mamba2-hybrid", role)], seen[("arch-mamba2-hybrid@gguf", role)]
        assert plain["rope_parameters"]["partial_rotary_factor"] == 0.5
        assert variant["rope_parameters"] == {**plain["rope_parameters"], "partial_rotary_factor": 1.0}
        assert {k: v for k, v in variant.items() if k != "rope_parameters"} == \
            {k: v for k, v in plain.items() if k != "rope_parameters"}


def test_engine_part_without_llama_server_is_not_run_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(architectures, "_engine_binary", lambda: None)
    assert run("architectures", ["--parts", "engine", "--out", str(tmp_path)]) == 0
    assert "engine: not run: no llama-server" in capsys.readouterr().out
    assert "Not run here: no llama-server" in (tmp_path / "README.md").read_text()
    assert not (tmp_path / JOURNAL).read_text()


def test_draft_counts_sum_llama_servers_per_request_lines(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("slot print_timing: id  0 | task 3 | draft acceptance = 0.25000 (    1 accepted /     4 generated), "
                   "mean len =  1.25\nother\ndraft acceptance = 1.00000 (   12 accepted /    12 generated)\n")
    assert architectures._draft_counts(log) == {"requests": 2, "drafted": 16, "accepted": 13}
    assert architectures._draft_counts(tmp_path / "none.log") is None


@pytest.mark.end_to_end
def test_mutants_at_a_sampling_plan_are_measured_not_gated_and_keep_their_own_keys(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(architectures, "_verify", _stub_verify({}, calls))  # the stub passes every mutant
    mutant = "rotating_cache_trim_keeps_stale_keys"
    argv = ["--parts", "mutants", "--mutants", mutant, "--setting", "T=1", "--samples", "300", "--contexts", "none",
            "--time-budget", "0", "--seeds", "2", "--out", str(tmp_path)]
    assert run("architectures", argv) == 0  # not caught by sampling alone: a finding about the class, not a gate
    assert [c[2] for c in calls] == [0, 1]
    rows = json.loads((tmp_path / "campaign.json").read_text())["rows"]
    assert architectures.other_plan_rows(rows) == [[mutant, "arch-swa", "['T=1'], 300, contexts none", "0/2", "0.5",
                                                    "1", "0.1"]]
    assert run("architectures", ["--parts", "mutants", "--mutants", mutant, "--out", str(tmp_path)]) == 1  # default
    keys = [json.loads(line)["key"] for line in (tmp_path / JOURNAL).read_text().splitlines()]
    assert f"mutants/{mutant}/arch-swa/0" in keys and len(keys) == 3  # the default plan's key is unchanged


def test_trim_log_keeps_a_server_logs_start_and_end(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(1000)))
    architectures.trim_log(log, head=3, tail=2)
    assert log.read_text() == "line 0\nline 1\nline 2\n[... 995 lines cut ...]\nline 998\nline 999\n"
