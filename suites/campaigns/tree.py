"""The tree-level zoo: detection of the tree mutants and false alarms of the tree controls -> results/tree
(`specdec campaign tree --out results/tree`). Every run is a cell of `harness.executor.run_cells`, journaled in
OUT/journal.jsonl: a rerun resumes, `--local-workers` / `--workers` / `--scheduler` spread the runs."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.check.config import DEFAULT_FALSE_ALARM_RATE
from harness.check.tree import run_tree_check
from harness.executor import (
    Executor,
    Journal,
    LocalExecutor,
    add_runner_arguments,
    deadline,
    run_cells,
    runner_from_arguments,
)
from harness.mutants.registry import get, implementations
from harness.mutants.tree import TREE_RULES, exact_tree_tv_table
from harness.records import atomic_write_json, atomic_write_text, provenance
from harness.stats.rates import family_p, rate_text
from suites.catalogues.tree import EXACT_CASES

MUTANT_FIRST_SEED, CONTROL_FIRST_SEED = 0, 1000


def tree_run(name: str, seed: int, rows: int | None, gate: float, stop_on_fail: bool) -> dict:
    """One cell: `run_tree_check` of the registered tree entry `name` -> its family p and seconds."""
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    report = run_tree_check(get(name).fn, impl_name=name, seed=seed, rows=rows, false_alarm_rate=gate,
                            stop_on_fail=stop_on_fail)
    return {"name": name, "seed": seed, "family_p": family_p(report), "verdict": report.verdict,
            "seconds": time.perf_counter() - started}


def tree_cells(names: list[str], *, mutant_seeds: int, control_seeds: int, control_rows: int,
               gate: float) -> dict[str, tuple]:
    """Mutants at the default plan (a run stops once decided) first, then one seed of every control in turn."""
    impls = [get(n) for n in names]
    cells = {f"{i.name}/{MUTANT_FIRST_SEED + s}": (i.name, MUTANT_FIRST_SEED + s, None, gate, True)
             for i in impls if i.kind == "mutant" for s in range(mutant_seeds)}
    cells.update({f"{i.name}/{CONTROL_FIRST_SEED + s}": (i.name, CONTROL_FIRST_SEED + s, control_rows, gate, False)
                  for s in range(control_seeds) for i in impls if i.kind != "mutant"})
    return cells


def run_tree_campaign(*, mutant_seeds: int = 20, control_seeds: int = 200, control_rows: int = 20_000,
                      gate: float = DEFAULT_FALSE_ALARM_RATE, names: list[str] | None = None,
                      time_budget_s: float | None = None, executor: Executor | None = None,
                      journal: Journal | None = None, stop=None) -> dict:
    """Every tree entry through `run_tree_check`: mutants at the default plan over `mutant_seeds` seeds (a run
    stops once decided), then controls over `control_seeds` seeds with `control_rows` rows per case (whole
    runs, no early stop). With `time_budget_s` (or `stop`), no run starts once it says so (the runs made are
    what is reported). Returns {"rows": [...], "config": {...}}: per entry the runs, failures at the gate, and
    each run's family p (smallest Holm-adjusted p-value)."""
    names = names or [i.name for i in implementations(level="tree")]
    impls = [get(n) for n in names]
    cells = tree_cells(names, mutant_seeds=mutant_seeds, control_seeds=control_seeds, control_rows=control_rows,
                       gate=gate)
    stop = stop or deadline(budget_s=time_budget_s)
    with executor or LocalExecutor() as ex:
        done = run_cells(ex, tree_run, cells, journal=journal, stop=stop)
    finished = [done[k] for k in cells if k in done]  # schedule order
    exact = exact_tree_tv_table([n for n in names if n in TREE_RULES], EXACT_CASES)
    rows = []
    for i in impls:
        mine = [r for r in finished if r["name"] == i.name]
        fam = [r["family_p"] for r in mine]
        rows.append({"name": i.name, "kind": i.kind, "models": i.models, "runs": len(mine),
                     "fails_at_gate": sum(p <= gate for p in fam), "family_p": fam,
                     "exact_tv": exact.get(i.name, {}), "seconds": sum(r["seconds"] for r in mine)})
    return {"rows": rows, "config": {"mutant_seeds": mutant_seeds, "control_seeds": control_seeds,
                                     "control_rows": control_rows, "gate": gate, "time_budget_s": time_budget_s},
            "cells": len(cells), "cells_run": len(finished)}


