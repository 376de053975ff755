"""results/findings/llama-server: llama.cpp's own llama-server with a draft model, checked over HTTP.

`nox -s engines` runs it (`specdec campaign llama_server --out results/findings/llama-server`);
`--build-only` just builds (or finds) the binary. Two servers on 127.0.0.1, started and stopped here:
SmolLM2-135M-Instruct as an F32 GGUF (the dequantized weights the project serves to transformers),
with the embedded Q4_1 GGUF as draft (speculation on) and without it (off). Recorded:

1. `specdec probe` of both, on the OpenAI route and on the native one (`--api llama-server`);
2. logprobs honesty (`--engine-checks logprobs`, native API): raw logprobs (`n_probs`) and processed
   ones (`post_sampling_probs`) against the local float64 target, speculation on and off; the spread
   measured with speculation off on calibration seeds states the numerics tolerance; one native request
   sent to both servers, as returned (the reproducer);
3. the same seeded requests to both servers: how many continuations are identical;
4. the token law (`verify --level engine`, local target) on an open prompt (TOKEN_RUNS): llama-server's
   defaults under the documented order (the diagnosis must name `llama_cpp`) and with `--processing-order
   llama_cpp` declared; truncation off under the documented order; the speculation-off server with the
   convention declared (the control); greedy equality with the local target. The runs expected to pass are at
   480 continuations of up to 16 tokens per cell (detectable TV ≤ 0.05), the undeclared diagnosis at 200 × 4;
   every run judged at `--inconclusive-tv 0.05`;
5. `specdec bench --endpoint`: speculation on vs off by concurrency and prompt category.

Every measurement (each probe, each logprobs calibration and check, each reproducer, the same-seed
requests, each token-law run, the bench) is a cell of `harness.executor.run_cells`, run in
this process against the servers it holds and journaled in OUT/journal.jsonl: a rerun resumes the cells not yet
finished and starts a server only for a cell that needs it (`--stop-at` / `--budget-s`: no cell starts after
them, the README names the cells not run; `--fresh`: every cell again, the kept responses forgotten too). The
README is written from the journal's records. Within a token-law run the responses are kept under OUT/responses,
so a run cut mid-cell resumes its requests there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

from harness.configs import Parser, add_arguments, option
from harness.executor import Journal, LocalExecutor, add_runner_arguments, deadline, run_cells
from suites.campaigns._servers import ENGINE_TV_BAR, Servers, campaign_journal, not_run, not_run_lines, plain
from suites.outputs import FOLDERS

# The plan (policy): sized for a shared 2-core machine. Two plans for the token-law runs:
# - the diagnosis (the documented order with llama-server's defaults undeclared): 200 continuations of 4 tokens,
#   which FAILS it and names the convention (it is judged at the same bar: a pass there would be INCONCLUSIVE);
# - every run expected to PASS (the convention declared, or truncation off): 480 continuations of up to 16 tokens
#   per cell, so that each cell's pooled PIT reaches detectable TV ≤ ENGINE_TV_BAR (0.0446 measured at T = 1:
#   TV falls as 1/sqrt(scored tokens), ~6,000 per cell; the open prompt's sentence often ends on EOS before 16).
SAMPLES, LENGTH = 200, 4
POWER_SAMPLES, POWER_LENGTH = 480, 16
SLOTS = 8  # llama-server slots (-np): continuations of one request decode in one batch (n_cmpl)
CHUNK, CONCURRENCY = 4, 2  # continuations per request (n_cmpl), requests in flight
LOGPROBS_SAMPLES = 8
SPREAD_FACTOR = 4  # tolerance = this × the largest |Δ| measured with speculation off on calibration seeds
# An open prompt: SmolLM2's own first prompt is so peaked that llama.cpp's default truncation changes its law
# by less than any affordable plan detects; on this one the truncation moves 5–35 % of the mass per position.
PROMPT = "Write one sentence about a cat."
BENCH = ["--concurrency", "1,2", "--max-new-tokens", "32", "--categories", "code,qa,summarization,translation",
         "--prompts", "2"]  # the first two per category: the cost (and the prompts) of the runs in results/
# (name, server, extra body, declared order, settings): the token-law cells
TOKEN_RUNS = (
    ("speculation-on, defaults, documented order", "on", None, "standard", ("T=0", "T=0.7", "T=1")),
    ("speculation-on, defaults, --processing-order llama_cpp", "on", None, "llama_cpp", ("T=0.7", "T=1")),
    ("speculation-on, truncation off, documented order", "on", "no-truncation", "standard", ("T=1",)),
    ("speculation-off, defaults, --processing-order llama_cpp", "off", None, "llama_cpp", ("T=1",)),
)


def plan(run: tuple, samples: int | None = None) -> tuple[int, int]:
    """(continuations per cell, new tokens per continuation) of a token-law run: the power plan for a run expected to
    pass (its convention declared, or truncation off), the diagnosis plan otherwise; `samples` overrides the count."""
    powered = run[3] == "llama_cpp" or run[2] == "no-truncation"
    n, length = (POWER_SAMPLES, POWER_LENGTH) if powered else (SAMPLES, LENGTH)
    return samples or n, length


def _config(url: str, **kw):
    from harness.served.check import EngineConfig

    base = dict(endpoint=url, pair="smollm2", api="llama-server", samples=SAMPLES, length=LENGTH, prompts=1,
                prompt_texts=(PROMPT,), chunk=CHUNK, concurrency=CONCURRENCY, seed=0, timeout_s=900.0,
                stop_on_fail=False)
    return EngineConfig(**{**base, **kw})


def _cells(d: dict) -> list[dict]:
    """Per cell: samples, the detectable TV of its gating omnibus tests, its smallest p, its seconds."""
    rows = []
    for c in d["cases"]:
        tests = [t for t in d["tests"] if t["name"].startswith(c["name"] + "/")]
        tvs = [t["detectable_tv"] for t in tests if t.get("detectable_tv") and t["name"].endswith(("pit_uniform", "joint"))]
        rows.append({"name": c["name"], "samples": c.get("samples"), "detectable_tv": max(tvs) if tvs else None,
                     "min_p": min((t["p_value"] for t in tests if t.get("p_value") is not None), default=None),
                     "rejected": [t["name"] for t in tests if t.get("reject")][:10],
                     "vacuous": c.get("vacuous", False),
                     "consistent_conventions": c.get("consistent_conventions"), "divergences": c.get("divergences")})
    return rows


def _summary(report) -> dict:
    d = report.to_dict()
    keep = ("verdict", "samples", "detectable_tv", "seconds", "notes", "failure_summary", "declared_tests")
    cases = [{k: v for k, v in c.items() if k in ("name", "samples", "max_abs_diff", "p99_abs_diff", "compared",
                                                   "bad_sampled", "bad_top", "first_mismatch", "logprobs_mode",
                                                   "consistent_conventions", "divergences")} for c in d["cases"]]
    rejected = [t["name"] for t in d["tests"] if t.get("reject")]
    return {**{k: d.get(k) for k in keep}, "cases": cases, "cells": _cells(d), "rejected": rejected[:20],
            "tests": len(d["tests"])}


def reproducer(url: str, prompt_ids: list[int]) -> dict:
    """One native request (greedy, n_probs 3) and the first entries of what comes back: the logprobs finding."""
    import httpx

    body = {"prompt": prompt_ids, "n_predict": 6, "temperature": 0.0, "seed": 0, "n_probs": 3,
            "return_tokens": True, "cache_prompt": False}
    reply = httpx.post(url + "/completion", json=body, timeout=600).json()
    probs = [{"id": e.get("id"), "logprob": e.get("logprob"),
              "top_logprobs": [(t.get("id"), t.get("logprob")) for t in e.get("top_logprobs") or []]}
             for e in reply.get("completion_probabilities") or []]
    return {"request": {"route": "POST /completion", "body": body}, "tokens": reply.get("tokens"),
            "completion_probabilities": probs}


def same_seed_identity(on: str, off: str, prompt_ids: list[int], seeds: int = 16) -> dict:
    """The same seeded requests (T = 1, truncation off, 16 tokens) to both servers: how many continuations are
    identical (all of them if its speculation is sample-and-match: the target's token drawn with the request's
    RNG, the draft tokens kept while they match)."""
    import httpx

    from harness.served.llama_server import NO_TRUNCATION

    same = 0
    for seed in range(seeds):
        body = {"prompt": prompt_ids, "n_predict": 16, "temperature": 1.0, "seed": 7_000 + seed, "return_tokens": True,
                "cache_prompt": False, **NO_TRUNCATION}
        a, b = (httpx.post(url + "/completion", json=body, timeout=600).json()["tokens"] for url in (on, off))
        same += a == b
    return {"requests": seeds, "identical": same, "tokens": 16, "setting": "T=1, truncation off"}


APIS = (("llama-server", "raw"), ("llama-server-processed", "processed"))  # logprobs: (api, mode)


def _server(out: Path, side: str, log: str):
    """The start of one server (for `Servers`): llama-server found or built, the draft on (`on`) or not (`off`)."""
    from harness.served.llama_server import build_llama_server, llama_server

    build_llama_server()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    return llama_server(draft=side == "on", slots=SLOTS, log_path=str(out / "logs" / f"{log}.log"))


def _check(config):
    """`run_engine_check` (one place, so a test can stand in for the engine)."""
    from harness.served.check import run_engine_check

    return run_engine_check(config)


def _probe(url: str, api: str) -> dict:
    from harness.served.probe import probe

    return probe(url, api=api)


def _binary() -> dict:
    from harness.served.llama_server import build_llama_server, version

    binary = build_llama_server()
    return {"binary": str(binary), "version": version(binary)}


def _prompt_ids() -> list[int]:
    from harness.models.smollm2 import load_smollm2
    from harness.prompts import Prompt, encode_prompts

    return encode_prompts(load_smollm2()[1], [Prompt("p", "custom", PROMPT)])[0]


def _logprobs(url: str, api: str, mode: str, tol: float, seed: int, samples: int):
    from harness.check.settings import parse_setting
    from harness.served.llama_server import NO_TRUNCATION

    plain = tuple(s for t in ("T=1", "T=0.7") for s in parse_setting(t))
    return _check(_config(url, api=api, checks=("logprobs",), settings=plain, seed=seed, logprobs_samples=samples,
                          length=16, logprob_tolerance=tol, extra_body=NO_TRUNCATION, logprobs_mode=mode))


def _token_law(url: str, *, samples: int, length: int, texts, extra, order: str, responses: str):
    from harness.check.settings import parse_setting
    from harness.served.llama_server import NO_TRUNCATION

    settings = tuple(s for t in texts for s in parse_setting(t))
    return _check(_config(url, samples=samples, length=length, settings=settings, out=responses,
                          extra_body=NO_TRUNCATION if extra else None, processing_order=order,
                          inconclusive_tv=ENGINE_TV_BAR))


def _bench(on: str, off: str, out: Path, quick: bool) -> int:
    from harness.cli import main as specdec

    command = ["bench", "--endpoint", on + "/v1", "--reference-endpoint", off + "/v1", *BENCH,
               "--out", str(out), "--run", "bench"]
    return specdec(command + (["--quick"] if quick else []))


def _cell(servers, out: Path, kind: str, *args) -> dict:
    """One measurement -> {"value": its JSON record, "seconds": its wall time} (the servers it asks for start on
    first use, outside the timing)."""
    runs = {r[0]: r for r in TOKEN_RUNS}
    if kind in ("probe", "calibration", "logprobs", "reproducer"):
        url = servers[{"calibration": "off"}.get(kind, args[0])]
    elif kind in ("same-seed", "bench"):
        on, off = servers["on"], servers["off"]
    elif kind == "tokens":
        url = servers[runs[args[0]][1]]
    started, load = time.perf_counter(), os.getloadavg()
    if kind == "binary":
        value = _binary()
    elif kind == "probe":
        value = _probe(url, args[1])
    elif kind == "calibration":  # the spread of speculation off against the float64 target, on other seeds
        api, mode, samples = args
        value = max(c["max_abs_diff"] for c in _logprobs(url, api, mode, math.inf, 1, samples).cases
                    if "max_abs_diff" in c)
    elif kind == "logprobs":
        _, api, mode, tol, samples = args
        value = _summary(_logprobs(url, api, mode, tol, 0, samples))
    elif kind == "reproducer":
        value = reproducer(url, _prompt_ids())
    elif kind == "same-seed":
        value = same_seed_identity(on, off, _prompt_ids(), args[0])
    elif kind == "bench":
        value = _bench(on, off, out, args[0])
    else:  # a token-law run
        name, samples, length, texts = args
        _, _, extra, order, _ = runs[name]
        report = _token_law(url, samples=samples, length=length, texts=texts, extra=extra, order=order,
                            responses=str(out / "responses"))
        value = _summary(report)
        value.update(length=length, tokens_per_cell={c["name"]: c.get("tokens") for c in report.to_dict()["cases"]})
        print(f"[llama_server] tokens/{name}: {report.verdict}, detectable TV {report.detectable_tv:.3g} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    return plain({"value": value, "seconds": time.perf_counter() - started, "load_at_start": load,
                  "load_at_end": os.getloadavg(), "utc_end": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


def _measured_load(done: dict, fallback) -> tuple:
    """(load average when the first measured cell started, when the last one ended), from the cells' own records
    (a resumed run reports the load its measurements ran under, not the load of the run that rewrote the report)."""
    timed = sorted((v for v in done.values() if "utc_end" in v), key=lambda v: v["utc_end"])
    if not timed:
        return fallback, fallback
    return timed[0]["load_at_start"], timed[-1]["load_at_end"]


def _tolerance(spread: float) -> float:
    return float(f"{SPREAD_FACTOR * spread:.1g}")


def run(out: Path, quick: bool = False, samples: int | None = None, *, journal: Journal | None = None,
        stop=None) -> dict:
    """Every measurement of the finding as a cell of `run_cells` (journal: a rerun resumes; stop: no cell starts
    once it says so); the record (finding.json) is built from the cells' records, `not_run` naming the rest.
    The logprobs checks run at the tolerance the calibration cells give, so they are planned after them."""
    samples = samples or (60 if quick else None)  # None: each run's own plan
    lp, seeds = 4 if quick else LOGPROBS_SAMPLES, 4 if quick else 16
    load_at_start = os.getloadavg()
    first: dict[str, tuple] = {"binary": ("binary",)}
    first.update({f"probe/{side}/{api}": ("probe", side, api) for side in ("on", "off") for api in ("openai", "llama-server")})
    first.update({f"calibration/{mode}/n={lp}": ("calibration", api, mode, lp) for api, mode in APIS})
    with Servers(on=lambda: _server(out, "on", "on"), off=lambda: _server(out, "off", "off")) as servers, \
            LocalExecutor() as here:  # in this process: the servers are its own
        measure = lambda *a: _cell(servers, out, *a)  # noqa: E731
        done = run_cells(here, measure, first, journal=journal, stop=stop)
        spread = [done[f"calibration/{mode}/n={lp}"]["value"] for _, mode in APIS if f"calibration/{mode}/n={lp}" in done]
        tol = _tolerance(max(spread)) if len(spread) == len(APIS) else None
        second: dict[str, tuple] = {}
        unplanned = []  # the logprobs checks, when the calibration they need was cut short
        for side in ("off", "on"):
            for api, mode in APIS:
                if tol is None:
                    unplanned.append(f"logprobs/{mode}/speculation-{side}/n={lp}")
                else:
                    second[f"logprobs/{mode}/speculation-{side}/n={lp}/tol={tol:g}"] = ("logprobs", side, api, mode, tol, lp)
        second.update({f"reproducer/{side}": ("reproducer", side) for side in ("on", "off")})
        second[f"same-seed/n={seeds}"] = ("same-seed", seeds)
        for run_ in TOKEN_RUNS:
            n, length = plan(run_, samples)
            second[f"tokens/{run_[0]}/n={n}/length={length}"] = ("tokens", run_[0], n, length, run_[4])
        second["bench/quick" if quick else "bench"] = ("bench", quick)
        done.update(run_cells(here, measure, second, journal=journal, stop=stop))
    value = {k: v["value"] for k, v in done.items()}
    record: dict = {**value.get("binary", {"binary": None, "version": None}), "tv_bar": ENGINE_TV_BAR,
                    "plans": {r[0]: dict(zip(("samples", "length"), plan(r, samples), strict=True)) for r in TOKEN_RUNS},
                    "prompt": PROMPT, "slots": SLOTS, "chunk": CHUNK, "concurrency": CONCURRENCY,
                    "load_at_start": load_at_start, "checks": {},
                    "probe": {k.removeprefix("probe/"): v for k, v in value.items() if k.startswith("probe/")}}
    if tol is not None:
        record.update(calibration_spread_nats=max(spread), tolerance_nats=tol)
    for key, cell in second.items():
        if key in value and cell[0] == "logprobs":
            record["checks"][f"logprobs/{cell[3]}/speculation-{cell[1]}"] = value[key]
    if all(f"reproducer/{side}" in value for side in ("on", "off")):
        record["reproducer"] = {side: value[f"reproducer/{side}"] for side in ("on", "off")}
    if f"same-seed/n={seeds}" in value:
        record["same_seed_identity"] = value[f"same-seed/n={seeds}"]
    for key, cell in second.items():
        if key in value and cell[0] == "tokens":
            record["checks"][f"tokens/{cell[1]}"] = value[key]
    bench = "bench/quick" if quick else "bench"
    if bench in value:
        record["bench_exit"] = value[bench]
    record["seconds"] = sum(v["seconds"] for v in done.values())
    record["load_at_start"], record["load_at_end"] = _measured_load(done, load_at_start)
    record["not_run"] = not_run({**first, **second}, done) + unplanned
    return record


def findings(record: dict) -> list[str]:
    """The headline statements, each computed from the record (none is written unless its numbers say so)."""
    checks, out = record["checks"], []
    for mode in ("raw", "processed"):
        on, off = checks.get(f"logprobs/{mode}/speculation-on"), checks.get(f"logprobs/{mode}/speculation-off")
        if not (on and off):
            continue
        bad = sum(c.get("bad_sampled", 0) for c in on["cases"])
        total = sum(c.get("compared", 0) for c in on["cases"])
        out.append(f"Logprobs honesty ({mode}): speculation off **{off['verdict'].upper()}**, speculation on "
                   f"**{on['verdict'].upper()}** ({bad} of {total} sampled-token logprobs off by more than "
                   f"{record['tolerance_nats']:g} nats).")
    rep = (record.get("reproducer") or {}).get("on")
    if rep:
        probs = rep["completion_probabilities"]
        zero = [i for i, e in enumerate(probs) if e["logprob"] == 0 and not e["top_logprobs"]]
        if zero:
            same = rep["tokens"] == record["reproducer"]["off"]["tokens"]
            off_zero = sum(e["logprob"] == 0 for e in record["reproducer"]["off"]["completion_probabilities"])
            out.append(f"The reproducer (one greedy native request, below): with speculation on, {len(zero)} of "
                       f"{len(probs)} returned tokens carry logprob 0.0 and an empty top list (positions "
                       f"{', '.join(map(str, zero))}); with speculation off, {off_zero} do. "
                       + ("The tokens are the same on both servers: the logprobs are wrong, not the tokens (the bug "
                          "class of llama.cpp #27972)." if same else "The tokens differ between the servers."))
    undeclared = checks.get("tokens/speculation-on, defaults, documented order")
    if undeclared:
        named = sorted({o for c in undeclared["cells"] for o in (c["consistent_conventions"] or [])})
        failed = [c["name"] for c in undeclared["cells"] if c["rejected"]]
        out.append(f"Sampler chain undeclared: **{undeclared['verdict'].upper()}** (cells rejected: "
                   f"{', '.join(failed) or 'none'}); the diagnosis names "
                   f"{', '.join(f'`{n}`' for n in named) or 'no convention'}.")
    for name in ("speculation-on, defaults, --processing-order llama_cpp", "speculation-on, truncation off, documented order",
                 "speculation-off, defaults, --processing-order llama_cpp"):
        r = checks.get(f"tokens/{name}")
        if r:
            tvs = [c["detectable_tv"] for c in r["cells"] if c["detectable_tv"]]
            out.append(f"{name}: **{r['verdict'].upper()}** ({r['samples']} samples; detectable TV per cell "
                       f"{', '.join(f'{t:.3g}' for t in tvs)}).")
    greedy = [c for r in checks.values() if "cells" in r for c in r["cells"] if c["name"] == "greedy"]
    if greedy:
        out.append(f"Greedy equality with the local target: {sum(len(c['divergences'] or []) for c in greedy)} "
                   "divergences.")
    return out


def power_lines(record: dict) -> list[str]:
    """The power paragraph: each sampling cell's detectable TV against the bar, as measured (no projection)."""
    cells = [(name[7:], r["verdict"], c) for name, r in record["checks"].items() if name.startswith("tokens/")
             for c in r["cells"] if c["detectable_tv"]]
    if not cells:
        return []
    bar = record["tv_bar"]
    above = [(n, v, c) for n, v, c in cells if c["detectable_tv"] > bar]
    passing = [c["detectable_tv"] for n, v, c in cells if v == "pass"]
    text = f"Power: {len(cells) - len(above)} of {len(cells)} sampling cells reached detectable TV ≤ {bar:g} (power 0.99)"
    if passing:
        text += f"; the cells of the passing runs {min(passing):.3g}–{max(passing):.3g}"
    text += "."
    if above:
        text += " Above the bar: " + "; ".join(
            f"{n} {c['name']} ({c['detectable_tv']:.3g}, run verdict {v.upper()}"
            + (": rejected, so its power does not limit the verdict)" if c["rejected"] else ")") for n, v, c in above) + "."
    return [text]


