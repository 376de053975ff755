"""suites.campaigns.vllm_cpu on the cell runner: every check (sampler-level runs, probes, engine-level runs,
the control, the isolation runs) is a journaled cell; a rerun runs none and starts no server; a run cut by its
budget resumes only the rest; --fresh runs all again; an interrupted command is not journaled (fake `specdec`
commands and vLLM servers: no vLLM)."""

from __future__ import annotations

import contextlib
import functools
import json
from types import SimpleNamespace

import pytest

from harness import executor
from harness.envelope import write_result
from harness.records import provenance
from harness.served import vllm_server as served
from suites.campaigns import vllm_cpu as campaign

SAMPLER = [f"sampler/{tag}/seed=0" for tag in (*campaign.SAMPLER_VARIANTS, "no_draft_probs", "ragged_no_draft_probs")]
ENGINE = ["engine/probe_ngram", "engine/probe_off", "engine/engine_ngram_local/n=50",
          "engine/engine_ngram_two_sample/n=50"]
# the fake calibration reports a spread of 0.02 nats: tolerance 4 × 0.02 = 0.08
LOGPROBS = ["logprobs/calibration/raw/n=16", "logprobs/calibration/processed/n=16",
            *(f"logprobs/{mode}/{side}/n=16/tol=0.08{chunk}" for mode in ("raw", "processed")
              for side, chunk in (("off", ""), ("ngram", ""), ("ngram", "/chunk=1"))),
            "logprobs/processed/n-sweep",
            "bench/http"]
DRAFT_PARTS = ("draft", "eagle")
DRAFTS = [f"{part}/{cell}" for part in DRAFT_PARTS for cell in (f"probe_{part}", f"engine_{part}_local/n=50")]
SCORING = ["scoring/probe_off", "scoring/engine_ngram_score_top20/n=50", f"scoring/engine_ngram_score_top{campaign.SCORING_K}/n={campaign.SCORING_SAMPLES}",
           "scoring/refused_score", "scoring/logprobs_ngram_score/n=16", "scoring/refused_logprobs"]
KEYS = [*SAMPLER, *ENGINE, *DRAFTS, "control/engine_off_local/n=50", *SCORING, *LOGPROBS]
# the commands behind those cells, in order (the local-target run and the probe after it are one cell)
COMMANDS = ["sampler_seeded_seed0", "sampler_unseeded_seed0", "sampler_mixed_seed0", "sampler_ragged_seed0",
            "sampler_forward_seed0", "sampler_forward_fixed_seed0", "sampler_forward_top_k_seed0",
            "sampler_forward_top_k_fixed_seed0", "sampler_no_draft_probs_seed0", "sampler_ragged_no_draft_probs_seed0", "probe_ngram", "probe_off",
            "engine_ngram_local", "probe_ngram_after", "engine_ngram_two_sample",
            *(c for part in DRAFT_PARTS for c in (f"probe_{part}", f"engine_{part}_local", f"probe_{part}_after")),
            "engine_off_local",
            "probe_scoring_off", "engine_ngram_score_top20", f"engine_ngram_score_top{campaign.SCORING_K}", "refused_score",
            "logprobs_ngram_score", "refused_logprobs",
            "logprobs_calibration_raw", "logprobs_calibration_processed", "logprobs_raw_off", "logprobs_raw_ngram",
            "logprobs_raw_ngram_n1", "logprobs_processed_off", "logprobs_processed_ngram", "logprobs_processed_ngram_n1",
            "sweep",
            "bench"]
SERVERS = [("server_ngram.log", "server_off.log"), *((f"server_{part}.log",) for part in DRAFT_PARTS), ("server_off_control.log",),
           ("server_ngram_processed_scoring.log", "server_off_processed_scoring.log"),
           ("server_ngram_raw.log", "server_off_raw.log"), ("server_ngram_processed.log", "server_off_processed.log")]
ARGS = ["--seeds", "0", "--samples", "50", "--model-dir", "/fake/model"]


