"""Calibration and power of the sequential sampler check; writes results/sequential/.

`specdec campaign sequential --calibrate --power` (harness.runner: every run is a cell journaled in OUT/journal.jsonl,
so a rerun resumes; the report is written once the runs are made or the time is up).

- **Calibration**: the reference (and a few seeds of every equivalent / wasteful variant, which must
  pass too) under continuous monitoring at the production look schedule (every chunk, ≥ 50 looks per
  case), each run until its first crossing or its planned rows. Counted: runs that fail (the gate α),
  and runs whose family anytime p-value M·min(1/sup e) falls below nominal 0.05 / 0.01 (Ville bounds
  each by that level). To afford ≥ 200 seeds the calibration battery plans every case at TV 0.05
  (the V = 32,000 case at 0.2): ~1/25 of the default rows per case; a mixture likelihood ratio tends to
  0 under H0, so its crossing risk is concentrated early in a run.
- **Power**: every sampler-level mutant of the zoo at the default plan (TV 0.02), samples drawn until
  the verdict vs the fixed-n plan's samples for the same seed (`run_sampler_check`'s plan), median
  over seeds; mutants below resolution (exact TV < 0.02 everywhere) are run and reported, not gated.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch
from scipy.stats import binomtest

from harness.check.config import DEFAULT_MAX_ROWS
from harness.check.sampler import plan_cases, plan_rows
from harness.check.sequential import family_size, run_sampler_check_sequential
from harness.configs import option
from harness.defaults import DEFAULT_FALSE_ALARM_RATE, DEFAULT_POWER
from harness.reporting import header, rerun, table, versions
from harness.stats.rates import clopper_pearson
from suites.campaigns._zoo_tasks import TARGET_TV, below_resolution, exact_tvs_of
from suites.catalogues.sampler import CASES

GATE = DEFAULT_FALSE_ALARM_RATE
TARGET_FRACTION = 0.10  # the target: every mutant above resolution decided with ≤ 10 % of the fixed-n samples
CALIBRATION_TV = 0.1
CALIBRATION_WIDE_TV = 0.2  # the V = 32,000 case, whose rows cost ~30-300× the others'


def calibration_cases(tv: float | None = CALIBRATION_TV) -> list:
    """The calibration battery: the default cases, or (tv given) every case planned at that TV."""
    if tv is None:
        return list(CASES)
    return [dataclasses.replace(c, tv=CALIBRATION_WIDE_TV) if c.vocab >= 10_000 else c for c in CASES]


@dataclasses.dataclass(frozen=True)
class Task:
    name: str  # registered sampler implementation
    purpose: str  # "calibrate" | "power"
    seed: int
    calibration_tv: float | None = CALIBRATION_TV  # None: the default plan (every case at its own TV)


def fixed_plan_samples(seed: int, tv: float = TARGET_TV, false_alarm_rate: float = GATE,
                       power: float = DEFAULT_POWER) -> int:
    """Total rows the fixed-n check (`run_sampler_check`, default cases) plans for this seed."""
    plans = plan_cases(list(CASES), seed)
    plan_rows(plans, tv=tv, false_alarm_rate=false_alarm_rate, power=power, max_rows=DEFAULT_MAX_ROWS)
    return sum(p.rows for p in plans)


def run_task(task: Task) -> dict:
    """One sequential run; a compact, picklable summary (runs in a worker process)."""
    from harness.mutants.registry import get

    torch.set_num_threads(1)
    started = time.perf_counter()
    calibrate = task.purpose == "calibrate"
    report = run_sampler_check_sequential(get(task.name).fn, impl_name=task.name, false_alarm_rate=GATE,
                                          seed=task.seed, tv=(task.calibration_tv or TARGET_TV) if calibrate
                                          else TARGET_TV, cases=calibration_cases(task.calibration_tv) if calibrate
                                          else None)
    anytime = [t for t in report.tests if t.details.get("anytime_valid")]
    cases = calibration_cases(task.calibration_tv) if calibrate else list(CASES)
    planned = sum(c["planned_rows"] for c in report.cases)
    early = report.samples < planned
    return {"name": task.name, "purpose": task.purpose, "seed": task.seed, "fail": report.verdict == "fail",
            "samples": report.samples, "planned": planned, "stopped_early": early,
            "fixed_plan": fixed_plan_samples(task.seed) if not calibrate else None,
            "family_anytime_p": min(1.0, family_size(cases, task.seed) * min(t.p_value for t in anytime)),
            "rejected": [t.name for t in report.tests if t.reject][:6],
            "seconds": time.perf_counter() - started}


def tasks(calibration_seeds: int, variant_seeds: int, power_seeds: int, below_seeds: int,
          calibration_tv: float | None = CALIBRATION_TV) -> list[Task]:
    from harness.mutants.registry import implementations

    out = [Task("reference_verify", "calibrate", 10_000 + s, calibration_tv) for s in range(calibration_seeds)]
    for impl in implementations(contract="sampler"):
        if impl.kind in ("equivalent", "wasteful"):
            out += [Task(impl.name, "calibrate", 20_000 + s, calibration_tv) for s in range(variant_seeds)]
        elif impl.kind == "mutant":
            below = below_resolution(exact_tvs_of(impl), TARGET_TV)
            out += [Task(impl.name, "power", s) for s in range(below_seeds if below else power_seeds)]
    return out


def task_key(task: Task) -> str:
    return f"{task.name}/{task.purpose}/{task.seed}/{task.calibration_tv}"


def summarise(runs: list[dict]) -> dict:
    from harness.mutants.registry import get

    calibration, power = [], []
    for name in dict.fromkeys(r["name"] for r in runs):
        mine = [r for r in runs if r["name"] == name]
        impl = get(name)
        row = {"name": name, "kind": impl.kind, "runs": len(mine), "failed": sum(r["fail"] for r in mine),
               "median_samples": float(np.median([r["samples"] for r in mine])),
               "median_seconds": float(np.median([r["seconds"] for r in mine]))}
        if mine[0]["purpose"] == "calibrate":
            for rate in (0.05, 0.01):
                row[f"below_{rate:g}"] = sum(r["family_anytime_p"] <= rate for r in mine)
            row["stopped_early"] = sum(r["stopped_early"] for r in mine)
            row["ci_low"], row["ci_high"] = clopper_pearson(row["failed"], len(mine))
            row["excess_p"] = float(binomtest(row["failed"], len(mine), GATE, alternative="greater").pvalue)
            row["failed_tests"] = sorted({name for r in mine if r["fail"] for name in r["rejected"]})
            row["median_planned"] = float(np.median([r["planned"] for r in mine]))
            calibration.append(row)
        else:
            fractions = [r["samples"] / r["fixed_plan"] for r in mine]
            tvs = exact_tvs_of(impl)
            row.update(median_fraction=float(np.median(fractions)), max_fraction=float(np.max(fractions)),
                       median_fixed_plan=float(np.median([r["fixed_plan"] for r in mine])),
                       below_resolution=below_resolution(tvs, TARGET_TV),
                       exact_tv=" / ".join(_fmt_tv(tvs.get(f"exact_tv_{c}")) for c in ("zipf1000-high-alpha", "anti-logits")))
            power.append(row)
    return {"calibration": calibration, "power": power}


def calibration_ok(calibration_rows: list[dict]) -> list[str]:
    """Rows whose false alarms at the gate exceed what the rate α allows (one-sided binomial p < 0.01).

    Not "zero false alarms": at α = 1e-3 over 200 seeds a correct check fails at least once with
    probability 1 − 0.999²⁰⁰ ≈ 18 %, so demanding zero would be a flaky criterion."""
    return [f"{r['name']}: {r['failed']}/{r['runs']} false alarms (binomial p {r['excess_p']:.2g} against {GATE:g})"
            for r in calibration_rows if r["excess_p"] < 0.01]


def _fmt_tv(x) -> str:
    return f"{x:.3f}" if isinstance(x, float) else "-"


def power_ok(power_rows: list[dict]) -> list[str]:
    """Mutants above resolution not caught in every seed, or with a median fraction above the target."""
    return [f"{r['name']}: caught {r['failed']}/{r['runs']}, median {r['median_fraction']:.1%} of fixed-n"
            for r in power_rows if not r["below_resolution"]
            and (r["failed"] < r["runs"] or r["median_fraction"] > TARGET_FRACTION)]


def calibration_rows(calibration: list[dict]) -> list[list[str]]:
    """The calibration table: per implementation its runs, failures at the gate (95% CI), the tests that failed,
    the family anytime p-values below 0.05 / 0.01, the early stops, median rows and seconds."""
    return [[f"`{r['name']}`", r["kind"], str(r["runs"]), f"{r['failed']} ({r['ci_low']:.1%}–{r['ci_high']:.1%})",
             ", ".join(r["failed_tests"]) or "-", str(r["below_0.05"]), str(r["below_0.01"]), str(r["stopped_early"]),
             f"{r['median_samples']:.0f}", f"{r['median_seconds']:.1f}"] for r in calibration]


def power_rows(power: list[dict]) -> list[list[str]]:
    """The power table: per mutant its exact TV, runs, catches, median samples against the fixed-n plan's."""
    return [[f"`{r['name']}`" + (" (below resolution)" if r["below_resolution"] else ""), r["exact_tv"], str(r["runs"]),
             str(r["failed"]), f"{r['median_samples']:.0f}", f"{r['median_fixed_plan']:.0f}",
             f"{r['median_fraction']:.2%}", f"{r['max_fraction']:.2%}", f"{r['median_seconds']:.1f}"] for r in power]


