"""suites.campaigns.vllm_cpu on the campaign runner (`specdec campaign vllm_cpu`), with fake `specdec` commands and
fake vLLM servers (no vLLM): every check is a cell run against its part's servers (started when a cell needs them,
stopped before the next part's), a rerun resumes (no command, no server), a run cut by its budget names what it did
not run, an interrupted command stops the campaign and runs again on the rerun, the exit code is the largest exit of
the commands, and a bad setting exits 2 before any server starts."""

from __future__ import annotations

import contextlib
import functools
import json
from types import SimpleNamespace

import pytest

from harness import executor, runner
from harness.cli import main
from harness.envelope import write_result
from harness.records import provenance
from harness.served import vllm_server as served
from suites.campaigns import vllm_cpu as campaign

ARGS = ["--seeds", "0", "--samples", "50", "--model-dir", "/fake/model"]


@pytest.fixture
def fake(monkeypatch):
    """`specdec` commands and the one-hot sampler runs as fakes (each advances the runner's deadline clock by 10 s and
    writes its JSON report); fake servers that record their starts and stops. engine_ngram_local fails (exit 1)."""
    state = {"now": 0.0, "calls": [], "args": [], "started": [], "up": [], "overlaps": [],
             "exit": {"engine_ngram_local": 1}, "alive": True, "refuses": True}

    def report(path, verdict):
        logprobs = path.stem.startswith("logprobs_")
        write_result(path, "check", config={}, provenance={**provenance(seed=0), "versions": {"vllm": "fake"}},
                     report={"verdict": verdict, "samples": 50, "detectable_tv": None if logprobs else 0.1,
                             "seconds": 1.0, "tests": [{"p_value": None if logprobs else 0.5}],
                             "cases": [{"max_abs_diff": 0.02}, {"name": "greedy"}] if logprobs else []},
                     summary={"verdict": verdict})

    def specdec(args):
        state["now"] += 10
        state["args"].append(args)
        name = args[args.index("--json") + 1].rsplit("/", 1)[-1].removesuffix(".json") if args[0] == "verify" else None
        state["calls"].append(name or args[0])
        code = state["exit"].get(name, 0)
        if name and name.startswith("refused_") and state["refuses"]:  # exit 2 with the raw-scores reason
            print(f"specdec: error: the scoring endpoint's {campaign.REFUSAL} (before temperature/top-k/top-p)")
            return 2
        if name == "engine_ngram_score_top20" and state["refuses"]:  # the mass outside the top 20: INCONCLUSIVE
            print("achieved detectable TV 0.25 is above the ceiling 0.05")
            report(campaign.Path(args[args.index("--json") + 1]), "inconclusive")
            return 3
        if name:
            report(campaign.Path(args[args.index("--json") + 1]), "fail" if code == 1 else "pass")
        return code

    def one_hot(out, log, fn, seed, name):
        state["now"] += 10
        state["calls"].append(name)
        report(out / f"{name}.json", "pass")
        log.append({"name": name, "command": "fake", "exit": 0, "seconds": 0.0, "load": [0, 0, 0]})
        return log[-1]

    def server(url):
        return SimpleNamespace(url=url, started_s=1.0, alive=lambda: state["alive"])

    @contextlib.contextmanager
    def up(names):
        if state["up"]:
            state["overlaps"].append((names, tuple(state["up"])))
        state["started"].append(names)
        state["up"].extend(names)
        try:
            yield
        finally:
            for n in names:
                state["up"].remove(n)

    @contextlib.contextmanager
    def servers(python, model_dir, specs):
        assert model_dir == "/fake/model"
        state.setdefault("extra", []).append([spec.get("extra", ()) for spec in specs])
        state.setdefault("servers_fix", []).append([spec.get("expand_fix") for spec in specs])
        with up(tuple(spec["log"].name for spec in specs)):
            yield [server(f"http://{spec['log'].stem}") for spec in specs]

    @contextlib.contextmanager
    def one_server(python, model_dir, *, log, **kw):
        state.setdefault("speculative", []).append(kw.get("speculative"))
        state.setdefault("expand_fix", []).append(kw.get("expand_fix"))
        with up((log.name,)):
            yield server(f"http://{log.stem}")

    def sweep(servers, out, log):
        state["now"] += 10
        state["calls"].append("sweep")
        log.append({"name": "sweep", "command": "fake", "exit": 0, "seconds": 0.0, "load": [0, 0, 0]})
        return log[-1]

    monkeypatch.setattr(campaign, "specdec", specdec)
    monkeypatch.setattr(campaign, "nonfinite_sweep", sweep)
    monkeypatch.setattr(campaign, "materialized_draft", lambda part: campaign.Path(f"/fake/{part}"))
    monkeypatch.setattr(campaign, "sampler_one_hot", one_hot)
    monkeypatch.setattr(served, "vllm_servers", servers)
    monkeypatch.setattr(served, "vllm_server", one_server)
    monkeypatch.setattr(runner, "deadline", functools.partial(executor.deadline, clock=lambda: state["now"]))
    return state


