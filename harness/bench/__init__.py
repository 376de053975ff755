"""Benchmarks of speculative decoding: speedup sweeps, the Leviathan predictions, reports (`specdec bench`).

Notation (Leviathan et al. 2023, arXiv:2211.17192): p = target, q = draft, γ = drafted tokens per step,
α = Σ min(p, q), c = draft pass time / target pass time.

Modules, one idea each:
- `theory`    — predicted tokens per call, speedup (Leviathan's and the cost model's), accepted-count law, best γ;
- `conventions` — acceptance and latency numbers under the names engines report them (vLLM's), conversions;
- `config`    — `BenchConfig`, the single source of the run's settings and of the CLI flags;
- `cells`     — `Cell`, the unit measured, stored and skipped on a rerun (id = hash of its settings);
- `suites`    — suite registry (default, quick, synthetic, gpu) and the planner config → cells;
- `measure`   — timing protocol (warm-up, repeats, synchronized timers) and the counts-only protocol;
- `store`     — rows.jsonl, appended atomically per cell (resumability);
- `summarize` — raw records → summary rows with measured and predicted numbers;
- `plots`, `report` — figures, rows.csv / rows.json / report.md;
- `runner`    — `run_bench(config)`: the orchestration; `cli` — flags and printing.

Importing this package stays light (no torch) so that building the CLI parser is cheap.
"""

__all__ = ["BenchConfig", "BenchRun", "run_bench"]


def __getattr__(name: str):
    if name == "BenchConfig":
        from harness.bench.config import BenchConfig

        return BenchConfig
    if name in ("BenchRun", "run_bench"):
        from harness.bench import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'harness.bench' has no attribute {name!r}")
