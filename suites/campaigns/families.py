"""Calibration of the verifier families' mutants and controls (draft-and-verify, block): detection of the
family mutants over seeds and false alarms of the controls -> results/families (`specdec campaign families`).
Every run is a cell of `harness.executor.run_cells` (with `--journal FILE`, a rerun resumes)."""

from __future__ import annotations

import time

from harness.check.config import DEFAULT_FALSE_ALARM_RATE
from harness.executor import (
    Executor,
    Journal,
    LocalExecutor,
    add_runner_arguments,
    run_cells,
    runner_from_arguments,
)

CALIBRATION_CASES = ["anti-logits", "q-zero-where-p-positive", "binary-gamma8"]


def family_run(name: str, seed: int, cases: list, false_alarm_rate: float, rows: int | None) -> dict:
    """One cell: the registered draft-step (or sampler) implementation `name` at `seed` -> verdict and seconds."""
    import torch

    from harness.check.draft_step import run_draft_step_check
    from harness.check.sampler import run_sampler_check
    from harness.mutants.registry import get

    torch.set_num_threads(1)
    impl = get(name)
    check = run_draft_step_check if impl.level == "draft_step" else run_sampler_check
    started = time.perf_counter()
    report = check(impl.fn, impl_name=name, false_alarm_rate=false_alarm_rate, seed=seed, cases=cases, rows=rows,
                   stop_on_fail=impl.kind == "mutant")
    return {"name": name, "seed": seed, "fail": report.verdict == "fail", "seconds": time.perf_counter() - started}


def calibrate(names: list[str], seeds: int, *, cases=None, false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE,
              rows: int | None = None, first_seed: int = 0, executor: Executor | None = None,
              journal: Journal | None = None, stop=None) -> dict[str, dict]:
    """{name: {"runs", "failed", "rate", "seconds"}} over `seeds` seeds of the registered implementations
    `names` (draft-step or sampler level), each run on `cases` at `false_alarm_rate`."""
    from harness.mutants.registry import get

    cases = list(cases or CALIBRATION_CASES)
    cells = {f"{n}/{s}/{','.join(map(str, cases))}/{rows}/{false_alarm_rate:g}": (n, s, cases, false_alarm_rate, rows)
             for n in names for s in range(first_seed, first_seed + seeds)}
    with executor or LocalExecutor() as ex:
        done = run_cells(ex, family_run, cells, journal=journal, stop=stop)
    out = {}
    for name in names:
        impl = get(name)
        mine = [done[k] for k, a in cells.items() if a[0] == name and k in done]
        failed = sum(r["fail"] for r in mine)
        out[name] = {"kind": impl.kind, "level": impl.level, "runs": len(mine), "failed": failed,
                     "rate": failed / len(mine) if mine else float("nan"),
                     "seconds": round(sum(r["seconds"] for r in mine), 1)}
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="specdec campaign families",
                                     description="detection of the family mutants / false alarms of the controls")
    parser.add_argument("--calibrate", action="store_true", required=True)
    parser.add_argument("--names", nargs="+", required=True, help="registered implementation names")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--rows", type=int, default=None, help="rows per case (default: the planner)")
    parser.add_argument("--cases", nargs="+", default=None)
    parser.add_argument("--false-alarm-rate", type=float, default=DEFAULT_FALSE_ALARM_RATE)
    parser.add_argument("--journal", default=None, metavar="FILE", help="jsonl of finished runs: a rerun resumes")
    add_runner_arguments(parser)
    args = parser.parse_args(argv)
    executor, stop = runner_from_arguments(args)
    journal = Journal(args.journal, fresh=args.fresh) if args.journal else None
    result = calibrate(args.names, args.seeds, cases=args.cases, false_alarm_rate=args.false_alarm_rate,
                       rows=args.rows, first_seed=args.first_seed, executor=executor, journal=journal, stop=stop)
    print(json.dumps(result, indent=1))
    return 0
