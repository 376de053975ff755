"""`specdec bench --endpoint URL --reference-endpoint URL_NO_SPEC`: a served engine's speedup over HTTP.

The same prompt catalogue is sent to the engine with speculation on and to the same engine with
speculation off, at each concurrency level (that many requests in flight; the two endpoints take
turns level by level, so both see the same machine load). Per request: completion tokens, wall
latency, time to first token and the gaps between streamed chunks (SSE `stream: true` where the
server streams; a server that refuses streaming is timed per request). Per level and endpoint:

- throughput = completion tokens of every request / wall time of the level;
- per-request decode rate = tokens / latency, and time per output token = (latency − TTFT) / (tokens − 1)
  when streamed (latency / tokens otherwise);
- inter-token latency (ITL) = the gaps between streamed chunks (a chunk may carry several tokens
  under speculation: the burstiness is the point);
- acceptance from `/metrics`, differenced over the level: vLLM's
  `vllm:spec_decode_num_accepted_tokens_per_pos_total{position}` / `vllm:spec_decode_num_drafts_total`
  (acceptance per draft position; llama-server has the same names under `llamacpp:`), `specdec serve`'s target
  passes per generated token. An engine that reports none of these gets none in the report.

Speedup = spec-on / spec-off at the same level, overall (throughput) and per category (median
per-request decode rate). Records (one JSON line per request) go to OUT/RUN/requests.jsonl, the
summary to rows.json / rows.csv, the figures and report.md next to them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.bench import conventions
from harness.errors import HarnessError

ROLES = ("spec", "nospec")


@dataclasses.dataclass
class HttpBenchConfig:
    endpoint: str
    reference_endpoint: str
    prompts: list[dict]  # [{id, category, text}] (suites.http_bench.catalogue)
    concurrency: tuple[int, ...] = (1, 2, 4)
    max_tokens: int = 64
    temperature: float = 0.0
    repeats: int = 1  # passes over the catalogue per level and endpoint
    seed: int = 0
    model: str | None = None
    reference_model: str | None = None
    timeout_s: float = 300.0
    stream: bool = True  # ask for SSE; falls back to whole replies where the server refuses
    extra_body: dict | None = None  # fields sent with every request (llama.cpp: top_k 0, min_p 0 ...)
    command: str | None = None

    def validate(self) -> HttpBenchConfig:
        for url in (self.endpoint, self.reference_endpoint):
            if not str(url).startswith(("http://", "https://")):
                raise HarnessError(f"--endpoint / --reference-endpoint must be http(s) URLs, got {url!r}")
        if not self.concurrency or min(self.concurrency) < 1:
            raise HarnessError(f"--concurrency values must be >= 1, got {list(self.concurrency)}")
        if self.max_tokens < 1 or self.repeats < 1 or not self.prompts:
            raise HarnessError("--max-new-tokens and --repeats must be >= 1 and the catalogue must have prompts")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise HarnessError(f"--temperature must be finite and >= 0, got {self.temperature}")
        return self


# ------------------------------------------------------------------------------------------ one request

def _sse_events(reply):
    for line in reply.iter_lines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            yield json.loads(data)
        except ValueError:
            continue


def timed_request(http, model: str, prompt: str, max_tokens: int, temperature: float, seed: int, stream: bool,
                  extra: dict | None) -> dict:
    """One completion, timed; {tokens, latency_s, ttft_s, gaps_s, streamed, text}."""
    body = {**(extra or {}), "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
            "seed": seed}
    start = time.perf_counter()
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
        with http.stream("POST", "/v1/completions", json=body) as reply:
            if 400 <= reply.status_code < 500:
                reply.read()
                return {"refused_stream": True, "status": reply.status_code}
            if reply.status_code >= 400:
                reply.read()
                raise HarnessError(f"{http.base_url} answered HTTP {reply.status_code}: {reply.text[:200]}")
            arrivals, chunks, usage, text = [], 0, None, []
            for event in _sse_events(reply):
                if event.get("usage"):
                    usage = event["usage"]
                for choice in event.get("choices") or []:
                    piece = choice.get("text") or ""
                    if piece or choice.get("token_ids"):
                        arrivals.append(time.perf_counter())
                        chunks += 1
                        text.append(piece)
        end = time.perf_counter()
        tokens = int(usage["completion_tokens"]) if usage and usage.get("completion_tokens") is not None else chunks
        gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
        return {"tokens": tokens, "latency_s": end - start, "ttft_s": (arrivals[0] - start) if arrivals else None,
                "gaps_s": gaps, "chunks": chunks, "streamed": True, "text": "".join(text)}
    reply = http.post("/v1/completions", json=body)
    end = time.perf_counter()
    if reply.status_code >= 400:
        raise HarnessError(f"{http.base_url} answered HTTP {reply.status_code}: {reply.text[:200]}")
    data = reply.json()
    usage = data.get("usage") or {}
    choice = (data.get("choices") or [{}])[0]
    tokens = usage.get("completion_tokens")
    if tokens is None:
        tokens = len(choice.get("token_ids") or []) or None
    if tokens is None:
        raise HarnessError(f"{http.base_url} reported no usage.completion_tokens: tokens/s cannot be measured")
    return {"tokens": int(tokens), "latency_s": end - start, "ttft_s": None, "gaps_s": [], "chunks": 1,
            "streamed": False, "text": choice.get("text", "")}


# ------------------------------------------------------------------------------------------ /metrics

_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(http) -> dict[str, float]:
    """Every sample of /metrics as {name{labels}: value}; {} when the server has no /metrics."""
    try:
        reply = http.get("/metrics")
    except Exception:  # noqa: BLE001 - an optional route: no metrics
        return {}
    if reply.status_code != 200:
        return {}
    out = {}
    for line in reply.text.splitlines():
        m = _SAMPLE.match(line.strip())
        if m and not line.startswith("#"):
            try:
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
            except ValueError:
                continue
    return out


def _total(samples: dict, name: str) -> float | None:
    """Sum of a metric over its label sets (None: the server does not have it)."""
    values = [v for k, v in samples.items() if k.split("{")[0] == name]
    return sum(values) if values else None


def _delta(before: dict, after: dict, name: str) -> float | None:
    now = _total(after, name)
    return None if now is None else now - (_total(before, name) or 0.0)


def acceptance(before: dict, after: dict) -> dict:
    """What the engine's counters say about speculation over one level (differenced); {} if nothing."""
    out: dict = {}
    for prefix, source in (("vllm:", "vllm"), ("llamacpp:", "llama.cpp")):  # llama-server mirrors vLLM's names
        drafts = _delta(before, after, f"{prefix}spec_decode_num_drafts_total")
        if not drafts:
            continue
        per_pos = {}
        for key in after:
            m = re.match(re.escape(prefix) + r'spec_decode_num_accepted_tokens_per_pos_total\{.*position="(\d+)"', key)
            if m:
                per_pos[int(m.group(1))] = after[key] - before.get(key, 0.0)
        accepted_at = [per_pos[j] for j in sorted(per_pos)]
        out["source"] = source
        out["acceptance_per_position"] = [a / drafts for a in accepted_at]  # unconditional (vLLM's convention)
        accepted = _delta(before, after, f"{prefix}spec_decode_num_accepted_tokens_total")
        drafted = _delta(before, after, f"{prefix}spec_decode_num_draft_tokens_total")
        if accepted is not None:
            out["mean_accepted_per_step"] = accepted / drafts
        if accepted is not None and drafted:
            out["draft_acceptance_rate"] = accepted / drafted
            out.update(conventions.spec_decode_fields(drafts, drafted, accepted, accepted_at))
    calls = _delta(before, after, "specdec_target_forward_calls_total")
    tokens = _delta(before, after, "specdec_generation_tokens_total")
    if calls and tokens is not None:  # the bench sends n = 1: one row per request
        out.setdefault("source", "specdec serve")
        out["tokens_per_target_call"] = tokens / calls
    return out


