"""The tree-level zoo: detection of the tree mutants and false alarms of the tree controls -> results/tree
(`specdec campaign tree --out results/tree`)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.check.config import DEFAULT_FALSE_ALARM_RATE
from harness.check.tree import run_tree_check
from harness.mutants.registry import get, implementations
from harness.mutants.tree import TREE_RULES, exact_tree_tv_table
from harness.records import atomic_write_json, atomic_write_text, provenance
from harness.stats.rates import clopper_pearson, family_p
from suites.catalogues.tree import EXACT_CASES


def run_tree_campaign(*, mutant_seeds: int = 20, control_seeds: int = 200, control_rows: int = 20_000,
                      gate: float = DEFAULT_FALSE_ALARM_RATE, names: list[str] | None = None,
                      time_budget_s: float | None = None) -> dict:
    """Every tree entry through `run_tree_check`: mutants at the default plan over `mutant_seeds` seeds (a run
    stops once decided), then controls over `control_seeds` seeds with `control_rows` rows per case (whole
    runs, no early stop), one seed of every control in turn. With `time_budget_s`, no run starts after the
    budget is spent (the runs made are what is reported). Returns {"rows": [...], "config": {...}}: per entry
    the runs, failures at the gate, and each run's family p (smallest Holm-adjusted p-value)."""
    started = time.perf_counter()
    names = names or [i.name for i in implementations(level="tree")]
    impls = [get(n) for n in names]
    runs: dict[str, list[float]] = {n: [] for n in names}
    seconds = dict.fromkeys(names, 0.0)
    schedule = [(i, s) for i in impls if i.kind == "mutant" for s in range(mutant_seeds)]
    schedule += [(i, s) for s in range(control_seeds) for i in impls if i.kind != "mutant"]
    for impl, seed in schedule:
        if time_budget_s is not None and time.perf_counter() - started > time_budget_s:
            break
        t0, mutant = time.perf_counter(), impl.kind == "mutant"
        report = run_tree_check(impl.fn, impl_name=impl.name, seed=(0 if mutant else 1000) + seed,
                                rows=None if mutant else control_rows, false_alarm_rate=gate, stop_on_fail=mutant)
        runs[impl.name].append(family_p(report))
        seconds[impl.name] += time.perf_counter() - t0
    exact = exact_tree_tv_table([n for n in names if n in TREE_RULES], EXACT_CASES)
    rows = [{"name": i.name, "kind": i.kind, "models": i.models, "runs": len(runs[i.name]),
             "fails_at_gate": sum(p <= gate for p in runs[i.name]), "family_p": runs[i.name],
             "exact_tv": exact.get(i.name, {}), "seconds": seconds[i.name]} for i in impls]
    return {"rows": rows, "config": {"mutant_seeds": mutant_seeds, "control_seeds": control_seeds,
                                     "control_rows": control_rows, "gate": gate, "time_budget_s": time_budget_s}}


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
        k, n = r["fails_at_gate"], r["runs"]
        lo, hi = clopper_pearson(k, n)
        at05 = sum(p <= 0.05 for p in r["family_p"])
        tvs = " / ".join(f"{r['exact_tv'][s]:.3f}" for s in EXACT_CASES) if r["exact_tv"] else "n/a"
        lines.append(f"| `{r['name']}` | {r['kind']} | {r['models']} | {n} | {k}/{n} ({100 * lo:.1f}%–{100 * hi:.1f}%) "
                     f"| {at05}/{n} | {tvs} | {r['seconds']:.0f} |")
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
    parser.add_argument("--time-budget", type=float, default=None, help="seconds; no run starts after it")
    parser.add_argument("--out", default="results/tree")
    args = parser.parse_args(argv)
    result = run_tree_campaign(mutant_seeds=args.mutant_seeds, control_seeds=args.control_seeds,
                               control_rows=args.control_rows, time_budget_s=args.time_budget)
    write_tree_campaign(result, args.out)
    bad = [r["name"] for r in result["rows"]
           if (r["kind"] == "mutant" and r["fails_at_gate"] < 0.95 * r["runs"])  # a mutant caught in < 95 % of seeds
           or (r["kind"] != "mutant" and r["fails_at_gate"] > max(1, 0.01 * r["runs"]))]  # a control failing often
    print(f"tree campaign -> {args.out}/report.md" + (f"; not as expected: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0