@pytest.fixture
def fake(monkeypatch):
    """`specdec` commands and the one-hot sampler runs as fakes (each advances the deadline's clock by 10 s and
    writes its JSON report); fake servers that record their starts. engine_ngram_local fails (exit 1)."""
    state = {"now": 0.0, "calls": [], "args": [], "started": [], "exit": {"engine_ngram_local": 1}, "alive": True,
             "refuses": True}  # the refused_* commands stop with exit 2 and the raw-scores reason, as specdec does

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
        if name and name.startswith("refused_") and state["refuses"]:
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
    def servers(python, model_dir, specs):
        assert model_dir == "/fake/model"
        state["started"].append(tuple(spec["log"].name for spec in specs))
        state.setdefault("extra", []).append([spec.get("extra", ()) for spec in specs])
        state.setdefault("servers_fix", []).append([spec.get("expand_fix") for spec in specs])
        yield [server(f"http://{spec['log'].stem}") for spec in specs]

    @contextlib.contextmanager
    def one_server(python, model_dir, *, log, **kw):
        state["started"].append((log.name,))
        state.setdefault("speculative", []).append(kw.get("speculative"))
        state.setdefault("expand_fix", []).append(kw.get("expand_fix"))
        yield server(f"http://{log.stem}")

    def sweep(servers, out, log):
        state["now"] += 10
        state["calls"].append("sweep")
        log.append({"name": "sweep", "command": "fake", "exit": 0, "seconds": 0.0, "load": [0, 0, 0]})
        return log[-1]

    monkeypatch.setattr("harness.cli.main", specdec)
    monkeypatch.setattr(campaign, "nonfinite_sweep", sweep)
    monkeypatch.setattr(campaign, "materialized_draft", lambda part: campaign.Path(f"/fake/{part}"))
    monkeypatch.setattr(campaign, "sampler_one_hot", one_hot)
    monkeypatch.setattr(served, "vllm_servers", servers)
    monkeypatch.setattr(served, "vllm_server", one_server)
    monkeypatch.setattr(campaign, "deadline", functools.partial(executor.deadline, clock=lambda: state["now"]))
    return state


def _keys(out) -> list[str]:
    return [json.loads(line)["key"] for line in (out / "journal.jsonl").read_text().splitlines()]


def _commands(out) -> list[str]:
    return [json.loads(line)["name"] for line in (out / "commands.jsonl").read_text().splitlines()]


def test_vllm_cpu_cells_are_journaled_and_a_rerun_runs_none_and_starts_no_server(fake, tmp_path):
    out = tmp_path / "vllm"
    assert campaign.main(["--out", str(out), *ARGS]) == 1  # the largest exit: engine_ngram_local's FAIL
    assert _keys(out) == KEYS and _commands(out) == COMMANDS
    assert fake["calls"] == [c if c.startswith(("sampler", "engine", "logprobs", "bench", "sweep", "refused")) else "probe" for c in COMMANDS]
    assert fake["started"] == SERVERS
    assert json.loads((out / "servers_alive_at_end.json").read_text())["report"] == {"ngram": True, "off": True}
    summary = (out / "summary.md").read_text()
    assert "| engine_ngram_local | FAIL |" in summary and "Not run" not in summary
    fake["calls"].clear()
    fake["started"].clear()
    (out / "summary.md").unlink()
    assert campaign.main(["--out", str(out), *ARGS]) == 1  # complete: the same exit, from the journal
    assert fake["calls"] == [] and fake["started"] == [] and _keys(out) == KEYS
    assert _commands(out) == COMMANDS  # nothing ran, nothing appended
    assert (out / "summary.md").read_text() == summary


def test_vllm_cpu_run_cut_by_its_budget_resumes_only_the_rest_and_fresh_runs_all(fake, tmp_path):
    out = tmp_path / "vllm"
    assert campaign.main(["--out", str(out), *ARGS, "--budget-s", "25"]) == 0  # 3 sampler runs, then out of time
    assert _keys(out) == KEYS[:3] and fake["started"] == []  # the engine part never started its servers
    summary = (out / "summary.md").read_text()
    assert f"**Not run** ({len(KEYS) - 3} cells" in summary and "`control/engine_off_local/n=50`" in summary
    fake["calls"].clear()
    assert campaign.main(["--out", str(out), *ARGS]) == 1
    assert fake["calls"] == [c if c.startswith(("sampler", "engine", "logprobs", "bench", "sweep", "refused")) else "probe" for c in COMMANDS[3:]]
    assert _keys(out) == KEYS and _commands(out) == COMMANDS
    fake["calls"].clear()
    fake["started"].clear()
    assert campaign.main(["--out", str(out), *ARGS, "--fresh"]) == 1
    assert len(fake["calls"]) == len(COMMANDS) and _keys(out) == KEYS and len(fake["started"]) == len(SERVERS)
    assert _commands(out) == COMMANDS * 2  # commands.jsonl is the log of every command run