# ------------------------------------------------------------------------------------------ the run

def _at_concurrency(http, model: str, config: HttpBenchConfig, concurrency: int, role: str, concurrency_index: int,
                   on_record: Callable[[dict], None]) -> tuple[list[dict], float, bool]:
    """Every catalogue prompt × repeats, `concurrency` in flight; (records, wall seconds, streamed)."""
    jobs = [(r, p) for r in range(config.repeats) for p in config.prompts]
    stream = {"on": config.stream}
    lock = threading.Lock()

    def one(job):
        r, p = job
        seed = config.seed + 1000 * r + config.prompts.index(p)
        result = timed_request(http, model, p["text"], config.max_tokens, config.temperature, seed, stream["on"],
                               config.extra_body)
        if result.get("refused_stream"):
            with lock:
                stream["on"] = False
            result = timed_request(http, model, p["text"], config.max_tokens, config.temperature, seed, False,
                                   config.extra_body)
        record = {"role": role, "concurrency": concurrency, "repeat": r, "prompt": p["id"],
                  "category": p["category"], "seed": seed, **result}
        on_record(record)
        return record

    if config.stream:  # one request first: a server that refuses streaming is found before the timed level
        probe = timed_request(http, model, config.prompts[0]["text"], 1, config.temperature, 0, True,
                              config.extra_body)
        stream["on"] = not probe.get("refused_stream")
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        records = list(pool.map(one, jobs))
    return records, time.perf_counter() - started, stream["on"]


def _median(values) -> float:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(values) if values else math.nan


