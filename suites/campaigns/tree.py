"""The tree-level zoo: detection of the tree mutants and false alarms of the tree controls -> results/tree.

`specdec campaign tree` (harness.runner: every run is a cell journaled in OUT/journal.jsonl, so a rerun resumes;
`--local-workers` / `--workers` / `--scheduler` spread the runs, `--budget-s` / `--stop-at` end them)."""

from __future__ import annotations

import dataclasses
import time

from harness.check.config import DEFAULT_FALSE_ALARM_RATE
from harness.check.tree import run_tree_check
from harness.configs import option
from harness.mutants.registry import get, implementations
from harness.mutants.tree import TREE_RULES, exact_tree_tv_table
from harness.reporting import header, rate, rerun, table
from harness.stats.rates import family_p
from suites.catalogues.tree import EXACT_CASES

MUTANT_FIRST_SEED, CONTROL_FIRST_SEED = 0, 1000


@dataclasses.dataclass
class Config:
    mutant_seeds: int = option(20, "--mutant-seeds", "seeds per mutant, each at the default plan (a run stops once "
                               "decided)", int, "N")
    control_seeds: int = option(200, "--control-seeds", "seeds per control (false alarms)", int, "N")
    control_rows: int = option(10_000, "--control-rows", "rows per case of a control run (every case, no early stop)",
                               int, "N")
    gate: float = option(DEFAULT_FALSE_ALARM_RATE, "--false-alarm-rate", "gate: family-wise false-alarm rate of "
                         "every run", float, "A")
    names: list[str] | None = option(None, "--only", "run only these tree entries (default: every one)",
                                     metavar="NAME", nargs="+")


def validate(config: Config) -> None:
    from harness.errors import HarnessError

    if min(config.mutant_seeds, config.control_seeds, config.control_rows) < 0:
        raise HarnessError("--mutant-seeds, --control-seeds and --control-rows must be >= 0")
    for name in config.names or ():
        get(name)  # an unknown name: "Did you mean ...?" (exit 2)


def tree_run(name: str, seed: int, rows: int | None, gate: float, stop_on_fail: bool) -> dict:
    """One cell: `run_tree_check` of the registered tree entry `name` -> its family p and seconds."""
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    report = run_tree_check(get(name).fn, impl_name=name, seed=seed, samples=rows, false_alarm_rate=gate,
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


def cells(config: Config) -> dict[str, tuple]:
    return tree_cells(config.names or [i.name for i in implementations(contract="tree")],
                      mutant_seeds=config.mutant_seeds, control_seeds=config.control_seeds,
                      control_rows=config.control_rows, gate=config.gate)


run_cell = tree_run


def summarize(names: list[str], cells: dict[str, tuple], done: dict, config: dict) -> dict:
    """The campaign's result from the finished cells: per entry the runs, failures at the gate, each run's family
    p (smallest Holm-adjusted p-value) and the exact TV on small trees."""
    gate = config["gate"]
    finished = [done[k] for k in cells if k in done]  # schedule order
    exact = exact_tree_tv_table([n for n in names if n in TREE_RULES], EXACT_CASES)
    rows = []
    for i in (get(n) for n in names):
        mine = [r for r in finished if r["name"] == i.name]
        fam = [r["family_p"] for r in mine]
        rows.append({"name": i.name, "kind": i.kind, "models": i.models, "runs": len(mine),
                     "fails_at_gate": sum(p <= gate for p in fam), "family_p": fam,
                     "exact_tv": exact.get(i.name, {}), "seconds": sum(r["seconds"] for r in mine)})
    return {"rows": rows, "config": config, "cells": len(cells), "cells_run": len(finished)}


def report(run) -> int:
    """campaign.json and report.md; exit 1 if a mutant is caught in < 95 % of its seeds or a control fails often."""
    c = run.config
    names = c.names or [i.name for i in implementations(contract="tree")]
    result = summarize(names, run.cells, run.done, {
        "mutant_seeds": c.mutant_seeds, "control_seeds": c.control_seeds, "control_rows": c.control_rows,
        "gate": c.gate, "time_budget_s": run.runner.budget_s})
    run.write_result("campaign.json", "campaign.tree", rows=result["rows"],  # its config: the Config (reruns)
                     summary={"cells": result["cells"], "cells_run": result["cells_run"],
                              "time_budget_s": run.runner.budget_s})
    run.write_text("report.md", tree_campaign_markdown(result, (header(run), "", rerun(run), "")))
    bad = [r["name"] for r in result["rows"]
           if (r["kind"] == "mutant" and r["fails_at_gate"] < 0.95 * r["runs"])  # a mutant caught in < 95 % of seeds
           or (r["kind"] != "mutant" and r["fails_at_gate"] > max(1, 0.01 * r["runs"]))]  # a control failing often
    print(f"tree campaign -> {run.out}/report.md" + (f"; not as expected: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


def tree_rows(result: dict) -> list[list[str]]:
    """report.md's table: per entry its runs, failures at the gate (95% CI), runs with family p ≤ 0.05, exact TVs."""
    return [[f"`{r['name']}`", r["kind"], r["models"], str(r["runs"]), rate(r["fails_at_gate"], r["runs"]),
             rate(sum(p <= 0.05 for p in r["family_p"]), r["runs"], ci=False),
             " / ".join(f"{r['exact_tv'][s]:.3f}" for s in EXACT_CASES) if r["exact_tv"] else "n/a",
             f"{r['seconds']:.0f}"] for r in result["rows"]]


def tree_campaign_markdown(result: dict, lead: tuple[str, ...] = ()) -> str:
    """The campaign as a report.md table (rates with Clopper–Pearson 95 % intervals); `lead`: the header line."""
    cfg = result["config"]
    lines = ["# Tree-level zoo: detection and false-alarm rates", "", *lead,
             f"Gate: family-wise false-alarm rate {cfg['gate']:g} (Holm). Mutants: {cfg['mutant_seeds']} seeds at the "
             f"default plan (stops once decided). Controls: up to {cfg['control_seeds']} seeds (column runs), "
             f"{cfg['control_rows']} rows per case, every case. Exact TV: worst node on small enumerable trees (V = 4), per sibling scheme.", "",
             table(["implementation", "kind", "models", "runs", "failed at gate (95% CI)", "family p ≤ 0.05",
                    "exact TV iid / wr / topk", "s"], tree_rows(result))]
    if result.get("cells_run", result.get("cells")) != result.get("cells"):
        lines += ["", f"{result['cells_run']} of {result['cells']} planned runs made (the time budget ran out)."]
    return "\n".join(lines) + "\n"