def vllm(out, *argv) -> int:
    return main(["campaign", "vllm_cpu", "--out", str(out), *argv])


def _keys(out) -> list[str]:
    return [json.loads(line)["key"] for line in (out / "journal.jsonl").read_text().splitlines()]


def _commands(out) -> list[str]:
    return [json.loads(line)["name"] for line in (out / "commands.jsonl").read_text().splitlines()]


def test_every_part_runs_against_its_own_servers_and_a_rerun_resumes_with_the_same_exit(fake, tmp_path):
    out = tmp_path / "vllm"
    assert vllm(out, *ARGS) == 1  # the largest exit: engine_ngram_local's FAIL
    assert fake["up"] == []  # every server stopped
    # one part's servers at a time: only the logprobs part holds two pairs (raw, processed) at once
    assert fake["overlaps"] == [(("server_ngram_processed.log", "server_off_processed.log"),
                                 ("server_ngram_raw.log", "server_off_raw.log"))]
    assert len(fake["started"]) == len(set(fake["started"])) == 7  # engine, draft, eagle, control, scoring, 2 pairs
    for name in [c for c in fake["calls"] if c.startswith(("sampler", "engine", "logprobs"))]:
        assert (out / f"{name}.json").exists()
    assert len(_commands(out)) == len(fake["calls"]) and len(_keys(out)) < len(fake["calls"])  # probes after runs
    summary = (out / "summary.md").read_text()
    assert "| engine_ngram_local | FAIL |" in summary and "| sampler_seeded_seed0 | PASS |" in summary
    assert "Not run" not in summary
    envelope = json.loads((out / "campaign.json").read_text())
    assert envelope["kind"] == "campaign.vllm_cpu" and envelope["summary"] == {"exit": 1, "not_run": []}
    assert envelope["config"]["samples"] == 50 and envelope["provenance"]["seed"] == [0]
    assert json.loads((out / "servers_alive_at_end.json").read_text())["report"] == {"ngram": True, "off": True}
    commands = _commands(out)
    fake["calls"].clear()
    fake["started"].clear()
    (out / "summary.md").unlink()
    assert vllm(out, *ARGS) == 1  # complete: the same exit, from the journal
    assert fake["calls"] == [] and fake["started"] == [] and _commands(out) == commands
    assert (out / "summary.md").read_text() == summary


def test_a_run_cut_by_its_budget_names_the_cells_not_run_and_the_rerun_runs_only_those(fake, tmp_path):
    out = tmp_path / "vllm"
    assert vllm(out, *ARGS, "--budget-s", "25") == 2  # 3 sampler runs, then out of time
    assert len(fake["calls"]) == 3 and fake["started"] == []  # the engine part never started its servers
    not_run = json.loads((out / "campaign.json").read_text())["summary"]["not_run"]
    summary = (out / "summary.md").read_text()
    assert f"**Not run** ({len(not_run)} cells" in summary and "`control/engine_off_local/n=50`" in summary
    assert vllm(out, *ARGS) == 1
    assert len(_keys(out)) == 3 + len(not_run) and "Not run" not in (out / "summary.md").read_text()
    fake["calls"].clear()
    fake["started"].clear()
    assert vllm(out, *ARGS, "--fresh") == 1
    assert len(fake["calls"]) == len(_commands(out)) // 2 and len(fake["started"]) == 7  # every command again


def test_an_interrupted_command_stops_the_campaign_and_a_dead_server_halts_the_isolation(fake, tmp_path):
    out = tmp_path / "vllm"
    names = [name for name, _ in campaign.ISOLATE]
    fake["exit"] = {names[1]: 130}
    assert vllm(out, "--only", "isolate", *ARGS) == 130
    assert _keys(out) == [f"isolate/{names[0]}/n=50"] and fake["calls"] == names[:2] and fake["up"] == []
    fake["exit"], fake["alive"] = {}, False  # the next run's server dies during its first run
    fake["calls"].clear()
    assert vllm(out, "--only", "isolate", *ARGS) == 2  # the server died: the run could not be done
    assert fake["calls"] == [names[1]] and len(_keys(out)) == 2  # the interrupted run again, then no more
    assert f"**Not run** ({len(names) - 2} cells" in (out / "summary.md").read_text()