def test_vllm_cpu_an_interrupted_command_is_not_journaled_and_a_dead_server_stops_the_isolation(fake, tmp_path):
    out = tmp_path / "vllm"
    isolate = ["--only", "isolate", *ARGS]
    names = [name for name, _ in campaign.ISOLATE]
    fake["exit"] = {names[1]: 130}
    assert campaign.main(["--out", str(out), *isolate]) == 130
    assert _keys(out) == [f"isolate/{names[0]}/n=50"] and fake["calls"] == names[:2]
    fake["exit"], fake["alive"] = {}, False  # the next run's server dies during its first run
    fake["calls"].clear()
    assert campaign.main(["--out", str(out), *isolate]) == 0
    assert fake["calls"] == [names[1]] and len(_keys(out)) == 2  # the interrupted run again, then no more
    assert f"**Not run** ({len(names) - 2} cells" in (out / "summary.md").read_text()


def test_vllm_cpu_every_engine_level_check_runs_with_the_tv_bar_and_the_default_samples_reach_it(fake, monkeypatch,
                                                                                                    tmp_path):
    """A passing engine-level cell above detectable TV 0.05 is INCONCLUSIVE (--inconclusive-tv), and the default
    sample size is the one that reaches the bar (400 per cell measured 0.0501; the pooled PIT's TV falls as 1/√n)."""
    seen = []
    recorded = campaign._run

    def spy(cli_args, log, out, name):
        seen.append(cli_args)
        return recorded(cli_args, log, out, name)

    monkeypatch.setattr(campaign, "_run", spy)
    assert campaign.main(["--out", str(tmp_path / "v"), "--only", "engine", "--model-dir", "/fake/model"]) == 1
    assert campaign.main(["--out", str(tmp_path / "c"), "--only", "control", "--model-dir", "/fake/model"]) == 0
    checks = [a for a in seen if a[:3] == ["verify", "--level", "engine"]]
    assert len(checks) == 3
    for args in checks:
        assert args[args.index("--inconclusive-tv") + 1] == str(campaign.ENGINE_TV_BAR) == "0.05"
        assert int(args[args.index("--samples") + 1]) == 440
    assert campaign.ENGINE_TV_BAR >= 0.0501 * (400 / 440) ** 0.5


def test_vllm_cpu_fresh_forgets_the_kept_responses_too(fake, tmp_path):
    """--fresh measures every response again: the engine checks' kept responses go with the journal."""
    out = tmp_path / "v"
    (out / "responses").mkdir(parents=True)
    (out / "responses" / "engine-old.jsonl").write_text("{}\n")
    assert campaign.main(["--out", str(out), "--only", "control", "--model-dir", "/fake/model"]) == 0
    assert (out / "responses" / "engine-old.jsonl").exists()  # a plain rerun resumes them
    assert campaign.main(["--out", str(out), "--only", "control", "--model-dir", "/fake/model", "--fresh"]) == 0
    assert not (out / "responses" / "engine-old.jsonl").exists()


def test_vllm_cpu_summary_leaves_out_reports_no_journaled_cell_wrote(fake, tmp_path):
    """A report an earlier run left (here: before --fresh) is named, never summarized as this run's numbers."""
    out = tmp_path / "v"
    out.mkdir()
    write_result(out / "isolate_old.json", "check", config={}, provenance=provenance(seed=0), summary={},
                 report={"verdict": "fail", "samples": 200, "detectable_tv": 0.08, "seconds": 1, "tests": []})
    assert campaign.main(["--out", str(out), "--only", "control", "--model-dir", "/fake/model", "--fresh"]) == 0
    summary = (out / "summary.md").read_text()
    assert "| isolate_old |" not in summary and "not summarized): `isolate_old`" in summary