def _quantile(values, q: float) -> float:
    values = sorted(v for v in values if v is not None and math.isfinite(v))
    if not values:
        return math.nan
    return values[min(len(values) - 1, int(q * len(values)))]


def _tpot(r: dict) -> float:
    if r["streamed"] and r["ttft_s"] is not None and r["tokens"] > 1:
        return (r["latency_s"] - r["ttft_s"]) / (r["tokens"] - 1)
    return r["latency_s"] / max(1, r["tokens"])


def summarize(records: list[dict], walls: dict, metrics: dict, streamed: dict) -> list[dict]:
    """One row per (role, concurrency) and per (role, concurrency, category); speedups on the spec rows."""
    rows = []
    concurrencies = sorted({r["concurrency"] for r in records})
    for c in concurrencies:
        base = {}
        for role in ROLES:
            mine = [r for r in records if r["role"] == role and r["concurrency"] == c]
            if not mine:
                continue
            gaps = [g for r in mine for g in r["gaps_s"]]
            row = {"kind": "concurrency", "role": role, "concurrency": c, "requests": len(mine),
                   "tokens": sum(r["tokens"] for r in mine), "wall_s": walls[(role, c)],
                   "throughput_tokens_per_s": sum(r["tokens"] for r in mine) / walls[(role, c)],
                   "request_tokens_per_s_median": _median(r["tokens"] / r["latency_s"] for r in mine),
                   "tpot_ms_median": 1e3 * _median(_tpot(r) for r in mine),
                   "itl_ms_median": 1e3 * _median(gaps), "itl_ms_p90": 1e3 * _quantile(gaps, 0.9),
                   "ttft_ms_median": 1e3 * _median(r["ttft_s"] for r in mine), "streamed": streamed[(role, c)],
                   "latency_s_median": _median(r["latency_s"] for r in mine), **metrics.get((role, c), {})}
            row.update(output_throughput=row["throughput_tokens_per_s"], duration=row["wall_s"])
            # vLLM's names: mean / median / p99 / std of TTFT, TPOT, ITL, E2EL; spec_decode_* (None: not reported)
            row.update(conventions.latency_fields([_as_request(r) for r in mine]))
            for key in conventions.SPEC_DECODE_FIELDS:
                row.setdefault(key, None)
            base[role] = row
            rows.append(row)
            for cat in dict.fromkeys(r["category"] for r in mine):
                sub = [r for r in mine if r["category"] == cat]
                rows.append({"kind": "category", "role": role, "concurrency": c, "category": cat,
                             "requests": len(sub), "prompts": len({r["prompt"] for r in sub}),
                             "tokens": sum(r["tokens"] for r in sub),
                             "request_tokens_per_s_median": _median(r["tokens"] / r["latency_s"] for r in sub),
                             "tpot_ms_median": 1e3 * _median(_tpot(r) for r in sub)})
        if len(base) == 2:
            on, off = base["spec"], base["nospec"]
            on["speedup_throughput"] = on["throughput_tokens_per_s"] / off["throughput_tokens_per_s"]
            on["speedup_request_median"] = on["request_tokens_per_s_median"] / off["request_tokens_per_s_median"]
            on["tpot_ratio"] = on["tpot_ms_median"] / off["tpot_ms_median"]
            same = [(a["text"] == b["text"]) for a in records if a["role"] == "spec" and a["concurrency"] == c
                    for b in records if b["role"] == "nospec" and b["concurrency"] == c
                    and (b["prompt"], b["repeat"]) == (a["prompt"], a["repeat"])]
            on["identical_outputs"] = sum(same) / len(same) if same else math.nan
            for row in rows:
                if row["kind"] == "category" and row["role"] == "spec" and row["concurrency"] == c:
                    ref = next(x for x in rows if x["kind"] == "category" and x["role"] == "nospec"
                               and x["concurrency"] == c and x["category"] == row["category"])
                    row["speedup"] = row["request_tokens_per_s_median"] / ref["request_tokens_per_s_median"]
                    row.update(_paired(records, c, row["category"]))
    return rows


_ID_TEXT = re.compile(r"(\s*\d+)+\s*")


def id_text_replies(records: list[dict]) -> bool:
    """True when every non-empty reply is token ids written out (" 3 11 0"): an engine without a tokenizer
    (specdec serve on a toy pair, harness.served.text.IdTokenizer), which folds the catalogue's characters into
    its small vocabulary, so its inputs are synthetic, not text."""
    texts = [r.get("text") for r in records if r.get("text")]
    return bool(texts) and all(_ID_TEXT.fullmatch(t) for t in texts)


def _as_request(r: dict) -> dict:
    return {"tokens": r["tokens"], "e2el_s": r["latency_s"], "ttft_s": r["ttft_s"] if r["streamed"] else None,
            "gaps_s": r["gaps_s"]}