@pytest.mark.parametrize("argv, says", [(["--only", "draft", "--draft-dir", "MISSING"], "config.json"),
                                        (["--only", "eagle", "--eagle-dir", "MISSING"], "config.json"),
                                        (["--samples", "0"], "--samples must be >= 1"),
                                        (["--only", "echo", "engine"], "give it alone")])
def test_a_bad_setting_exits_2_in_one_line_before_any_server(fake, tmp_path, capsys, argv, says):
    argv = [str(tmp_path / "missing") if a == "MISSING" else a for a in argv]
    assert vllm(tmp_path / "v", *argv, "--model-dir", "/fake/model") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err
    assert fake["started"] == [] and fake["calls"] == []


def test_every_engine_level_check_runs_with_the_tv_bar_and_the_default_samples_reach_it(fake, tmp_path):
    """A passing engine-level cell above detectable TV 0.05 is INCONCLUSIVE (--inconclusive-tv), and the default
    sample size is the one that reaches the bar (400 per cell measured 0.0501; the pooled PIT's TV falls as 1/√n)."""
    assert vllm(tmp_path / "v", "--only", "engine", "--model-dir", "/fake/model") == 1
    assert vllm(tmp_path / "c", "--only", "control", "--model-dir", "/fake/model") == 0
    checks = [a for a in fake["args"] if a[:3] == ["verify", "--level", "engine"]]
    assert len(checks) == 3
    for args in checks:
        assert args[args.index("--inconclusive-tv") + 1] == str(campaign.ENGINE_TV_BAR) == "0.05"
        assert int(args[args.index("--samples") + 1]) == 440
    assert campaign.ENGINE_TV_BAR >= 0.0501 * (400 / 440) ** 0.5


def test_fresh_forgets_the_kept_responses_too(fake, tmp_path):
    out = tmp_path / "v"
    (out / "responses").mkdir(parents=True)
    (out / "responses" / "engine-old.jsonl").write_text("{}\n")
    assert vllm(out, "--only", "control", "--model-dir", "/fake/model") == 0
    assert (out / "responses" / "engine-old.jsonl").exists()  # a plain rerun resumes them
    assert vllm(out, "--only", "control", "--model-dir", "/fake/model", "--fresh") == 0
    assert not (out / "responses" / "engine-old.jsonl").exists()


def test_summary_leaves_out_reports_no_journaled_cell_wrote(fake, tmp_path):
    """A report an earlier run left (here: before --fresh) is named, never summarized as this run's numbers."""
    out = tmp_path / "v"
    out.mkdir()
    write_result(out / "isolate_old.json", "check", config={}, provenance=provenance(seed=0), summary={},
                 report={"verdict": "fail", "samples": 200, "detectable_tv": 0.08, "seconds": 1, "tests": []})
    assert vllm(out, "--only", "control", "--model-dir", "/fake/model", "--fresh") == 0
    summary = (out / "summary.md").read_text()
    assert "| isolate_old |" not in summary and "not summarized): `isolate_old`" in summary


def test_logprobs_checks_run_at_the_tolerance_the_calibration_measured_in_each_mode(fake, tmp_path):
    """The calibration (speculation off, seed 1, no tolerance) states the spread; the checks (seed 0) run at
    4 × it on both servers of each `--logprobs-mode` pair; the summary shows a logprobs report with no TV."""
    out = tmp_path / "v"
    assert vllm(out, "--only", "logprobs", "--model-dir", "/fake/model") == 0
    assert fake["extra"] == [[("--logprobs-mode", "raw_logprobs")] * 2, [("--logprobs-mode", "processed_logprobs")] * 2]
    checks = {a[a.index("--json") + 1].rsplit("/", 1)[-1].removesuffix(".json"): a for a in fake["args"]}
    assert len(checks) == 8  # 2 calibrations, 3 checks per mode
    for name, args in checks.items():
        assert args[args.index("--engine-checks") + 1] == "logprobs"
        assert args[args.index("--logprobs-mode") + 1] in name
        calibration = "calibration" in name
        assert args[args.index("--logprob-tolerance") + 1] == ("inf" if calibration else "0.08")
        assert args[args.index("--seed") + 1] == ("1" if calibration else "0")
        assert args[args.index("--chunk") + 1] == ("1" if name.endswith("_n1") else "16")
    assert "| logprobs_raw_ngram | PASS | 50 | – |" in (out / "summary.md").read_text()
    journal = [json.loads(line)["record"] for line in (out / "journal.jsonl").read_text().splitlines()]
    entries = [e for record in journal for e in record["log"]]
    assert {e.get("tolerance") for e in entries if e["name"].startswith("logprobs_raw")} == {0.08}