def tree_campaign_markdown(result: dict, meta: dict) -> str:
    """The campaign as a report.md table (rates with Clopper–Pearson 95 % intervals)."""
    cfg = result["config"]
    lines = ["# Tree-level zoo: detection and false-alarm rates", "",
             f"Generated {meta['utc_time']} · commit `{meta['git_commit']}` · {meta['device']}", "",
             f"Gate: family-wise false-alarm rate {cfg['gate']:g} (Holm). Mutants: {cfg['mutant_seeds']} seeds at the "
             f"default plan (stops once decided). Controls: up to {cfg['control_seeds']} seeds (column runs), "
             f"{cfg['control_rows']} rows per case, every case. Exact TV: worst node on small enumerable trees (V = 4), per sibling scheme.", "",
             "| implementation | kind | models | runs | failed at gate (95% CI) | family p ≤ 0.05 | exact TV iid / wr / topk | s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        n = r["runs"]
        at05 = sum(p <= 0.05 for p in r["family_p"])
        tvs = " / ".join(f"{r['exact_tv'][s]:.3f}" for s in EXACT_CASES) if r["exact_tv"] else "n/a"
        lines.append(f"| `{r['name']}` | {r['kind']} | {r['models']} | {n} | {rate_text(r['fails_at_gate'], n)} "
                     f"| {at05}/{n} | {tvs} | {r['seconds']:.0f} |")
    if result.get("cells_run", result.get("cells")) != result.get("cells"):
        lines += ["", f"{result['cells_run']} of {result['cells']} planned runs made (the time budget ran out)."]
    return "\n".join(lines) + "\n"


def write_tree_campaign(result: dict, out_dir: str) -> None:
    """campaign.json (with provenance) and report.md under out_dir, written atomically."""
    meta = provenance(seed=None)
    atomic_write_json(Path(out_dir) / "campaign.json", {**result, **meta})
    atomic_write_text(Path(out_dir) / "report.md", tree_campaign_markdown(result, meta))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specdec campaign tree", description=__doc__.splitlines()[0])
    parser.add_argument("--mutant-seeds", type=int, default=20)
    parser.add_argument("--control-seeds", type=int, default=200)
    parser.add_argument("--control-rows", type=int, default=10_000)
    parser.add_argument("--time-budget", type=float, default=None, help="seconds; no run starts after it "
                        "(the same as --budget-s)")
    parser.add_argument("--out", default="results/tree")
    add_runner_arguments(parser)
    args = parser.parse_args(argv)
    if args.time_budget is not None and args.budget_s is None:
        args.budget_s = args.time_budget
    executor, stop = runner_from_arguments(args)
    journal = Journal(Path(args.out) / "journal.jsonl", fresh=args.fresh)
    result = run_tree_campaign(mutant_seeds=args.mutant_seeds, control_seeds=args.control_seeds,
                               control_rows=args.control_rows, time_budget_s=args.budget_s, executor=executor,
                               journal=journal, stop=stop)
    write_tree_campaign(result, args.out)
    bad = [r["name"] for r in result["rows"]
           if (r["kind"] == "mutant" and r["fails_at_gate"] < 0.95 * r["runs"])  # a mutant caught in < 95 % of seeds
           or (r["kind"] != "mutant" and r["fails_at_gate"] > max(1, 0.01 * r["runs"]))]  # a control failing often
    print(f"tree campaign -> {args.out}/report.md" + (f"; not as expected: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0