def _paired(records: list[dict], concurrency: int, category: str) -> dict:
    """The spread of a category's speedup: per (prompt, repeat), on / off decode rate of the same request."""
    rate = {(r["role"], r["prompt"], r["repeat"]): r["tokens"] / r["latency_s"] for r in records
            if r["concurrency"] == concurrency and r["category"] == category and r["latency_s"] > 0}
    ratios = sorted(v / rate[("nospec", p, k)] for (role, p, k), v in rate.items()
                    if role == "spec" and ("nospec", p, k) in rate)
    if not ratios:
        return {}
    return {"paired_requests": len(ratios), "speedup_paired_median": statistics.median(ratios),
            "speedup_paired_min": ratios[0], "speedup_paired_max": ratios[-1],
            "speedup_paired_q25": conventions.percentile(ratios, 25),
            "speedup_paired_q75": conventions.percentile(ratios, 75)}


def fit_context(config: HttpBenchConfig, model: str) -> list[str]:
    """Prompts longer than the served context (max_model_len − max_tokens) keep their last tokens, sent as ids.

    Needs the server's /tokenize and max_model_len (vLLM, specdec serve); elsewhere prompts go as they are.
    Returns the ids of the prompts clipped (said in the report)."""
    from harness.served.client import EngineClient
    from harness.served.probe import server_tokenize

    clipped = []
    with EngineClient(config.endpoint, retries=1, timeout_s=30) as client:
        listing = client.optional("GET", "/v1/models")
        limits = [m.get("max_model_len") for m in (listing or {}).get("data", []) if m.get("id") == model]
        limit = limits[0] if limits and isinstance(limits[0], int) else None
        if limit is None:
            return clipped
        room = limit - config.max_tokens
        if room < 1:
            raise HarnessError(f"the served context is {limit} tokens: --max-new-tokens {config.max_tokens} leaves "
                               "no room for a prompt")
        for p in config.prompts:
            ids = server_tokenize(client, model, p["text"])
            if ids is not None and len(ids) > room:
                p["text"] = ids[-room:]
                clipped.append(p["id"])
    return clipped


@dataclasses.dataclass
class HttpBenchRun:
    rows: list[dict]
    files: dict[str, Path]
    seconds: float
    models: dict[str, str]


def run_http_bench(config: HttpBenchConfig, out_dir: Path, progress: Callable[[str], None] | None = None) \
        -> HttpBenchRun:
    import httpx

    from harness.served.client import EngineClient

    config.validate()
    started = time.perf_counter()
    models = {}
    for role, url, model in (("spec", config.endpoint, config.model),
                             ("nospec", config.reference_endpoint, config.reference_model)):
        with EngineClient(url, retries=2, timeout_s=30) as client:
            models[role] = client.resolve_model(model)
    clipped = fit_context(config, models["spec"])
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        log = (out_dir / "requests.jsonl").open("w", encoding="utf-8")
    except OSError as exc:
        raise HarnessError(f"cannot write under {out_dir}: {exc}; choose another --out") from exc
    lock = threading.Lock()

    def on_record(record):
        with lock:
            log.write(json.dumps(record) + "\n")
            log.flush()

    records, walls, metrics, streamed = [], {}, {}, {}
    clients = {role: httpx.Client(base_url=url.rstrip("/").removesuffix("/v1"), timeout=config.timeout_s,
                                  limits=httpx.Limits(max_connections=max(config.concurrency) + 2))
               for role, url in (("spec", config.endpoint), ("nospec", config.reference_endpoint))}
    try:
        for i, c in enumerate(config.concurrency):
            order = ROLES if i % 2 == 0 else ROLES[::-1]  # alternate who goes first: drift in load is shared
            for role in order:
                before = scrape(clients[role])
                recs, wall, did_stream = _at_concurrency(clients[role], models[role], config, c, role, i, on_record)
                after = scrape(clients[role])
                records += recs
                walls[(role, c)], streamed[(role, c)] = wall, did_stream
                metrics[(role, c)] = acceptance(before, after)
                if progress:
                    progress(f"{role} concurrency {c}: {sum(r['tokens'] for r in recs) / wall:.1f} tokens/s")
    except httpx.HTTPError as exc:
        raise HarnessError(f"the bench lost its server ({type(exc).__name__}: {exc}); requests so far are in "
                           f"{out_dir / 'requests.jsonl'}") from exc
    finally:
        for client in clients.values():
            client.close()
        log.close()
    rows = summarize(records, walls, metrics, streamed)
    from harness.bench.http_report import write_http_report

    files = write_http_report(out_dir, rows, config, models, clipped, synthetic=id_text_replies(records))
    files["requests.jsonl"] = out_dir / "requests.jsonl"
    return HttpBenchRun(rows, files, time.perf_counter() - started, models)