def test_logprobs_checks_cut_with_their_calibration_are_named_not_run_and_run_on_the_rerun(fake, tmp_path):
    out = tmp_path / "v"
    assert vllm(out, "--only", "logprobs", "--model-dir", "/fake/model", "--budget-s", "5") == 2
    assert _keys(out) == ["logprobs/calibration/raw/n=16"]  # then the budget: no check ran without its tolerance
    summary = (out / "summary.md").read_text()
    assert "`logprobs/calibration/processed/n=16`" in summary and "`logprobs/raw/ngram/n=16/chunk=1`" in summary
    assert vllm(out, "--only", "logprobs", "--model-dir", "/fake/model") == 0
    assert len(_keys(out)) == 9 and "Not run" not in (out / "summary.md").read_text()


def test_bench_runs_against_the_raw_pair(fake, tmp_path):
    out = tmp_path / "v"
    assert vllm(out, "--only", "bench", "--model-dir", "/fake/model") == 0
    assert _keys(out) == ["bench/http"] and fake["started"] == [("server_ngram_raw.log", "server_off_raw.log")]
    (args,) = fake["args"]
    assert args[:2] == ["bench", "--endpoint"] and args[2] == "http://server_ngram_raw/v1"
    assert args[args.index("--reference-endpoint") + 1] == "http://server_off_raw/v1"
    assert args[args.index("--out") + 1] == str(out) and "--concurrency" in args


@pytest.mark.parametrize("part, method, pair", [("draft", "draft_model", "smollm2-trunc"), ("eagle", "eagle", "smollm2")])
def test_model_draft_parts_serve_their_draft_and_check_it_at_the_default_plan(fake, tmp_path, monkeypatch, part,
                                                                            method, pair):
    """--only draft / eagle: one server with vLLM's draft_model / eagle method on the materialized draft (made only
    when the server starts); its probe, then the local-target check at the TV bar and the probe after it; a rerun
    starts nothing; a FAIL is the exit; a given folder replaces the materialized one."""
    made = []
    monkeypatch.setattr(campaign, "materialized_draft", lambda p: made.append(p) or campaign.Path(f"/fake/{p}"))
    out = tmp_path / "v"
    run = ["--only", part, "--model-dir", "/fake/model"]
    assert vllm(out, *run) == 0
    assert made == [part] and _commands(out) == [f"probe_{part}", f"engine_{part}_local", f"probe_{part}_after"]
    assert fake["started"] == [(f"server_{part}.log",)]
    assert fake["speculative"] == [{"method": method, "num_speculative_tokens": 3, "model": f"/fake/{part}"}]
    assert json.loads((out / f"servers_{part}.json").read_text())["report"][part]["speculative_config"]["model"] == f"/fake/{part}"
    (check,) = [a for a in fake["args"] if a[0] == "verify"]
    assert check[check.index("--pair") + 1] == pair and check[check.index("--endpoint") + 1] == f"http://server_{part}/v1"
    assert check[check.index("--inconclusive-tv") + 1] == str(campaign.ENGINE_TV_BAR)
    assert [check[i + 1] for i, a in enumerate(check) if a == "--setting"] == ["T=0", *campaign.ENGINE_SETTINGS]
    assert f"| engine_{part}_local | PASS |" in (out / "summary.md").read_text()
    fake["started"].clear()
    assert vllm(out, *run) == 0
    assert fake["started"] == [] and made == [part]
    fake["exit"][f"engine_{part}_local"] = 1  # a FAIL is the campaign's exit
    given = tmp_path / "given"
    given.mkdir()
    (given / "config.json").write_text("{}")
    assert vllm(tmp_path / "w", *run, f"--{part}-dir", str(given)) == 1
    assert fake["speculative"][-1]["model"] == str(given) and made == [part]