def report_md(record: dict, command: str) -> str:
    """README.md of the finding, written from `record` only (every number below was measured by this run)."""
    from harness.served.cli import probe_table

    def fmt(x, spec=".3g"):
        return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)

    load = lambda la: " / ".join(f"{x:.2f}" for x in la)  # noqa: E731
    lines = ["# llama.cpp `llama-server` with a draft model (SmolLM2-135M-Instruct)", "",
             f"Command: `{command}` ({record['seconds'] / 60:.1f} min on a shared 2-core machine; load average "
             f"{load(record['load_at_start'])} at the start, {load(record['load_at_end'])} at the end). Binary: "
             f"`{record['version']}` built from the llama.cpp vendored in the llama-cpp-python 0.3.36 sdist "
             "(cmake target `llama-server` only).", "",
             "Servers: target = the F32 GGUF written from the embedded Q4_1 GGUF's dequantized tensors (the weights "
             "transformers serves here); speculation on = `--spec-type draft-simple -md SmolLM2-135M-Instruct.Q4_1.gguf "
             f"--spec-draft-n-max 4 --spec-draft-n-min 0`; 1 thread, {record['slots']} slots, on 127.0.0.1. Requests go "
             "to the native `/completion` (`return_tokens`, `n_probs`, `post_sampling_probs`, `cache_prompt` false), "
             f"{record['chunk']} continuations per request (`n_cmpl`, seeds seed, seed + 1, ...), {record['concurrency']} "
             f"in flight. Prompt (a chat turn): `{record['prompt']}`. Token-law plans (continuations per sampling cell × "
             "new tokens each): " + "; ".join(f"{name}: {p['samples']} × {p['length']}" for name, p in record["plans"].items())
             + f". Every token-law run is judged at the bar `--inconclusive-tv {record['tv_bar']}` (a passing cell above "
             "it would be INCONCLUSIVE). Ground truth: the local float64 transformers target.", "",
             *([f"Logprobs tolerance: {record['tolerance_nats']:g} nats = {SPREAD_FACTOR} × the largest |Δ| "
                f"({record['calibration_spread_nats']:.3g} nats) measured between llama-server with speculation off "
                "and the float64 transformers target on calibration seeds (raw and processed). The checks below run on "
                "other seeds.", ""] if "tolerance_nats" in record else []),
             *not_run_lines(record.get("not_run", [])),
             "## Findings", "", *[f"- {f}" for f in findings(record)], "",
             "| check | verdict | samples | detectable TV | rejected tests | seconds |", "|---|---|---|---|---|---|"]
    for name, r in record["checks"].items():
        lines.append(f"| {name} | **{r['verdict'].upper()}** | {r['samples']} | {fmt(r['detectable_tv'])} | "
                     f"{len(r['rejected'])} of {r['tests']} | {r['seconds']:.0f} |")
    lines += ["", "## Token-law cells", "",
              "| run | cell | samples | detectable TV (power 0.99) | smallest p | rejected | consistent conventions |",
              "|---|---|---|---|---|---|---|"]
    for name, r in record["checks"].items():
        if not name.startswith("tokens/"):
            continue
        for c in r["cells"]:
            extra = (f"greedy divergences: {len(c['divergences'])}" if c["name"] == "greedy"
                     else ", ".join(c["consistent_conventions"] or []) or "–")
            lines.append(f"| {name[7:]} | {c['name']} | {c['samples']} | {fmt(c['detectable_tv'])} | "
                         f"{fmt(c['min_p'])} | {len(c['rejected'])} | {extra} |")
    lines += ["", *power_lines(record)]
    lines += ["", "Diagnosis notes (verbatim from the reports):", ""]
    for name, r in record["checks"].items():
        for n in r["notes"]:
            if "convention" in n or "FINDING" in n or "vacuous" in n or "greedy" in n:
                lines.append(f"- {name}: {n}")
    lines += ["", "## Logprobs honesty: where the values differ", ""]
    for name, r in record["checks"].items():
        if not name.startswith("logprobs/"):
            continue
        for c in r["cases"]:
            if "compared" in c:
                lines.append(f"- {name} {c['name']}: {c['compared']} tokens, {c['bad_sampled']} sampled-token "
                             f"logprobs and {c['bad_top']} top-k listings off by more than "
                             f"{record['tolerance_nats']:g} nats; largest |Δ| {fmt(c['max_abs_diff'])}, 99th "
                             f"percentile {fmt(c['p99_abs_diff'])}; first mismatch "
                             f"`{json.dumps(c.get('first_mismatch', {}).get('sampled'))[:200]}`")
    rep = record.get("reproducer")
    if rep:
        lines += ["", "The request that shows it (sent to both servers; `completion_probabilities` as returned, "
                  "first entries):", "", "```", json.dumps(rep["on"]["request"]), "```", ""]
        for side in ("off", "on"):
            probs = rep[side]["completion_probabilities"]
            lines.append(f"- speculation {side}: tokens {rep[side]['tokens']}; (id, logprob, top-3) " + "; ".join(
                f"({e['id']}, {fmt(e['logprob'], '.4g')}, {[(i, round(v, 3)) for i, v in e['top_logprobs']]})"
                for e in probs[:4]))
    ident = record.get("same_seed_identity")
    if ident:
        lines += ["", f"## Speculation on vs off, same seeds: {ident['identical']} of {ident['requests']} continuations "
                  f"identical", "", f"The same seeded native requests ({ident['setting']}, {ident['tokens']} tokens) to "
                  "both servers. " + ("Every continuation identical: llama-server's draft speculation draws the "
                  "target's token with the request's RNG and keeps the draft tokens that match (sample-and-match), "
                  "lossless by construction; the token-law cells above test its sampler chain and batching more "
                  "than a verification rule." if ident["identical"] == ident["requests"] else
                  "Not all identical: the speculative path draws its tokens differently from the plain one, so the "
                  "token-law cells above are what says whether the law is kept.")]
    for key, info in record["probe"].items():
        side, api = key.split("/")
        lines += ["", f"## `specdec probe --api {api}`, speculation {side}", "", "```", probe_table(info), "```"]
    if "bench_exit" in record:
        lines += ["", f"## Bench (speculation on vs off): [bench/report.md](bench/report.md) (exit {record['bench_exit']})"]
    lines += [""]
    return "\n".join(lines) + "\n"


