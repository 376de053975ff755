"""results/findings/llama-server: llama.cpp's own llama-server with a draft model, checked over HTTP.

`nox -s engines` runs it (`specdec campaign llama_server --out results/findings/llama-server`);
`--build-only` just builds (or finds) the binary. Two servers on 127.0.0.1, started and stopped here:
SmolLM2-135M-Instruct as an F32 GGUF (the dequantized weights the project serves to transformers),
with the embedded Q4_1 GGUF as draft (speculation on) and without it (off). Recorded:

1. the probe of both (`specdec probe`: what the OpenAI route returns);
2. logprobs honesty (`--engine-checks logprobs`, native API): raw logprobs (`n_probs`) and processed
   ones (`post_sampling_probs`) against the local float64 target, speculation on and off; the
   spread measured with speculation off states the numerics tolerance;
3. the token law (`verify --level engine`, local target): llama-server's defaults left in place,
   once under the documented order (the diagnosis must name `llama_cpp`) and once with
   `--processing-order llama_cpp` declared; and with the truncation switched off (top-k 0, top-p 1,
   min-p 0) under the documented order; greedy equality with the local target;
4. `specdec bench --endpoint`: speculation on vs off by concurrency and prompt category.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

# The plan (policy): sized for a shared 2-core machine (about 10 minutes per run of all of it).
SAMPLES = 300  # continuations per sampling cell (n = 1 per request, concurrency 2)
LENGTH = 4  # new tokens per continuation
LOGPROBS_SAMPLES = 8
SPREAD_FACTOR = 4  # tolerance = this × the largest |Δ| measured with speculation off on calibration seeds
BENCH = ["--concurrency", "1,2", "--max-new-tokens", "32", "--categories", "code,qa,summarization,translation"]


def _config(url: str, **kw):
    from harness.served.check import EngineConfig

    base = dict(endpoint=url, pair="smollm2", api="llama-server", samples=SAMPLES, length=LENGTH, prompts=1,
                chunk=1, concurrency=2, seed=0, timeout_s=600.0, stop_on_fail=False)
    return EngineConfig(**{**base, **kw})


def _summary(report) -> dict:
    d = report.to_dict()
    keep = ("verdict", "samples", "detectable_tv", "seconds", "notes", "failure_summary", "declared_tests")
    cases = [{k: v for k, v in c.items() if k in ("name", "samples", "max_abs_diff", "p99_abs_diff", "compared",
                                                   "bad_sampled", "bad_top", "first_mismatch", "logprobs_mode",
                                                   "consistent_conventions", "divergences")} for c in d["cases"]]
    rejected = [t["name"] for t in d["tests"] if t.get("reject")]
    return {**{k: d[k] for k in keep}, "cases": cases, "rejected": rejected[:20], "tests": len(d["tests"])}


def run(out: Path, quick: bool = False) -> dict:
    from harness.check.generation import Setting
    from harness.served.check import run_engine_check
    from harness.served.llama_server import NO_TRUNCATION, build_llama_server, llama_server, version
    from harness.served.probe import probe

    started = time.perf_counter()
    binary = build_llama_server()
    samples = 60 if quick else SAMPLES
    record: dict = {"binary": str(binary), "version": version(binary), "samples": samples, "length": LENGTH,
                    "checks": {}}
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with llama_server(draft=True, slots=2, log_path=str(logs / "on.log")) as on, \
            llama_server(draft=False, slots=2, log_path=str(logs / "off.log")) as off:
        record["probe"] = {"on": probe(on), "off": probe(off)}
        plain = (Setting(1.0), Setting(0.7))

        def logprobs(url, api, mode, tol, seed):
            return run_engine_check(_config(url, api=api, checks=("logprobs",), settings=plain, seed=seed,
                                            logprobs_samples=4 if quick else LOGPROBS_SAMPLES, length=16,
                                            logprob_tolerance=tol, extra_body=NO_TRUNCATION, logprobs_mode=mode))

        apis = (("llama-server", "raw"), ("llama-server-processed", "processed"))
        # the numerics tolerance: the spread of speculation off against the float64 target, on other seeds
        spread = max(c["max_abs_diff"] for api, mode in apis
                     for c in logprobs(off, api, mode, math.inf, 1).cases if "max_abs_diff" in c)
        tol = float(f"{SPREAD_FACTOR * spread:.1g}")
        record.update(calibration_spread_nats=spread, tolerance_nats=tol)
        for side, url in (("off", off), ("on", on)):
            for api, mode in apis:
                record["checks"][f"logprobs/{mode}/speculation-{side}"] = _summary(logprobs(url, api, mode, tol, 0))
        tokens = [("defaults, documented order", {}, "standard", (Setting(0.0), Setting(0.7))),
                  ("defaults, --processing-order llama_cpp", {}, "llama_cpp", (Setting(0.7),)),
                  ("truncation off, documented order", NO_TRUNCATION, "standard", (Setting(1.0),))]
        for name, extra, order, settings in tokens:
            report = run_engine_check(_config(on, samples=samples, settings=settings, extra_body=extra or None,
                                              processing_order=order))
            record["checks"][f"tokens/{name}"] = _summary(report)
        from harness.cli import main as specdec

        command = ["bench", "--endpoint", on + "/v1", "--reference-endpoint", off + "/v1", *BENCH,
                   "--out", str(out), "--run", "bench"]
        if quick:
            command += ["--quick"]
        record["bench_exit"] = specdec(command)
    record["seconds"] = time.perf_counter() - started
    return record


def report_md(record: dict, command: str) -> str:
    from harness.served.cli import probe_table

    def fmt(x, spec=".3g"):
        return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)

    lines = ["# llama.cpp `llama-server` with a draft model (SmolLM2-135M-Instruct)", "",
             f"Command: `{command}` ({record['seconds'] / 60:.1f} min on a shared 2-core machine). Binary: "
             f"`{record['version']}` built from the llama.cpp vendored in the llama-cpp-python 0.3.36 sdist "
             "(cmake target `llama-server` only).", "",
             "Servers: target = the F32 GGUF written from the embedded Q4_1 GGUF's dequantized tensors (the weights "
             "transformers serves here); speculation on = `-md SmolLM2-135M-Instruct.Q4_1.gguf --spec-draft-n-max 4 "
             "--spec-draft-n-min 0`; 1 thread, 2 slots, on 127.0.0.1. Requests go to the native `/completion` "
             "(`return_tokens`, `n_probs`, `post_sampling_probs`), n = 1 each, seed per request.", "",
             f"Logprobs tolerance: {record['tolerance_nats']:g} nats = {SPREAD_FACTOR} × the largest |Δ| "
             f"({record['calibration_spread_nats']:.3g} nats) measured between llama-server with speculation off and "
             "the float64 transformers target on calibration seeds (raw and processed; llama.cpp's float32 kernels "
             "and its default F16 KV cache against float64). The checks below run on other seeds.", "",
             "| check | verdict | samples | detectable TV | rejected tests | notes |", "|---|---|---|---|---|---|"]
    for name, r in record["checks"].items():
        notes = "; ".join(n for n in r["notes"] if "logprobs honesty" in n or "convention" in n)[:300]
        lines.append(f"| {name} | **{r['verdict'].upper()}** | {r['samples']} | {fmt(r['detectable_tv'])} | "
                     f"{len(r['rejected'])} of {r['tests']} | {notes} |")
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
    for side in ("on", "off"):
        lines += ["", f"## `specdec probe`, speculation {side}", "", "```", probe_table(record["probe"][side]), "```"]
    lines += ["", f"## Bench (speculation on vs off): [bench/report.md](bench/report.md) (exit {record['bench_exit']})",
              ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from harness.errors import HarnessError
    from harness.records import atomic_write_json, atomic_write_text

    parser = argparse.ArgumentParser(prog="specdec campaign llama_server", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="results/findings/llama-server")
    parser.add_argument("--build-only", action="store_true", help="build (or find) llama-server and stop")
    parser.add_argument("--quick", action="store_true", help="a few samples only (a smoke run)")
    args = parser.parse_args(argv)
    try:
        if args.build_only:
            from harness.served.llama_server import build_llama_server

            print(build_llama_server())
            return 0
        out = Path(args.out)
        record = run(out, quick=args.quick)
        atomic_write_json(out / "finding.json", json.loads(json.dumps(record, default=str)))
        command = "specdec campaign llama_server " + " ".join(argv if argv is not None else sys.argv[1:])
        atomic_write_text(out / "README.md", report_md(record, command.strip()))
        print(f"wrote {out / 'README.md'}: " + ", ".join(f"{k} {v['verdict']}" for k, v in record["checks"].items()))
        return 0
    except HarnessError as exc:
        print(f"llama_server finding: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
