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

A campaign of the runner (harness.runner): every measurement (the binary, each probe, the logprobs honesty
(calibration then checks: one cell, the checks need its tolerance), each reproducer, the same-seed requests, each
token-law run, the bench) is a cell, run in this process against the servers the session holds, each started only
when a cell first needs it: a resumed, complete run starts none. The runner journals the cells (OUT/journal.jsonl),
resumes, stops at --stop-at / --budget-s (the README names the cells not run), and --fresh measures everything
again, the kept responses (OUT/responses, where a token-law run cut mid-cell resumes its requests) forgotten too.
The README is written from the cells' records. `--build-only` runs the binary cell alone, unjournaled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from pathlib import Path

from harness.configs import option
from harness.envelope import NOT_RECORDED
from harness.errors import HarnessError
from suites.campaigns._record import public_record
from suites.campaigns._servers import ENGINE_TV_BAR, Servers, not_run, not_run_lines, plain

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
    from harness.served.config import EngineConfig

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


def _logprobs_cell(on: str, off: str, samples: int) -> dict:
    """The logprobs honesty of both servers in both modes: first the calibration (speculation off against the
    float64 target at no tolerance, seed 1, raw and processed), whose largest |Δ| states the tolerance, then the
    checks at that tolerance (seed 0), speculation off (the control) and on. One cell: the checks need the
    calibration's number (a minute or two in all)."""
    spreads = {mode: max(c["max_abs_diff"] for c in _logprobs(off, api, mode, math.inf, 1, samples).cases
                         if "max_abs_diff" in c) for api, mode in APIS}
    tol = _tolerance(max(spreads.values()))
    checks = {f"logprobs/{mode}/speculation-{side}": _summary(_logprobs({"on": on, "off": off}[side], api, mode, tol,
                                                                         0, samples))
              for side in ("off", "on") for api, mode in APIS}
    return {"spreads": spreads, "tolerance": tol, "checks": checks}


def run_cell(kind: str, *args) -> dict:
    """One measurement -> {"value": its JSON record, "seconds": its wall time, the load around it} (the servers it
    asks for start on first use, outside the timing)."""
    servers, out = _HELD["servers"], _HELD["out"]
    runs = {r[0]: r for r in TOKEN_RUNS}
    if kind == "probe" or kind == "reproducer":
        url = servers[args[0]]
    elif kind in ("logprobs", "same-seed", "bench"):
        on, off = servers["on"], servers["off"]
    elif kind == "tokens":
        url = servers[runs[args[0]][1]]
    started, load = time.perf_counter(), os.getloadavg()
    if kind == "binary":
        value = _binary()
    elif kind == "probe":
        value = _probe(url, args[1])
    elif kind == "logprobs":
        value = _logprobs_cell(on, off, *args)
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


def _sizes(config) -> tuple[int | None, int, int]:
    """(continuations per sampling cell or None: each run's own plan, logprobs continuations, same-seed requests)."""
    quick = config.quick
    return config.samples or (60 if quick else None), 4 if quick else LOGPROBS_SAMPLES, 4 if quick else 16


def cells(config) -> dict[str, tuple]:
    """The measurements in run order: the binary, the probes, the logprobs honesty, the reproducers, the same-seed
    requests, the token-law runs, the bench (`--build-only`: the binary alone)."""
    if config.build_only:
        return {"binary": ("binary",)}
    samples, lp, seeds = _sizes(config)
    out: dict[str, tuple] = {"binary": ("binary",)}
    out.update({f"probe/{side}/{api}": ("probe", side, api) for side in ("on", "off") for api in ("openai", "llama-server")})
    out[f"logprobs/n={lp}"] = ("logprobs", lp)
    out.update({f"reproducer/{side}": ("reproducer", side) for side in ("on", "off")})
    out[f"same-seed/n={seeds}"] = ("same-seed", seeds)
    for run_ in TOKEN_RUNS:
        n, length = plan(run_, samples)
        out[f"tokens/{run_[0]}/n={n}/length={length}"] = ("tokens", run_[0], n, length, run_[4])
    out["bench/quick" if config.quick else "bench"] = ("bench", config.quick)
    return out