def test_vllm_cpu_logprobs_checks_run_at_the_tolerance_the_calibration_measured_in_each_mode(fake, tmp_path):
    """The calibration (speculation off, seed 1, no tolerance) states the spread; the checks (seed 0) run at
    4 × it on both servers of each `--logprobs-mode` pair; the summary shows a logprobs report with no TV."""
    out = tmp_path / "v"
    assert campaign.main(["--out", str(out), "--only", "logprobs", "--model-dir", "/fake/model"]) == 0
    assert _keys(out) == LOGPROBS[:-1] and fake["started"] == SERVERS[-2:]
    assert fake["extra"] == [[("--logprobs-mode", "raw_logprobs")] * 2, [("--logprobs-mode", "processed_logprobs")] * 2]
    checks = {a[a.index("--json") + 1].rsplit("/", 1)[-1].removesuffix(".json"): a for a in fake["args"]}
    for name, args in checks.items():
        assert args[args.index("--engine-checks") + 1] == "logprobs"
        assert args[args.index("--logprobs-mode") + 1] in name
        calibration = "calibration" in name
        assert args[args.index("--logprob-tolerance") + 1] == ("inf" if calibration else "0.08")
        assert args[args.index("--seed") + 1] == ("1" if calibration else "0")
        assert args[args.index("--chunk") + 1] == ("1" if name.endswith("_n1") else "16")
    assert "| logprobs_raw_ngram | PASS | 50 | – |" in (out / "summary.md").read_text()


def test_vllm_cpu_logprobs_checks_cut_with_their_calibration_are_named_not_run(fake, tmp_path):
    out = tmp_path / "v"
    assert campaign.main(["--out", str(out), "--only", "logprobs", "--model-dir", "/fake/model", "--budget-s", "5"]) == 0
    assert _keys(out) == LOGPROBS[:1]  # the raw calibration, then the budget: no tolerance, so no check planned
    summary = (out / "summary.md").read_text()
    assert "`logprobs/calibration/processed/n=16`" in summary and "`logprobs/raw/ngram/n=16/chunk=1`" in summary
    assert campaign.main(["--out", str(out), "--only", "logprobs", "--model-dir", "/fake/model"]) == 0
    assert _keys(out) == LOGPROBS[:-1] and "Not run" not in (out / "summary.md").read_text()


def test_vllm_cpu_bench_runs_against_the_raw_pair(fake, tmp_path):
    out = tmp_path / "v"
    assert campaign.main(["--out", str(out), "--only", "bench", "--model-dir", "/fake/model"]) == 0
    assert _keys(out) == ["bench/http"] and fake["started"] == SERVERS[-2:-1]
    (args,) = fake["args"]
    assert args[:2] == ["bench", "--endpoint"] and args[2] == "http://server_ngram_raw/v1"
    assert args[args.index("--reference-endpoint") + 1] == "http://server_off_raw/v1"
    assert args[args.index("--out") + 1] == str(out) and "--concurrency" in args


@pytest.mark.parametrize("part, method, pair", [("draft", "draft_model", "smollm2-trunc"), ("eagle", "eagle", "smollm2")])
def test_vllm_cpu_model_draft_parts_serve_their_draft_and_check_it_at_the_default_plan(fake, tmp_path, monkeypatch,
                                                                                      part, method, pair):
    """--only draft / eagle: one server with vLLM's draft_model / eagle method on the materialized draft (made only
    when the server starts); its probe, then the local-target check at the TV bar and the probe after it; journaled
    (a rerun starts nothing); a FAIL is the exit; a given folder replaces the materialized one; in the default run."""
    made = []
    monkeypatch.setattr(campaign, "materialized_draft", lambda p: made.append(p) or campaign.Path(f"/fake/{p}"))
    out = tmp_path / "v"
    run = ["--only", part, "--model-dir", "/fake/model"]
    assert campaign.main(["--out", str(out), *run]) == 0
    assert _keys(out) == [f"{part}/probe_{part}", f"{part}/engine_{part}_local/n=440"] and made == [part]
    assert _commands(out) == [f"probe_{part}", f"engine_{part}_local", f"probe_{part}_after"]
    assert fake["started"] == [(f"server_{part}.log",)]
    assert fake["speculative"] == [{"method": method, "num_speculative_tokens": 3, "model": f"/fake/{part}"}]
    assert json.loads((out / f"servers_{part}.json").read_text())["report"][part]["speculative_config"]["model"] == f"/fake/{part}"
    (check,) = [a for a in fake["args"] if a[0] == "verify"]
    assert check[check.index("--pair") + 1] == pair and check[check.index("--endpoint") + 1] == f"http://server_{part}/v1"
    assert check[check.index("--inconclusive-tv") + 1] == str(campaign.ENGINE_TV_BAR)
    assert [check[i + 1] for i, a in enumerate(check) if a == "--setting"] == ["T=0", *campaign.ENGINE_SETTINGS]
    assert f"| engine_{part}_local | PASS |" in (out / "summary.md").read_text()
    fake["started"].clear()
    assert campaign.main(["--out", str(out), *run]) == 0
    assert fake["started"] == [] and made == [part]
    fake["exit"][f"engine_{part}_local"] = 1  # a FAIL is the campaign's exit
    given = tmp_path / "given"
    given.mkdir()
    (given / "config.json").write_text("{}")
    assert campaign.main(["--out", str(tmp_path / "w"), *run, f"--{part}-dir", str(given)]) == 1
    assert fake["speculative"][-1]["model"] == str(given) and made == [part]
    assert [k for k in KEYS if k.startswith(f"{part}/")] == [f"{part}/probe_{part}", f"{part}/engine_{part}_local/n=50"]


