"""Calibration of the verifier families' mutants and controls (draft-and-verify, block): detection of the
family mutants over seeds and false alarms of the controls -> results/families (`specdec campaign families`)."""

from __future__ import annotations

import time

import torch

from harness.check.config import DEFAULT_FALSE_ALARM_RATE
from harness.check.draft_step import run_draft_step_check

CALIBRATION_CASES = ["anti-logits", "q-zero-where-p-positive", "binary-gamma8"]


def calibrate(names: list[str], seeds: int, *, cases=None, false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE,
              rows: int | None = None, first_seed: int = 0) -> dict[str, dict]:
    """{name: {"runs", "failed", "rate", "seconds"}} over `seeds` seeds of the registered implementations
    `names` (draft-step or sampler level), each run on `cases` at `false_alarm_rate`."""
    from harness.check.sampler import run_sampler_check
    from harness.mutants.registry import get

    out = {}
    for name in names:
        impl = get(name)
        check = run_draft_step_check if impl.level == "draft_step" else run_sampler_check
        started, failed = time.perf_counter(), 0
        for s in range(first_seed, first_seed + seeds):
            report = check(impl.fn, impl_name=name, false_alarm_rate=false_alarm_rate, seed=s,
                           cases=cases or CALIBRATION_CASES, rows=rows, stop_on_fail=impl.kind == "mutant")
            failed += report.verdict == "fail"
        out[name] = {"kind": impl.kind, "level": impl.level, "runs": seeds, "failed": failed,
                     "rate": failed / seeds, "seconds": round(time.perf_counter() - started, 1)}
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
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    result = calibrate(args.names, args.seeds, cases=args.cases, false_alarm_rate=args.false_alarm_rate,
                       rows=args.rows, first_seed=args.first_seed)
    print(json.dumps(result, indent=1))
    return 0
