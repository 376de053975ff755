"""Throughput of the reference's batched speculative sampling vs transformers' batched sampling, and the
cost of a generation-level check of the reference at ≥ 1,000 samples, measured in one run.

    specdec campaign bench_batched --out results/bench/batched      # writes report.md + batched.json

- tokens/s of `speculative_generate(cache="batched")` (one KV cache for the batch), of transformers'
  `model.generate(do_sample=True)` on the same sequences and lengths (EOS off in both, so every row
  makes exactly `length` tokens), and of the one-row-cache path (`cache="cache"`) on a few rows;
- a generation-level check of the reference adapter (`run_generation_check`, greedy + two sampling
  settings × two prompts) with `--samples` per sampling cell: wall time, verdict, detectable TV.

The two parts are cells of the campaign runner (harness.runner), in this process and in order, on the pair the
session loaded once, with no journal: a ratio must come from one run, so this campaign never resumes from an
earlier one (always fresh). `--rows 0` / `--samples 0` skip a part; the report holds this run's parts only.
Exit 1 when the reference FAILs its check (it is lossless: the harness or the reference broke), else 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import ClassVar

import torch

from harness.configs import option
from harness.errors import HarnessError
from harness.reporting import header, rerun, table
from specdec_ref.generate import speculative_generate

WHERE = "local"  # timings: in this process, one part at a time, in order
LOADED: dict = {}  # while the campaign runs (session): the pair and its dtype


def reference_tokens_per_s(pair, ids: torch.Tensor, *, length: int, gamma: int, temperature: float, seed: int,
                           cache: str) -> dict:
    """ids [B, T]: the reference's speculative sampling, every row exactly `length` tokens (no EOS)."""
    started = time.perf_counter()
    out = speculative_generate(pair.target, pair.draft, ids, max_new_tokens=length, gamma=gamma,
                               temperature=temperature, seed=seed, eos_token_id=None, cache=cache)
    seconds = time.perf_counter() - started
    s = out.stats
    return {"rows": ids.shape[0], "tokens": s.new_tokens, "seconds": seconds, "tokens_per_s": s.new_tokens / seconds,
            "target_calls": s.target_calls, "draft_calls": s.draft_calls, "acceptance_rate": s.alpha,
            "target_seconds": s.target_seconds, "draft_seconds": s.draft_seconds}


def transformers_tokens_per_s(model, ids: torch.Tensor, *, length: int, temperature: float, seed: int) -> dict:
    """ids [B, T]: transformers' own batched autoregressive sampling (KV cache), pure temperature sampling."""
    torch.manual_seed(seed)
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=temperature,
                             top_k=0, top_p=1.0, max_new_tokens=length, min_new_tokens=length,
                             pad_token_id=0, eos_token_id=None)
    seconds = time.perf_counter() - started
    tokens = (out.shape[1] - ids.shape[1]) * ids.shape[0]
    return {"rows": ids.shape[0], "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def throughput(pair, *, rows: int, length: int, gamma: int, temperature: float = 1.0, seed: int = 0,
               per_row_rows: int = 8) -> dict:
    """The three throughputs on one prompt repeated `rows` times (the generation check's layout)."""
    prompt = (pair.prompts or [[0] * 16])[0]
    ids = torch.tensor([prompt] * rows)
    kw = {"length": length, "temperature": temperature, "seed": seed}
    result = {"batched": reference_tokens_per_s(pair, ids, gamma=gamma, cache="batched", **kw),
              "transformers": transformers_tokens_per_s(pair.target, ids, **kw)}
    if per_row_rows:
        result["per_row_cache"] = reference_tokens_per_s(pair, ids[:per_row_rows], gamma=gamma, cache="cache", **kw)
    result["ratio_transformers_over_batched"] = (result["transformers"]["tokens_per_s"]
                                                 / result["batched"]["tokens_per_s"])
    result["setup"] = {"prompt_tokens": len(prompt), "length": length, "gamma": gamma, "temperature": temperature}
    return result


def generation_check(pair, *, samples: int, gamma: int, length: int, seed: int = 0,
                     score_dtype: str = "float64") -> dict:
    """The reference through the generation-level check with `samples` per sampling cell."""
    from harness.check.generation import run_generation_check
    from specdec_ref.adapters import generate

    report = run_generation_check(generate, pair, impl_name="specdec_ref.adapters:generate", samples=samples,
                                  gamma=gamma, seed=seed, length=length, score_dtype=score_dtype)
    sampled = sum(c.get("samples", 0) for c in report.cases if "length" in c)  # the sampling cells' rows
    return {"verdict": report.verdict, "samples": report.samples, "seconds": report.seconds,
            "tests": len(report.tests), "detectable_tv": report.detectable_tv, "notes": list(report.notes),
            "report": report.to_dict(),
            "sampled_rows": sampled, "length": length, "tokens_per_s": sampled * length / report.seconds,
            "score_dtype": score_dtype}


