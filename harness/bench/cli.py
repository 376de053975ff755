"""`specdec bench`: flags built from `BenchConfig`, and the only place in harness.bench that prints.

Wiring (harness/cli.py): `p = sub.add_parser("bench", ...); add_arguments(p); p.set_defaults(func=run)`.
Exit code 0 (docs/CONTRACT.md §2); bad usage raises HarnessError, which `specdec` turns into exit code 2.
"""

from __future__ import annotations

import argparse
import math
import sys

from harness import configs
from harness.bench.config import BenchConfig
from harness.bench.summarize import COST_MODEL_BAND
from harness.errors import HarnessError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per BenchConfig field (defaults come from the dataclass, not from here)."""
    configs.add_arguments(parser, BenchConfig)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    return configs.from_args(BenchConfig, args).validate()


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "–" if x is None or not math.isfinite(x) else format(x, spec)


def summary_lines(rows: list[dict]) -> list[str]:
    """A few lines per section of the report, for the terminal."""
    from harness.bench.report import SYNTHETIC_LABEL

    lines = []
    tokens = [r for r in rows if r["kind"] == "tokens"]
    if tokens:
        ratios = [r["tokens_ratio"] for r in tokens]
        lines.append(f"token formula: {sum(r['within_tolerance'] for r in tokens)}/{len(tokens)} cells within ±3%, "
                     f"measured/predicted in [{min(ratios):.4f}, {max(ratios):.4f}], "
                     f">= {min(r['full_row_steps'] for r in tokens):,} row-steps per cell")
    spec = [r for r in rows if r["kind"] == "spec" and "speedup_median" in r]
    for group in dict.fromkeys(r["group"] for r in spec):
        members = [r for r in spec if r["group"] == group]
        best = max(members, key=lambda r: r["speedup_median"])
        ratios = [r["cost_model_ratio"] for r in members if "cost_model_ratio" in r]
        flagged = sum(bool(r.get("cost_model_flag")) for r in members)
        band = (f"; measured/cost model in [{min(ratios):.3f}, {max(ratios):.3f}], {flagged} of {len(ratios)} "
                f"outside [{COST_MODEL_BAND[0]}, {COST_MODEL_BAND[1]}]" if ratios else "")
        label = f" [{SYNTHETIC_LABEL}]" if best.get("random_prompts") else ""
        lines.append(f"{group}{label}: best γ={best['gamma']} speedup {_fmt(best['speedup_median'])} "
                     f"(cost model {_fmt(best.get('predicted_speedup_cost_model'))}, Leviathan r=1 "
                     f"{_fmt(best.get('predicted_speedup'))}){band}")
    for r in (r for r in rows if r["kind"] == "compare"):
        lines.append(f"{r['pair']} {r['sampling']} γ={r['gamma']}: reference speedup {_fmt(r['ref_speedup_median'])}, "
                     f"transformers assisted {_fmt(r['hf_speedup_median'])}, ratio {_fmt(r['ref_over_hf_speedup_median'])}")
    return lines


def regime_lines(rows: list[dict]) -> list[str]:
    """Per series, its best cell and why it wins or loses: the cost model's terms and the break-even α."""
    from harness.bench.report import SYNTHETIC_LABEL
    from harness.bench.theory import break_even_alpha

    lines = []
    spec = [r for r in rows if r["kind"] == "spec" and "predicted_speedup_cost_model" in r]
    for group in dict.fromkeys(r["group"] for r in spec):
        b = max((r for r in spec if r["group"] == group), key=lambda r: r["speedup_median"])
        star = break_even_alpha(b["gamma"], b["r"], b["c"])
        measured, model = b["speedup_median"] > 1, b["predicted_speedup_cost_model"] > 1
        realized = b.get("tokens_per_call_realized", math.nan)
        verdict = {(True, True): "speculation pays, as the cost model predicts",
                   (False, False): "speculation does not pay, as the cost model predicts",
                   (False, True): "speculation does not pay although the cost model predicts it would (overhead)",
                   (True, False): ("measured above 1 although the cost model predicts a loss at the measured α: the "
                                   f"timed steps realized {realized:.2f} tokens per call against "
                                   f"{b['predicted_tokens_per_call']:.2f} expected (acceptance luck of a short run, "
                                   "not a regime where speculation pays)")}[(measured, model)]
        n = b.get("distinct_prompts")
        lines.append(
            f"{group}{f' [{SYNTHETIC_LABEL}]' if b.get('random_prompts') else ''}, "
            f"best γ={b['gamma']}: {verdict}: measured {b['speedup_median']:.3f} "
            f"[{b['speedup_min']:.3f}, {b['speedup_max']:.3f}] over repeats"
            + (f", per prompt [{b['speedup_prompt_min']:.3f}, {b['speedup_prompt_max']:.3f}] over "
               f"{n} prompt{'s' if n != 1 else ''}" if "speedup_prompt_min" in b else "")
            + f"; cost model E[tokens/call] {b['predicted_tokens_per_call']:.2f} / (r {b['r']:.2f} + γc "
            f"{b['gamma'] * b['c']:.2f}) = {b['predicted_speedup_cost_model']:.3f} at α = {b['acceptance_rate']:.2f} "
            f"(measured / cost model {b['cost_model_ratio']:.3f}); break-even α at these costs: "
            + ("none (even α = 1 loses)" if star is None else f"{star:.2f}")
            + f"; Leviathan (r = 1) would predict {b['predicted_speedup']:.3f}")
    return lines