def _markdown(result: dict, lead: tuple[str, ...]) -> str:
    s = result["summary"]
    lines = ["# Sequential (anytime-valid) sampler check: calibration and power", "", *lead,
             *([f"**{result['planned_runs'] - len(result['runs'])} of {result['planned_runs']} planned runs not made "
                "(out of time): rerun the command to resume from the journal.**", ""]
               if result.get("planned_runs", 0) > len(result["runs"]) else []),
             "Method: harness.check.sequential. Every case advances in rounds to the same growing fraction of "
             "its plan (1/1000, then ×1.15); after every chunk the e-processes are updated; a run stops at the "
             "first e-process with log e ≥ log(M/α) (M = e-processes + fixed-n tests, α = 0.001), at a format "
             "or support failure, or at the planned rows, where Holm over all M tests decides.", ""]
    if s["calibration"]:
        lines += ["## Calibration (must pass: false alarms under continuous monitoring)", "",
                  (f"Battery: every case planned at TV {result['calibration_tv']} (V = 32,000 at {CALIBRATION_WIDE_TV}). "
                   if result.get("calibration_tv") else "Battery: the default plan of `specdec verify` (TV 0.02; "
                   "V = 32,000 at its own 0.05), the rows a user's run draws. ")
                  +
                  "'family anytime p ≤ x': runs whose smallest e-process p-value 1/sup e, times M, reached x at any "
                  "look (Ville: ≤ x); 'failed': verdict fail at the gate (sequential crossing or final Holm).", "",
                  f"Criterion: false alarms at the gate consistent with ≤ {GATE:g} (one-sided binomial p ≥ 0.01). **"
                  + ("MET" if not calibration_ok(s["calibration"]) else "NOT MET: " + "; ".join(
                      calibration_ok(s["calibration"]))) + "**", "",
                  table(["implementation", "kind", "runs", "failed at gate 0.001 (95% CI)", "tests that failed",
                         "family anytime p ≤ 0.05", "≤ 0.01", "stopped early (crossing)", "median rows", "median s"],
                        calibration_rows(s["calibration"])), ""]
    if s["power"]:
        problems = power_ok(s["power"])
        lines += ["## Power: samples to verdict vs the fixed-n plan (default plan, TV 0.02, power 0.99)", "",
                  f"Target: every mutant above resolution caught in every seed with a median ≤ "
                  f"{TARGET_FRACTION:.0%} of the fixed-n plan's samples. **"
                  + ("MET" if not problems else "NOT MET: " + "; ".join(problems)) + "**", "",
                  table(["mutant", "exact TV (high α / low α)", "runs", "caught", "median samples", "fixed-n plan",
                         "median fraction", "max fraction", "median s"], power_rows(s["power"])), ""]
    return "\n".join(lines)