@pytest.mark.parametrize("flag", ["--draft-dir", "--eagle-dir"])
def test_vllm_cpu_a_draft_folder_that_is_not_a_model_is_bad_usage_before_any_server(fake, tmp_path, capsys, flag):
    assert campaign.main(["--out", str(tmp_path / "v"), "--only", "draft", "eagle", "--model-dir", "/fake/model",
                          flag, str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err and "config.json" in err
    assert fake["started"] == [] and fake["calls"] == []



def test_vllm_cpu_expand_fix_starts_every_server_with_the_fix_and_writes_to_its_own_folder(fake, tmp_path):
    """--expand-fix: every server of every part but the in-process sampler part loads the expand-kernel fix of
    harness.adapters.vllm_fix; reports, journal and summary go to OUT/expand-fix; without it no server does."""
    out = tmp_path / "v"
    assert campaign.main(["--out", str(out), "--expand-fix", *ARGS]) == 1  # the fake engine_ngram_local FAILs
    fixed = out / "expand-fix"
    assert _keys(fixed) == [k for k in KEYS if not k.startswith("sampler/")]
    assert fake["started"] == SERVERS and not (out / "journal.jsonl").exists()
    assert fake["expand_fix"] == [True] * 3 and all(f == [True] * len(f) for f in fake["servers_fix"])
    assert (fixed / "engine_ngram_local.json").exists() and "| engine_ngram_local | FAIL |" in (fixed / "summary.md").read_text()
    assert campaign.main(["--out", str(tmp_path / "w"), "--only", "engine", "draft", *ARGS]) == 1
    assert fake["expand_fix"][-1] is False and fake["servers_fix"][-1] == [False, False]


def test_vllm_cpu_scoring_part_uses_the_speculation_off_server_alone_and_its_refusals_are_checked(fake, monkeypatch,
                                                                                                   tmp_path):
    """(b) without a local model: the n-gram server's tokens scored by the speculation-off server at T = 0 and T = 1
    (the TV bar), with the top 20 (INCONCLUSIVE: the cell passes when the check says so) and the top SCORING_K
    (servers with --max-logprobs SCORING_K, SCORING_SAMPLES per cell, no response record), its logprobs at T = 1, both servers in
    processed-logprobs mode; at T = 0.7 / top-p 0.9 the checks must refuse with exit 2 (the cell passes), and a
    check that gives a verdict there, or a PASS on the top 20, is exit 1."""
    seen = []
    recorded = campaign._run
    monkeypatch.setattr(campaign, "_run", lambda a, log, out, name: seen.append(a) or recorded(a, log, out, name))
    assert campaign.main(["--out", str(tmp_path / "s"), "--only", "scoring", "--model-dir", "/fake/model"]) == 0
    assert fake["started"] == [SERVERS[4]]
    k, n = str(campaign.SCORING_K), str(campaign.SCORING_SAMPLES)
    assert fake["extra"][-1] == [("--logprobs-mode", "processed_logprobs", "--max-logprobs", k)] * 2
    checks = {a[a.index("--json") + 1].rsplit("/", 1)[-1].removesuffix(".json"): a for a in seen if a[0] == "verify"}
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
    assert "logprobs" in checks["logprobs_ngram_score"]
    journal = [json.loads(line) for line in (tmp_path / "s" / "journal.jsonl").read_text().splitlines()]
    expected = [e for r in journal for e in r["record"]["log"] if "command_exit" in e]
    assert [(e["name"], e["exit"], e["command_exit"]) for e in expected] == [
        ("engine_ngram_score_top20", 0, 3), ("refused_score", 0, 2), ("refused_logprobs", 0, 2)]
    fake["refuses"] = False  # a verdict where none can be given: the campaign says so
    assert campaign.main(["--out", str(tmp_path / "t"), "--only", "scoring", "--model-dir", "/fake/model"]) == 1
