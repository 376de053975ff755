"""The llama.cpp finding: llama-cpp-python's prompt-lookup speculation on vs off, served here
(harness.served.llamacpp starts and stops the servers) -> results/findings/llamacpp (`specdec campaign llamacpp`;
`nox -s engines` builds llama-cpp-python first).

A campaign of the runner (harness.runner): every measurement (the probe of each server, the generation-level check
of each implementation, the two-sample check of each setting, the greedy pass, the same-seed identity; with
`--ids` the token-law check of each setting with ids from the server's pieces) is a cell, run in this process
against the servers the session holds, each started only when a cell first needs it: a resumed, complete run
starts none. The runner journals the cells (OUT/journal.jsonl, one for every mode), resumes, stops at
--stop-at / --budget-s (the report names the cells not run) and records the provenance; the report is written from
the cells' records.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from pathlib import Path

from harness.configs import option
from harness.envelope import NOT_RECORDED
from harness.errors import HarnessError
from harness.served.llamacpp import MODEL_ALIAS, PROMPT_LOOKUP_TOKENS, llamacpp_server
from suites.campaigns._record import public_record
from suites.campaigns._servers import COPY_PROMPT, ENGINE_TV_BAR, Servers, not_run, not_run_lines, plain

FINDING_PROMPT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5,"
# The two-sample checks' prompt: it invites copying (prompt lookup drafts from it) and its continuations stay open
# at both settings (FINDING_PROMPT's are one text at T = 0.7 / top-p 0.9: a vacuous cell, INCONCLUSIVE).
SAMPLING_PROMPT = COPY_PROMPT
GREEDY_PROMPTS = (FINDING_PROMPT, "The quick brown fox jumps over the lazy dog. The quick brown fox",
                  "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n")
NO_TRUNCATION = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0}
NEAR_TIE_NATS = 0.05  # greedy divergence at a top-1/top-2 gap this small: numerics (batched vs single-token pass)
SETTINGS = ({"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9})  # the two-sample checks, in run order
GREEDY_TOKENS = 24
SIDES = {"on": True, "off": False}  # server name -> speculative


def _greedy_pairs(on: str, off: str, tokens: int) -> list[dict]:
    """Greedy text with and without speculation; at a divergence, the non-speculative top-2 logprob gap."""
    import httpx

    out = []
    with httpx.Client(timeout=300) as http:
        for prompt in GREEDY_PROMPTS:
            body = {"model": MODEL_ALIAS, "prompt": prompt, "max_tokens": tokens, "temperature": 0.0, "logprobs": 2,
                    **NO_TRUNCATION}
            a, b = (http.post(f"{u}/v1/completions", json=body).json()["choices"][0] for u in (on, off))
            pa, pb = a["logprobs"]["tokens"], b["logprobs"]["tokens"]
            pos = next((j for j, (x, y) in enumerate(zip(pa, pb, strict=False)) if x != y), None)
            row = {"prompt": prompt[:40], "identical": a["text"] == b["text"], "tokens": len(pb), "first_divergence": pos}
            if pos is not None:
                top = sorted(b["logprobs"]["top_logprobs"][pos].values(), reverse=True)
                gap = top[0] - top[1] if len(top) > 1 else float("inf")
                row.update(top2_gap_nats=gap, kind="numerics (near-tie)" if gap <= NEAR_TIE_NATS else "logic")
            out.append(row)
    return out


def _paired_identity(on: str, off: str, seeds: int, tokens: int) -> float:
    """Share of seeds whose continuation is identical with and without speculation (same sampler stream)."""
    import httpx

    same = 0
    with httpx.Client(timeout=300) as http:
        for seed in range(seeds):
            body = {"model": MODEL_ALIAS, "prompt": FINDING_PROMPT, "max_tokens": tokens, "temperature": 1.0,
                    "seed": 10_000 + seed, **NO_TRUNCATION}
            texts = [http.post(f"{u}/v1/completions", json=body).json()["choices"][0]["text"] for u in (on, off)]
            same += texts[0] == texts[1]
    return same / seeds


def _probe(url: str) -> dict:
    from harness.served.probe import probe

    return probe(url)


def _two_sample_check(on: str, off: str, setting: dict, samples: int, length: int) -> dict:
    """Speculation on against off at one setting (two-sample, ground truth c) -> the report as a dict."""
    from harness.check.settings import Setting
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig

    return run_engine_check(EngineConfig(
        endpoint=on, reference_endpoint=off, ground_truth="two-sample", samples=samples, length=length,
        prompts=1, prompt_texts=(SAMPLING_PROMPT,), chunk=1, concurrency=2, settings=(Setting(**setting),),
        extra_body=NO_TRUNCATION, seed=0, inconclusive_tv=ENGINE_TV_BAR)).to_dict()  # above the bar: INCONCLUSIVE


# The generation level (harness.adapters.llamacpp, no server): llama-cpp-python's own `Llama.generate` with
# prompt-lookup drafts against the local target's exact law (ground truth a, one-sample: the power the two-sample
# server checks cannot reach), at the default plan (contexts catalogue: pooled detectable TV under 0.05 on SmolLM2),
# llama.cpp's sampler order declared without its default cuts (the adapter switches them off:
# `top_p_before_temperature`; `llama_cpp` would add top-k 40 / min-p 0.05 to the ground truth); the planted
# bug (drafts kept unverified) must FAIL on the same plan.
GENERATION_ORDER = "top_p_before_temperature"
GENERATION_IMPLS = {"shipped": "harness.adapters.llamacpp:prompt_lookup_generate",
                    "planted bug: drafts unverified": "harness.mutants.llamacpp:no_verify_generate"}


def _generation_check(impl: str, gamma: int) -> dict:
    """`specdec verify --level generation --impl IMPL --pair smollm2 --gamma G --processing-order
    top_p_before_temperature --inconclusive-tv 0.05` -> the report as a dict."""
    from harness.check.api import run_verify
    from harness.check.config import CheckConfig

    return run_verify(CheckConfig(impl=impl, level="generation", pair="smollm2", gamma=gamma,
                                  processing_order=GENERATION_ORDER, inconclusive_tv=ENGINE_TV_BAR)).to_dict()


def generation_command(impl: str, gamma: int) -> str:
    return (f"specdec verify --level generation --impl {impl} --pair smollm2 --gamma {gamma} "
            f"--processing-order {GENERATION_ORDER} --inconclusive-tv {ENGINE_TV_BAR:g}")


# Token ids (ground truth a, one-sample) through the server itself: harness.served.pieces recovers the ids from its
# text pieces (a row ends at its first piece that several ids share, scored under the law coarsened to those
# classes); the server runs the F32 GGUF (the weights the local target scores with), prompt lookup on; BOS is
# biased out (the server leaves a generated BOS out of its pieces); llama.cpp's order declared, cuts off.
IDS_SAMPLES, IDS_LENGTH = 480, 16  # per setting: the llama-server finding's power plan (detectable TV <= 0.05)
NO_BOS = {1: -100.0}  # SmolLM2's BOS id
IDS_SETTINGS = ({"temperature": 1.0, "logit_bias": NO_BOS}, {"temperature": 0.7, "top_p": 0.9, "logit_bias": NO_BOS})


def ids_check(url: str, setting: dict, samples: int, length: int, responses: str | None) -> dict:
    """`verify --level engine --api llama-cpp-python --pair smollm2 --ground-truth local` at one setting."""
    from harness.check.settings import Setting
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig

    return run_engine_check(EngineConfig(
        endpoint=url, api="llama-cpp-python", pair="smollm2", ground_truth="local", samples=samples, length=length,
        prompts=1, prompt_texts=(SAMPLING_PROMPT,), chunk=1, concurrency=2, settings=(Setting(**setting),),
        extra_body=NO_TRUNCATION, seed=0, processing_order=GENERATION_ORDER, inconclusive_tv=ENGINE_TV_BAR,
        timeout_s=900.0, out=responses, stop_on_fail=False)).to_dict()


def check_row(setting: str, report: dict, samples: int, *cells: str) -> str:
    """One table row: setting, verdict, samples, tests, smallest p, then `cells` as given."""
    smallest = min((t["p_value"] for t in report["tests"] if t.get("p_value") is not None), default=1.0)
    return " | ".join([f"| {setting}", f"**{report['verdict'].upper()}**", str(samples), str(len(report["tests"])),
                       f"{smallest:.3g}", *cells]) + " |"


def ids_md(record: dict, command: str) -> str:
    on = record.get("speculative", True)
    drafts = (f"`--draft_model prompt-lookup-decoding` ({record['prompt_lookup_tokens']} drafted tokens)" if on else
              "no draft model (the control: speculation off, everything else as in ids.md)")
    lines = [f"# llama-cpp-python 0.3.36 server, {'prompt lookup on' if on else 'speculation off (control)'}: the token "
             "law with ids recovered from its pieces", "",
             f"Command: `{command}`. Server: `python -m llama_cpp.server` on the F32 GGUF written from the embedded "
             f"SmolLM2's dequantized tensors (the weights the local target scores with), {drafts}, `--logits_all True`, 1 "
             "thread, on 127.0.0.1, started and stopped by the harness. Load average at the end: "
             f"{record['load_at_end']}.", "", *not_run_lines(record.get("not_run", [])),
             "Ids: `--api llama-cpp-python` (harness.served.pieces). The server returns each token's text piece; the "
             "piece names the id unless several ids share it (380 of 49,152 SmolLM2 ids, among them the 47 longer than 32 bytes, which this server renders as nothing). A row ends at its first "
             "shared piece, and that position is scored under the target's law coarsened to the ids sharing a piece "
             "(exact: where a row ends depends only on its tokens so far). BOS is biased out (`logit_bias` 1:-100, on "
             "both sides), because the server leaves a generated BOS out of its pieces.", "",
             f"Ground truth: (a) the local float64 target, one-sample, `--processing-order {GENERATION_ORDER}` "
             f"(llama.cpp's order, its default cuts switched off in every request); {record['samples']} continuations "
             f"of up to {record['length']} tokens per setting, prompt `{record['prompt']}`; judged at "
             f"`--inconclusive-tv {ENGINE_TV_BAR:g}`.", "",
             "| setting | verdict | samples | tests | smallest p | detectable TV (power 0.99) | minutes |",
             "|---|---|---|---|---|---|---|"]
    for c in record["checks"]:
        tv = c["report"].get("detectable_tv")
        lines.append(check_row(c["setting"], c["report"], c["report"]["samples"],
                               f"{tv:.4f}" if isinstance(tv, float) else "–", f"{c['seconds'] / 60:.1f}"))
    for c in record["checks"]:
        for note in c["report"].get("notes", []):
            lines.append(f"\n{c['setting']}: {note}")
    return "\n".join(lines) + "\n"


def finding_cells(samples: int, length: int, paired_seeds: int, *, probe_only: bool = False,
                  gamma: int = PROMPT_LOOKUP_TOKENS) -> dict[str, tuple]:
    """key -> (measurement, its arguments), in run order: the probes, the generation-level checks (no server),
    the server checks, greedy, same-seed identity. The key names what the measurement depends on (not the
    servers' ports), so a rerun finds it."""
    from harness.check.settings import Setting

    cells: dict[str, tuple] = {f"probe/{side}": ("probe", side) for side in SIDES}
    if probe_only:
        return cells
    for name, impl in GENERATION_IMPLS.items():
        cells[f"generation/{impl}/gamma={gamma}/order={GENERATION_ORDER}"] = ("generation", name, impl, gamma)
    for setting in SETTINGS:
        cells[f"check/{Setting(**setting).label}/n={samples}/length={length}"] = ("check", setting, samples, length)
    cells[f"greedy/tokens={GREEDY_TOKENS}"] = ("greedy", GREEDY_TOKENS)
    cells[f"paired/seeds={paired_seeds}/length={length}"] = ("paired", paired_seeds, length)
    return cells


def finding_md(record: dict, command: str) -> str:
    from harness.served.cli import probe_table

    lines = ["# llama.cpp (llama-cpp-python 0.3.36 server): prompt-lookup speculation on vs off", "",
             f"Command: `{command}` ({record['seconds'] / 60:.1f} min of measuring on a 2-core machine; load average "
             f"when the report was written: {record.get('load_at_end', '?')}). Model: the embedded SmolLM2-135M-Instruct Q4_1 GGUF, one server with "
             f"`--draft_model prompt-lookup-decoding` ({record['prompt_lookup_tokens']} drafted tokens), one without; "
             "both `--logits_all True`, 1 thread, on 127.0.0.1, started and stopped by the harness.", "",
             *not_run_lines(record.get("not_run", [])),
             "Verifier: sample-and-match (every position is sampled with the request's sampler; a draft is kept "
             "while it equals the sampled token), lossless in law for any drafter.", "",
             "Ground truth: (c) two samples, because this server returns no token ids and its scoring does not "
             "agree with its own sampling logprobs (probe below: 'scoring = sampling logprobs'), which rules out (b); "
             "a local transformers copy (a) would test llama.cpp's quantized kernels against float32 transformers, "
             "not speculation. Continuations are compared as whitespace-separated words (a fixed function of the "
             "text: a valid coarsening of the token law for a two-sample test).", "",
             f"Requests: n = 1 each (the server has no n > 1), top-k 0, min-p 0, typical-p 1 (llama.cpp's "
             f"defaults truncate); prompt `{record['prompt']}`; {record['samples_per_endpoint_and_setting']} "
             f"continuations of {record['length']} tokens per endpoint and setting.", "",
             "| setting | verdict | samples (both endpoints) | tests | smallest p | detectable TV (power 0.99) |",
             "|---|---|---|---|---|---|"]
    for c in record["checks"]:
        lines.append(check_row(c["setting"], c["report"], 2 * c["report"]["samples"],
                               f"{c['report']['detectable_tv']:.3f}"))
    lines += ["", "Nothing is promised below the detectable TV: at these sample sizes the check rules out gross "
              "errors only (two-sample tests need twice the samples per endpoint of a one-sample test). The "
              "generation level below reaches TV 0.05 on the same decoder, and so does the server itself with its ids "
              "recovered from its pieces against the local target: ids.md (`specdec campaign llamacpp --ids`), with "
              "speculation off as its control in ids-control.md (`--ids --control`)."]
    lines += generation_lines(record.get("generation", []))
    if "paired_same_seed_identical" in record:
        lines += ["", f"Same seed, speculation on vs off, T = 1: {100 * record['paired_same_seed_identical']:.0f} % of "
                  "continuations identical (sample-and-match draws the sampler once per position either way; "
                  "differences come from batched vs one-token evaluation numerics)."]
    if "greedy" in record:
        lines += ["", f"Greedy (T = 0), {GREEDY_TOKENS} tokens:", "",
                  "| prompt | identical | first divergence | top-2 gap (nats) | kind |", "|---|---|---|---|---|"]
        for g in record["greedy"]:
            lines.append(f"| `{g['prompt']!r}` | {g['identical']} | {g['first_divergence']} | "
                         f"{g.get('top2_gap_nats', '-') if 'top2_gap_nats' not in g else format(g['top2_gap_nats'], '.3g')}"
                         f" | {g.get('kind', '-')} |")
    for side in ("on", "off"):
        if side in record["probe"]:
            lines += ["", f"## `specdec probe`, speculation {side}", "", "```", probe_table(record["probe"][side]),
                      "```"]
    return "\n".join(lines) + "\n"


def generation_lines(rows: list[dict]) -> list[str]:
    """The generation-level section of report.md: one row per implementation, as measured."""
    if not rows:
        return []
    lines = ["", "## Generation level: llama-cpp-python's `Llama.generate` with prompt lookup, no server", "",
             "`harness.adapters.llamacpp`: `Llama.generate` with `LlamaPromptLookupDecoding(num_pred_tokens=γ)` on the "
             "embedded SmolLM2 dequantized to float32 (the weights `--pair smollm2` loads in transformers), 1 thread, "
             "a seed per row; checked against the local target's exact law (ground truth a: a one-sample test), "
             "at the default plan (the contexts catalogue), llama.cpp's sampler order declared without its default "
             f"cuts, which the adapter switches off (`--processing-order {GENERATION_ORDER}`), "
             f"INCONCLUSIVE above detectable TV {ENGINE_TV_BAR:g}.", "",
             "| implementation | verdict | samples | tests | smallest p | detectable TV (power 0.99) | minutes |",
             "|---|---|---|---|---|---|---|"]
    for g in rows:
        r = g["report"]
        smallest = min((t["p_value"] for t in r["tests"] if t.get("p_value") is not None), default=1.0)
        lines.append(f"| {g['name']} (`{g['impl'].split(':')[-1]}`) | **{r['verdict'].upper()}** | {r['samples']} | "
                     f"{len(r['tests'])} | {smallest:.3g} | {r['detectable_tv']:.4f} | {g['seconds'] / 60:.1f} |")
    lines += ["", "Commands:", ""] + [f"- `{g['command']}`" for g in rows]
    for g in rows:
        if g["report"]["verdict"] == "fail" and g["report"].get("failure_summary"):
            lines += ["", f"{g['name']}: " + "; ".join(g["report"]["failure_summary"])]
    return lines




# --- the campaign (harness.runner): Config, cells, run_cell, report -----------------------------------------------

WHERE = "local"  # the cells run in this process, against the servers it holds
KEPT = ("responses",)  # the ids checks' kept responses: --fresh measures them again too
_HELD: dict = {}  # while the session lasts: "servers" (started on first use), "out"


@dataclasses.dataclass
class Config:
    """`specdec campaign llamacpp`: its flags (harness.configs.option)."""

    samples: int = option(600, "--samples", "continuations per endpoint and setting (300: detectable TV 0.25, the "
                          "INCONCLUSIVE bar)", int, "N")
    length: int = option(6, "--length", "tokens per continuation of the two-sample checks and the same-seed "
                         "requests", int, "N")
    paired_seeds: int = option(40, "--paired-seeds", "seeds of the same-seed identity requests", int, "N")
    probe_only: bool = option(False, "--probe-only", "only the probes of both servers (OUT/probe-llamacpp-*)",
                              action="store_true")
    ids: bool = option(False, "--ids", "only the token-law checks with ids recovered from the server's pieces (F32 "
                       "GGUF, local target) -> OUT/ids.json and OUT/ids.md", action="store_true")
    control: bool = option(False, "--control", "with --ids: the same checks against the server without speculation "
                           "-> OUT/ids-control.*", action="store_true")


def validate(config: Config) -> None:
    if config.control and not config.ids:
        raise HarnessError("--control goes with --ids")
    if min(config.samples, config.length, config.paired_seeds) < 1:
        raise HarnessError("--samples, --length and --paired-seeds must be >= 1")
    if config.ids and config.probe_only:
        raise HarnessError("--probe-only and --ids are two runs: give one")


def provenance_fields(config: Config) -> dict:
    return {"seed": 0, "dtype": NOT_RECORDED}  # the GGUF's dtype is the server's own: not recorded by this campaign


def _f32_server(speculative: bool):
    from harness.models.gguf_f32 import smollm2_models

    return llamacpp_server(speculative=speculative, model=str(smollm2_models()[0]))


@contextlib.contextmanager
def session(config: Config, out):
    """The servers the cells run against, each started when a cell first needs it (a resumed, complete run starts
    none), all stopped after the report: the Q4_1 GGUF with prompt lookup and without, the F32 GGUF (--ids)."""
    start = {"on": lambda: llamacpp_server(speculative=True), "off": lambda: llamacpp_server(speculative=False),
             "f32-on": lambda: _f32_server(True), "f32-off": lambda: _f32_server(False)}
    with Servers(**start) as servers:
        _HELD.update(servers=servers, out=Path(out))
        try:
            yield
        finally:
            _HELD.clear()


def cells(config: Config) -> dict[str, tuple]:
    if config.ids:
        from harness.check.settings import Setting

        kind = "ids" if not config.control else "ids-off"
        return {f"{kind}/{Setting(**s).label}/n={IDS_SAMPLES}/length={IDS_LENGTH}": ("ids", not config.control, s)
                for s in IDS_SETTINGS}
    return finding_cells(config.samples, config.length, config.paired_seeds, probe_only=config.probe_only)


def run_cell(kind: str, *args) -> dict:
    """One measurement against the servers it names (started on first use) -> a JSON record with its seconds."""
    servers = _HELD["servers"]
    started = time.perf_counter()
    if kind == "ids":
        from harness.check.settings import Setting

        speculative, setting = args
        url = servers["f32-on" if speculative else "f32-off"]
        report = ids_check(url, setting, IDS_SAMPLES, IDS_LENGTH, str(_HELD["out"] / "responses"))
        return plain({"setting": Setting(**setting).label, "report": report,
                      "seconds": time.perf_counter() - started})
    if kind == "generation":  # in this process, no server
        name, impl, gamma = args
        return plain({"generation": {"name": name, "impl": impl, "command": generation_command(impl, gamma),
                                     "report": _generation_check(impl, gamma)},
                      "seconds": time.perf_counter() - started})
    urls = [servers[side] for side in ((args[0],) if kind == "probe" else SIDES)]
    if kind == "probe":
        row = {"side": args[0], "probe": _probe(urls[0])}
    elif kind == "check":
        from harness.check.settings import Setting

        row = {"setting": Setting(**args[0]).label, "report": _two_sample_check(*urls, *args)}
    elif kind == "greedy":
        row = {"greedy": _greedy_pairs(*urls, *args)}
    else:
        row = {"paired_same_seed_identical": _paired_identity(*urls, *args)}
    return plain({**row, "seconds": time.perf_counter() - started})


def _load_now() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def finding_record(config: Config, planned: dict, done: dict) -> dict:
    """out/finding.json's record, built from the cells' records; `not_run` lists the cells cut short."""
    record: dict = {"samples_per_endpoint_and_setting": config.samples, "length": config.length,
                    "prompt": SAMPLING_PROMPT, "prompt_lookup_tokens": PROMPT_LOOKUP_TOKENS, "checks": [], "probe": {},
                    "generation": []}
    for key, row in done.items():
        if key.startswith("generation/"):
            record["generation"].append({**row["generation"], "seconds": row["seconds"]})
        elif key.startswith("probe/"):
            record["probe"][row["side"]] = row["probe"]
        elif key.startswith("check/"):
            record["checks"].append({"setting": row["setting"], "report": row["report"]})
        else:
            record.update({k: v for k, v in row.items() if k != "seconds"})
    record["seconds"] = sum(row["seconds"] for row in done.values())
    record["not_run"] = not_run(planned, done)
    record["load_at_end"] = _load_now()
    return record


def ids_record(config: Config, planned: dict, done: dict) -> dict:
    speculative = not config.control
    return {"samples": IDS_SAMPLES, "length": IDS_LENGTH, "prompt": SAMPLING_PROMPT, "model": "F32 GGUF",
            "speculative": speculative, "prompt_lookup_tokens": PROMPT_LOOKUP_TOKENS if speculative else 0,
            "checks": list(done.values()), "not_run": not_run(planned, done), "load_at_end": _load_now()}


def _write_probe(out: Path, side: str, info: dict) -> None:
    """OUT/probe-llamacpp-{on,off}.json and .txt (the `specdec probe` table)."""
    from harness.served.cli import probe_table
    from harness.served.probe import write_probe

    write_probe(out / f"probe-llamacpp-{side}.json", info, {"server": f"llama-cpp-python, speculation {side}"})
    (out / f"probe-llamacpp-{side}.txt").write_text(probe_table(info) + "\n", encoding="utf-8")


def report(run) -> int:
    """finding.json + report.md (or ids.json + ids.md, ids-control.*; the probes alone with --probe-only) from the
    finished cells. Exit 1: a check of llama.cpp itself FAILs (the server on vs off, its decoder at the generation
    level, its token law from ids); 2: the planted bug passed (the check did not see drafts kept unverified);
    0 otherwise (INCONCLUSIVE and cells cut short included: the report names them)."""
    config = run.config
    if config.ids:
        name = "ids-control" if config.control else "ids"
        record = ids_record(config, run.cells, run.done)
        run.write_result(f"{name}.json", f"campaign.llamacpp.{name.replace('-', '_')}", report=record,
                         summary={"not_run": record["not_run"]})
        run.write_text(f"{name}.md", ids_md(record, run.command))
        print(f"wrote {run.out / f'{name}.md'}: " + ", ".join(f"{c['setting']} {c['report']['verdict']}"
                                                             for c in record["checks"]))
        return 1 if any(c["report"]["verdict"] == "fail" for c in record["checks"]) else 0
    record = finding_record(config, run.cells, run.done)
    for side, info in record["probe"].items():
        _write_probe(run.out, side, info)
    if config.probe_only:
        return 0
    run.write_result("finding.json", "campaign.llamacpp.finding", report=record,
                     summary={"not_run": record["not_run"]})
    run.write_text("report.md", finding_md(record, run.command) + public_record(run.out))
    print(f"wrote {run.out / 'report.md'}: " + ", ".join([f"{g['name']} {g['report']['verdict']}"
                                                          for g in record["generation"]]
                                                         + [f"{c['setting']} {c['report']['verdict']}"
                                                            for c in record["checks"]])
          + (f"; not run: {', '.join(record['not_run'])}" if record["not_run"] else ""))
    shipped = [g["report"] for g in record["generation"] if g["impl"] == GENERATION_IMPLS["shipped"]]
    planted = [g["report"] for g in record["generation"] if g["impl"] != GENERATION_IMPLS["shipped"]]
    if any(r["verdict"] != "fail" for r in planted):
        raise HarnessError("the planted bug (drafts kept unverified) was not caught: the generation-level check "
                           "cannot speak for the shipped decoder (report.md)")
    return 1 if any(r["verdict"] == "fail" for r in shipped + [c["report"] for c in record["checks"]]) else 0