def _calibration_tv(text: str) -> float | None:
    """'default' (None: the default plan) or a TV in (0, 1); anything else is a usage error (exit 2)."""
    if text == "default":
        return None
    try:
        tv = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a TV in (0, 1) or 'default', got {text!r}") from None
    if not 0 < tv < 1:
        raise argparse.ArgumentTypeError(f"expected a TV in (0, 1) or 'default', got {text!r}")
    return tv


LOCAL_WORKERS = 2  # the default of --local-workers: the runs are independent processes


@dataclasses.dataclass
class Config:
    """`specdec campaign sequential` (harness.runner: every run a cell, journaled in OUT/journal.jsonl)."""

    calibrate: bool = option(False, "--calibrate", "false alarms of the reference and the variants",
                             action="store_true")
    power: bool = option(False, "--power", "samples to verdict of every sampler mutant", action="store_true")
    calibration_seeds: int = option(200, "--calibration-seeds", "seeds of the reference (calibration)", int, "N")
    calibration_tv: float | None = option(CALIBRATION_TV, "--calibration-tv", "plan the calibration battery at "
                                          "this TV, or 'default' for the default plan (TV 0.02)", _calibration_tv,
                                          "TV")
    variant_seeds: int = option(3, "--variant-seeds", "seeds per equivalent / wasteful variant (calibration)", int,
                                "N")
    power_seeds: int = option(20, "--power-seeds", "seeds per mutant above resolution (power)", int, "N")
    below_resolution_seeds: int = option(2, "--below-resolution-seeds", "seeds per mutant below resolution (power: "
                                         "run and reported, not gated)", int, "N")