@dataclasses.dataclass
class Config:
    """`specdec campaign llama_server`: its flags (harness.configs.option)."""

    out: str = option(FOLDERS["campaign.llama_server"], "--out", "results folder (default: suites/outputs.py)", metavar="DIR")
    build_only: bool = option(False, '--build-only', "build (or find) llama-server and stop", action='store_true')
    quick: bool = option(False, '--quick', "a few samples only (a smoke run)", action='store_true')
    samples: int | None = option(None, '--samples', f"continuations per sampling cell (default: {POWER_SAMPLES} of "
                        f"{POWER_LENGTH} tokens in the runs expected to pass, {SAMPLES} of {LENGTH} in the diagnosis)", int)


def argument_parser() -> argparse.ArgumentParser:
    """`specdec campaign llama_server`: every flag from a config field (Config, the runner's)."""
    parser = Parser(prog='specdec campaign llama_server', description=__doc__.split("\n")[0])
    add_arguments(parser, Config)
    add_runner_arguments(parser, where=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    from harness.envelope import NOT_RECORDED, write_result
    from harness.errors import HarnessError
    from harness.records import atomic_write_text, provenance

    parser = argument_parser()
    args = parser.parse_args(argv)
    try:
        if args.build_only:
            from harness.served.llama_server import build_llama_server

            print(build_llama_server())
            return 0
        out = Path(args.out)
        runner = {"journal": campaign_journal(out, args.fresh), "stop": deadline(args.stop_at, args.budget_s)}
        record = run(out, quick=args.quick, samples=args.samples, **runner)
        write_result(out / "finding.json", "campaign.llama_server", config=args,  # the GGUF dtype is the server's
                     provenance={**provenance(seed=0), "dtype": NOT_RECORDED},
                     report=json.loads(json.dumps(record, default=str)), summary={"not_run": record["not_run"]})
        command = "specdec campaign llama_server " + " ".join(argv if argv is not None else sys.argv[1:])
        atomic_write_text(out / "README.md", report_md(record, command.strip()))
        print(f"wrote {out / 'README.md'}: " + ", ".join(f"{k} {v['verdict']}" for k, v in record["checks"].items())
              + (f"; not run: {', '.join(record['not_run'])}" if record["not_run"] else ""))
        return 0
    except HarnessError as exc:
        print(f"llama_server finding: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