def test_expand_fix_starts_every_server_with_the_fix_and_writes_to_its_own_folder(fake, tmp_path):
    """--expand-fix: every server of every part but the in-process sampler part loads the expand-kernel fix of
    harness.adapters.vllm_fix; its reports and summary go to OUT/expand-fix and its cells sit under expand-fix/ in
    the one journal, beside the shipped servers' (neither run's summary counts the other's)."""
    out = tmp_path / "v"
    assert vllm(out, "--only", "control", *ARGS) == 0  # the shipped control first
    assert vllm(out, "--expand-fix", *ARGS) == 1  # the fake engine_ngram_local FAILs
    fixed = out / "expand-fix"
    keys = _keys(out)
    assert keys[0] == "control/engine_off_local/n=50" and all(k.startswith("expand-fix/") for k in keys[1:])
    assert not any(k.startswith("expand-fix/sampler/") for k in keys)
    assert fake["expand_fix"] == [False, True, True, True] and all(f == [True] * len(f) for f in fake["servers_fix"])
    assert (fixed / "engine_ngram_local.json").exists() and "| engine_ngram_local | FAIL |" in (fixed / "summary.md").read_text()
    assert "engine_ngram_local" not in (out / "summary.md").read_text()
    assert json.loads((fixed / "campaign.json").read_text())["config"]["expand_fix"] is True


def test_scoring_part_uses_the_speculation_off_server_alone_and_its_refusals_are_checked(fake, tmp_path):
    """(b) without a local model: the n-gram server's tokens scored by the speculation-off server at T = 0 and T = 1
    (the TV bar), with the top 20 (INCONCLUSIVE: the cell passes when the check says so) and the top SCORING_K
    (servers with --max-logprobs SCORING_K, SCORING_SAMPLES per cell, no response record), its logprobs at T = 1, both
    servers in processed-logprobs mode; at T = 0.7 / top-p 0.9 the checks must refuse with exit 2 (the cell passes),
    and a check that gives a verdict there, or a PASS on the top 20, is exit 1."""
    assert vllm(tmp_path / "s", "--only", "scoring", "--model-dir", "/fake/model") == 0
    assert fake["started"] == [("server_ngram_processed_scoring.log", "server_off_processed_scoring.log")]
    k, n = str(campaign.SCORING_K), str(campaign.SCORING_SAMPLES)
    assert fake["extra"][-1] == [("--logprobs-mode", "processed_logprobs", "--max-logprobs", k)] * 2
    checks = {a[a.index("--json") + 1].rsplit("/", 1)[-1].removesuffix(".json"): a for a in fake["args"] if a[0] == "verify"}
    assert set(checks) == {"engine_ngram_score_top20", f"engine_ngram_score_top{k}", "refused_score",
                           "logprobs_ngram_score", "refused_logprobs"}
    for name, args in checks.items():
        assert "--pair" not in args and args[args.index("--reference-endpoint") + 1] == "http://server_off_processed_scoring/v1"
        assert ("T=0.7,top_p=0.9" in args) == name.startswith("refused_")
    for name, top, samples in (("engine_ngram_score_top20", "20", "440"), (f"engine_ngram_score_top{k}", k, n)):
        args = checks[name]
        assert args[args.index("--ground-truth") + 1] == "score" and "T=1" in args and "T=0" in args
        assert args[args.index("--top-logprobs") + 1] == top and args[args.index("--samples") + 1] == samples
        assert args[args.index("--inconclusive-tv") + 1] == "0.05"
    assert "--out" not in checks[f"engine_ngram_score_top{k}"]  # MB of JSON per scored sequence: not recorded
    journal = [json.loads(line) for line in (tmp_path / "s" / "journal.jsonl").read_text().splitlines()]
    expected = [e for r in journal for e in r["record"]["log"] if "command_exit" in e]
    assert [(e["name"], e["exit"], e["command_exit"]) for e in expected] == [
        ("engine_ngram_score_top20", 0, 3), ("refused_score", 0, 2), ("refused_logprobs", 0, 2)]
    fake["refuses"] = False  # a verdict where none can be given: the campaign says so
    assert vllm(tmp_path / "t", "--only", "scoring", "--model-dir", "/fake/model") == 1


def test_echo_reads_the_kept_responses_and_runs_nothing(fake, tmp_path, capsys):
    out = tmp_path / "v"
    (out / "responses").mkdir(parents=True)
    assert vllm(out, "--only", "echo") == 0
    assert "P(emitted token = n-gram draft)" in (out / "draft_echo.md").read_text()
    assert fake["calls"] == [] and fake["started"] == [] and not (out / "campaign.json").exists()