def validate(config: Config) -> None:
    from harness.errors import HarnessError

    if not (config.calibrate or config.power):
        raise HarnessError("give --calibrate and/or --power")


def provenance_fields(config: Config) -> dict:
    return {"seed": None, "dtype": "float32"}


def cells(config: Config) -> dict[str, tuple]:
    """The power runs first (short), then the calibration runs."""
    chosen = [t for t in tasks(config.calibration_seeds, config.variant_seeds, config.power_seeds,
                               config.below_resolution_seeds, config.calibration_tv)
              if (t.purpose == "calibrate" and config.calibrate) or (t.purpose == "power" and config.power)]
    return {task_key(t): (t,) for purpose in ("power", "calibrate") for t in chosen if t.purpose == purpose}


run_cell = run_task


def report(run) -> int:
    """runs.json, the csv tables and report.md; exit 1 if a control is miscalibrated or a mutant above resolution is
    slow or missed. Planned runs not made (out of time): the rates are not judged, exit 2 (the runner's rule)."""
    import pandas as pd

    runs = run.records
    result = {"runs": runs, "summary": summarise(runs), "seconds": run.seconds,
              "workers": run.where.workers or run.where.local_workers, "calibration_tv": run.config.calibration_tv,
              "load_before": " ".join(f"{x:.2f}" for x in run.load or ()), "planned_runs": len(run.cells)}
    run.write_result("runs.json", "campaign.sequential", rows=runs, summary={k: v for k, v in result.items()
                                                                             if k != "runs"})
    for key in ("calibration", "power"):
        if result["summary"][key]:
            run.write_text(f"{key}.csv", pd.DataFrame(result["summary"][key]).to_csv(index=False))
    path = run.write_text("report.md", _markdown(result, (header(run, versions(run, "torch")), "", rerun(run), "")))
    print(f"wrote {path}")
    if len(runs) < len(run.cells):
        return 0  # judged once complete: harness.runner._exit_code makes it exit 2 and says how many are missing
    summary = result["summary"]
    return 0 if not power_ok(summary["power"]) and not calibration_ok(summary["calibration"]) else 1