def run(args: argparse.Namespace) -> int:
    return run_config(config_from_args(args))


def run_config(config: BenchConfig, *, dry_run: bool = False) -> int:
    """`specdec bench` with this (validated) config; `dry_run`: its usage checks only (`specdec run --dry-run`)."""
    from harness import preflight
    from harness.bench.runner import run_bench

    if dry_run:  # nothing created, not even the output folder
        preflight.device(config.device)
        return 0
    preflight.output_dir(config.out, "--out")
    if config.endpoint:
        return run_endpoint(config)
    preflight.device(config.device)
    if config.dtype:
        preflight.dtype(config.dtype, config.device or "cpu")
    result = run_bench(config, progress=True)
    if result.skipped:
        print(f"specdec bench: suite {result.plan.suite!r} skipped: {result.skipped}")
        return 0
    print(f"specdec bench: {result.seconds:.0f} s; {result.files['rows.jsonl']}")
    for note in result.notes:
        print("  " + note)
    if result.unfinished:
        print(f"  {len(result.unfinished)} cells left unmeasured (--time-budget); rerun to resume")
    for line in summary_lines(result.rows):
        print("  " + line)
    print(f"  report: {result.files.get('report.md')}")
    return 0


def run_endpoint(config: BenchConfig) -> int:
    """`specdec bench --endpoint URL --reference-endpoint URL`: speculation on vs off over HTTP."""
    from pathlib import Path

    from harness.bench.config import command_line
    from harness.bench.http import HttpBenchConfig, run_http_bench
    from harness.policy import load

    http_bench = load("http_bench")

    quick = http_bench.QUICK if config.quick else {}
    temperatures = config.temperatures or (0.0,)
    if len(temperatures) != 1:
        raise HarnessError("with --endpoint, give one --temperature (the catalogue runs at one setting)")
    prompts = http_bench.catalogue(config.categories, config.prompts or quick.get("per_category"))
    http = HttpBenchConfig(endpoint=config.endpoint, reference_endpoint=config.reference_endpoint, prompts=prompts,
                           concurrency=config.concurrency or quick.get("concurrency") or http_bench.CONCURRENCY,
                           max_tokens=config.max_new_tokens or quick.get("max_tokens") or http_bench.MAX_TOKENS,
                           temperature=temperatures[0], repeats=config.repeats or 1, seed=config.seed,
                           command=command_line(config))
    out = Path(config.out) / (config.run_name or "http")
    result = run_http_bench(http, out, progress=lambda line: print("  " + line, file=sys.stderr, flush=True))
    print(f"specdec bench --endpoint: {result.seconds:.0f} s; {len(prompts)} prompts × "
          f"{len(http.concurrency)} concurrency levels × 2 endpoints")
    for r in (r for r in result.rows if r["kind"] == "concurrency" and r["role"] == "spec"):
        print(f"  concurrency {r['concurrency']}: {r['throughput_tokens_per_s']:.1f} tokens/s, speedup "
              f"{_fmt(r.get('speedup_throughput'))} (per request {_fmt(r.get('speedup_request_median'))})")
    print(f"  report: {result.files['report.md']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m harness.bench.cli`) until `specdec bench` is wired."""
    parser = argparse.ArgumentParser(prog="specdec bench", description="speculative decoding speedup sweeps")
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except HarnessError as exc:
        print(f"specdec bench: error: {exc}", file=sys.stderr)
        return 2