def markdown(result: dict, lead: tuple[str, ...] = ()) -> str:
    lines = ["# Batched reference vs transformers' batched sampling", "", *lead]
    t, c = result.get("throughput"), result.get("check")
    if t:
        lines += _throughput_lines(result, t)
    if c:
        lines += ["", "## Generation-level check of the reference", "",
                  f"**{c['verdict'].upper()}** on {c['samples']} samples ({c['tests']} gating tests) in "
                  f"**{c['seconds']:.0f} s** wall; detectable TV {c['detectable_tv']:.3g}; ground truth scored in "
                  f"{c.get('score_dtype', 'float64')}.", ""]
        if "tokens_per_s" in c:
            lines += [f"{c['sampled_rows']} sampled sequences × {c['length']} tokens in the check: "
                      f"**{c['tokens_per_s']:.1f} tokens/s** end to end (generation, teacher-forced scoring, the "
                      "greedy cell and the statistics)"
                      + (f", against transformers' {t['transformers']['tokens_per_s']:.1f} tokens/s for sampling "
                         f"alone (ratio {t['transformers']['tokens_per_s'] / c['tokens_per_s']:.2f})." if t else "."), ""]
        lines += [f"- {n}" for n in c["notes"]]
    lines += ["", "Every number above was measured by this one run (alone on the machine), its command at the top."]
    return "\n".join(lines + [""])


def throughput_rows(t: dict) -> list[list[str]]:
    """The throughput table: per path its rows, tokens, seconds, tokens/s and model calls."""
    return [[label, str(r["rows"]), str(r["tokens"]), f"{r['seconds']:.1f}", f"{r['tokens_per_s']:.1f}",
             str(r.get("target_calls", "—")), str(r.get("draft_calls", "—"))]
            for key, label in (("batched", "reference, one KV cache for the batch"),
                               ("transformers", "transformers `generate(do_sample=True)`"),
                               ("per_row_cache", "reference, one KV cache per row (before)")) if (r := t.get(key))]


def _throughput_lines(result: dict, t: dict) -> list[str]:
    setup = t["setup"]
    lines = [f"Pair **{result['pair']}**, {setup['prompt_tokens']}-token prompt, {setup['length']} new tokens per "
             f"row, γ = {setup['gamma']}, T = {setup['temperature']:g}, EOS off; torch threads = {result['threads']}; "
             f"load average {result.get('load_before', '?')} before this run (other jobs slow every row alike).", "",
             table(["path", "rows", "tokens", "seconds", "tokens/s", "target calls", "draft calls"],
                   throughput_rows(t))]
    ratio = t["ratio_transformers_over_batched"]
    alpha = t["batched"].get("acceptance_rate")
    lines += ["", f"transformers tokens/s ÷ reference tokens/s = **{ratio:.2f}** (target: ≤ 2)."
              + (f" Measured α = {alpha:.2f}." if alpha == alpha else "")]
    return lines


@dataclasses.dataclass
class Config:
    JOURNALED: ClassVar[bool] = False  # a ratio comes from one run: always fresh, no --fresh / --report-only
    pair: str = option("smollm2", "--pair", "registered pair")
    rows: int = option(1000, "--rows", "sequences in the throughput comparison (default: the check's 4 cells x 250); "
                       "0: skip", int, "N")
    length: int = option(16, "--length", "new tokens per sequence", int, "N")
    gamma: int = option(3, "--gamma", "draft tokens per step", int, "N")
    samples: int = option(250, "--samples", "per sampling cell of the check (4 cells); 0: skip", int, "N")
    threads: int = option(2, "--threads", "torch threads (measure on an otherwise idle machine)", int, "N")
    score_dtype: str = option("float64", "--score-dtype", "the check's ground truth: a float64 copy of the target "
                              "(default) or the target as loaded", choices=("float64", "model"))


def validate(config: Config) -> None:
    from harness import preflight

    if config.rows < 0 or config.samples < 0:
        raise HarnessError("--rows and --samples must be >= 0 (0 skips that part)")
    if not config.rows and not config.samples:
        raise HarnessError("--rows 0 and --samples 0 skip both parts: nothing to measure")
    for flag, value in (("--length", config.length), ("--gamma", config.gamma), ("--threads", config.threads)):
        if value < 1:
            raise HarnessError(f"{flag} must be >= 1, got {value}")
    preflight.pair(config.pair)  # a registered pair that is available here


@contextlib.contextmanager
def session(config: Config):
    """The pair, loaded once before any clock starts."""
    from harness.pairs import get_pair

    torch.set_num_threads(config.threads)
    pair = get_pair(config.pair)
    LOADED.update(pair=pair, dtype=str(pair.target.dtype).removeprefix("torch."))
    try:
        yield
    finally:
        LOADED.clear()


def provenance_fields(config: Config) -> dict:
    return {"seed": 0, "dtype": LOADED.get("dtype", "float32")}


def cells(config: Config) -> dict[str, tuple]:
    out = {}
    if config.rows:
        out["throughput"] = ("throughput", {"rows": config.rows, "length": config.length, "gamma": config.gamma})
    if config.samples:
        out["check"] = ("check", {"samples": config.samples, "gamma": config.gamma, "length": config.length,
                                  "score_dtype": config.score_dtype})
    return out


def run_cell(part: str, kwargs: dict) -> dict:
    """One part on the session's pair: the three throughputs, or the reference's generation-level check."""
    return (throughput if part == "throughput" else generation_check)(LOADED["pair"], **kwargs)


def report(run) -> int:
    """batched.json (this run's parts, the check's whole report) and report.md; exit 1 if the reference FAILed."""
    parts = dict(run.done)
    result = {"pair": run.config.pair, "threads": run.config.threads, "command": run.command,
              "load_before": " ".join(f"{x:.2f}" for x in run.load or ()), **parts}
    run.write_result("batched.json", "campaign.bench_batched", report={"load_before": result["load_before"], **parts},
                     summary={"parts": sorted(parts), "complete": run.complete})
    run.write_text("report.md", markdown(result, (header(run), "", rerun(run), "")))
    print(f"wrote {run.out / 'report.md'}")
    return 1 if parts.get("check", {}).get("verdict") == "fail" else 0