def finding_record(config, planned: dict, done: dict, load_at_start) -> dict:
    """finding.json's record, built from the cells' records; `not_run` names the cells cut short."""
    samples, lp, seeds = _sizes(config)
    value = {k: v["value"] for k, v in done.items()}
    record: dict = {**value.get("binary", {"binary": None, "version": None}), "tv_bar": ENGINE_TV_BAR,
                    "plans": {r[0]: dict(zip(("samples", "length"), plan(r, samples), strict=True)) for r in TOKEN_RUNS},
                    "prompt": PROMPT, "slots": SLOTS, "chunk": CHUNK, "concurrency": CONCURRENCY,
                    "load_at_start": load_at_start, "checks": {},
                    "probe": {k.removeprefix("probe/"): v for k, v in value.items() if k.startswith("probe/")}}
    logprobs = value.get(f"logprobs/n={lp}")
    if logprobs:
        record.update(calibration_spread_nats=max(logprobs["spreads"].values()), tolerance_nats=logprobs["tolerance"])
        record["checks"].update(logprobs["checks"])
    if all(f"reproducer/{side}" in value for side in ("on", "off")):
        record["reproducer"] = {side: value[f"reproducer/{side}"] for side in ("on", "off")}
    if f"same-seed/n={seeds}" in value:
        record["same_seed_identity"] = value[f"same-seed/n={seeds}"]
    for key, cell in planned.items():
        if key in value and cell[0] == "tokens":
            record["checks"][f"tokens/{cell[1]}"] = value[key]
    bench = "bench/quick" if config.quick else "bench"
    if bench in value:
        record["bench_exit"] = value[bench]
    record["seconds"] = sum(v["seconds"] for v in done.values())
    record["load_at_start"], record["load_at_end"] = _measured_load(done, load_at_start)
    record["not_run"] = not_run(planned, done)
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


# --- the campaign (harness.runner): Config, cells (above), run_cell (above), report -------------------------------

WHERE = "local"  # the cells run in this process, against the servers it holds
KEPT = ("responses",)  # the token-law runs' kept responses: --fresh measures them again too
_HELD: dict = {}  # while the session lasts: "servers" (started on first use), "out", "load_at_start"
DIAGNOSIS = "tokens/" + TOKEN_RUNS[0][0]  # the undeclared convention: FAILs by design (the diagnosis names it)


@dataclasses.dataclass
class Config:
    """`specdec campaign llama_server`: its flags (harness.configs.option)."""

    build_only: bool = option(False, "--build-only", "build (or find) llama-server, print its path and stop (no "
                              "journal, no report)", action="store_true")
    quick: bool = option(False, "--quick", "a few samples only (a smoke run)", action="store_true")
    samples: int | None = option(None, "--samples", f"continuations per sampling cell (default: {POWER_SAMPLES} of "
                                 f"{POWER_LENGTH} tokens in the runs expected to pass, {SAMPLES} of {LENGTH} in the "
                                 "diagnosis)", int, "N")


def validate(config: Config) -> None:
    if config.samples is not None and config.samples < 1:
        raise HarnessError(f"--samples must be >= 1, got {config.samples}")


def journaled(config: Config) -> bool:
    return not config.build_only  # --build-only always builds or finds the binary (build_llama_server caches it)


def provenance_fields(config: Config) -> dict:
    return {"seed": 0, "dtype": NOT_RECORDED}  # the GGUF's dtype is the server's own


@contextlib.contextmanager
def session(config: Config, out):
    """Both servers (speculation on and off), each started when a cell first needs it (a resumed, complete run
    starts none), stopped after the report."""
    out = Path(out)
    with Servers(on=lambda: _server(out, "on", "on"), off=lambda: _server(out, "off", "off")) as servers:
        _HELD.update(servers=servers, out=out, load_at_start=os.getloadavg())
        try:
            yield
        finally:
            _HELD.clear()


def report(run) -> int:
    """finding.json and README.md from the finished cells (`--build-only`: the binary's path). Exit 1: a check of
    llama-server FAILs (its logprobs, its token law under a declared convention or with truncation off, the
    control); the undeclared-convention run FAILs by design and does not count; 0 otherwise."""
    if run.config.build_only:
        print(run.done["binary"]["value"]["binary"] if "binary" in run.done else "llama-server: not built")
        return 0
    record = finding_record(run.config, run.cells, run.done, _HELD.get("load_at_start", os.getloadavg()))
    run.write_result("finding.json", "campaign.llama_server", report=record, summary={"not_run": record["not_run"]})
    run.write_text("README.md", report_md(record, run.command) + public_record(run.out))
    print(f"wrote {run.out / 'README.md'}: " + ", ".join(f"{k} {v['verdict']}" for k, v in record["checks"].items())
          + (f"; not run: {', '.join(record['not_run'])}" if record["not_run"] else ""))
    return 1 if any(v["verdict"] == "fail" for k, v in record["checks"].items() if k != DIAGNOSIS) else 0
