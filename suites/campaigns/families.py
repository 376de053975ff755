"""Calibration of the verifier families' mutants and controls (draft-and-verify, block) -> results/families.

`specdec campaign families --names NAME ...`: detection of the family mutants over seeds and false alarms of the
controls. Every run is a cell of the campaign runner (harness.runner), journaled in OUT/journal.jsonl: a rerun
resumes; the rates are printed as JSON and written to OUT/calibration.json (a result envelope)."""

from __future__ import annotations

import dataclasses
import json
import time

from harness.check.config import DEFAULT_FALSE_ALARM_RATE
from harness.configs import option

CALIBRATION_CASES = ["anti-logits", "q-zero-where-p-positive", "binary-gamma8"]


@dataclasses.dataclass
class Config:
    names: list[str] = option([], "--names", "registered implementation names (required)", metavar="NAME", nargs="+")
    seeds: int = option(20, "--seeds", "seeds per implementation", int, "N")
    first_seed: int = option(0, "--first-seed", "the first seed", int, "S")
    rows: int | None = option(None, "--rows", "rows per case (default: the planner)", int, "N")
    cases: list[str] | None = option(None, "--cases", "catalogue cases (default: " + ", ".join(CALIBRATION_CASES)
                                     + ")", metavar="CASE", nargs="+")
    false_alarm_rate: float = option(DEFAULT_FALSE_ALARM_RATE, "--false-alarm-rate", "family-wise false-alarm rate "
                                     "of every run", float, "A")
    calibrate: bool = option(False, "--calibrate", "accepted for the commands of results/families/README.md (the "
                             "campaign always calibrates)", action="store_true", hidden=True)


def validate(config: Config) -> None:
    from harness.errors import HarnessError
    from harness.mutants.registry import get

    if not config.names:
        raise HarnessError("give the implementations to calibrate: --names NAME [NAME ...]")
    if config.seeds < 1:
        raise HarnessError(f"--seeds must be >= 1, got {config.seeds}")
    for name in config.names:
        get(name)  # an unknown name: "Did you mean ...?" (exit 2)


def family_run(name: str, seed: int, cases: list, false_alarm_rate: float, rows: int | None) -> dict:
    """One cell: the registered draft-step (or sampler) implementation `name` at `seed` -> verdict and seconds."""
    import torch

    from harness.check.draft_step import run_draft_step_check
    from harness.check.sampler import run_sampler_check
    from harness.mutants.registry import get

    torch.set_num_threads(1)
    impl = get(name)
    check = run_draft_step_check if impl.contract == "draft_step" else run_sampler_check
    started = time.perf_counter()
    report = check(impl.fn, impl_name=name, false_alarm_rate=false_alarm_rate, seed=seed, cases=cases, samples=rows,
                   stop_on_fail=impl.kind == "mutant")
    return {"name": name, "seed": seed, "fail": report.verdict == "fail", "seconds": time.perf_counter() - started}


def calibration_cells(names: list[str], seeds: int, *, cases=None, false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE,
                      rows: int | None = None, first_seed: int = 0) -> dict[str, tuple]:
    cases = list(cases or CALIBRATION_CASES)
    return {f"{n}/{s}/{','.join(map(str, cases))}/{rows}/{false_alarm_rate:g}": (n, s, cases, false_alarm_rate, rows)
            for n in names for s in range(first_seed, first_seed + seeds)}


def rates(names: list[str], cells: dict[str, tuple], done: dict) -> dict[str, dict]:
    from harness.mutants.registry import get

    out = {}
    for name in names:
        impl = get(name)
        mine = [done[k] for k, a in cells.items() if a[0] == name and k in done]
        failed = sum(r["fail"] for r in mine)
        out[name] = {"kind": impl.kind, "contract": impl.contract, "runs": len(mine), "failed": failed,
                     "rate": failed / len(mine) if mine else float("nan"),
                     "seconds": round(sum(r["seconds"] for r in mine), 1)}
    return out


def cells(config: Config) -> dict[str, tuple]:
    return calibration_cells(config.names, config.seeds, cases=config.cases, false_alarm_rate=config.false_alarm_rate,
                             rows=config.rows, first_seed=config.first_seed)


run_cell = family_run


def report(run) -> int:
    """The rates as JSON on stdout and in OUT/calibration.json (with provenance)."""
    result = rates(run.config.names, run.cells, run.done)
    run.write_result("calibration.json", "campaign.families", rows=[{"name": k, **v} for k, v in result.items()],
                     summary={"command": run.command})
    print(json.dumps(result, indent=1))
    return 0
