"""`specdec mutants` (= `specdec campaign zoo`): run the mutant zoo and the correct controls through the checks;
measure rates.

- **Detection** of each mutant: the fraction of seeds whose verdict is "fail" at default settings
  (full plan, stopping a run as soon as its verdict is decided), with a Clopper–Pearson 95% interval.
- **False alarms** of each control (and the equivalent / wasteful variants, which must pass): many
  seeds on the calibration battery (every configuration, fixed rows per case: the false-alarm rate of
  the procedure does not depend on n when pooled cells are adequately filled). Each run's family
  p-value min(1, m · min p) gives the rate at the gate α and at a nominal 0.05 (where a 95% interval
  is informative) from the same runs.
- **Detection vs samples**: each mutant on the calibration battery at growing rows per case.
- **Exact TV** of analytic mutants on two standard configurations (high and low α).

A campaign of the runner (harness.runner): its Config is `ZooConfig` (suites/campaigns/_commands.py: which entries,
the profile of suites/profiles.py and the sizes given over it), every verification run a cell journaled in
OUT/journal.jsonl (a rerun resumes; --local-workers / --workers / --scheduler spread them), the report
OUT/{report.md,campaign.json,campaign.csv,detection_vs_samples.png}. Exit 0: every mutant caught in >= 95% of its
seeds (unless below resolution) and every control passes; 1: not so; 2: runs not made (--budget-s / --stop-at).
"""

from __future__ import annotations

import time

from harness.stats.rates import clopper_pearson, family_p  # noqa: F401 - family_p: public here too
from suites.campaigns._commands import ZOO_LOCAL_WORKERS, CampaignConfig, ZooConfig  # noqa: F401 - CampaignConfig: public here
from suites.campaigns._zoo_plan import (  # noqa: F401 - re-exported
    plan_cells,
    run_cell,
    selected,
    summarize,
    write_report,
)
from suites.campaigns._zoo_tasks import (  # noqa: F401 - re-exported: the zoo's names of old
    CALIBRATION_FLOATS,
    STEP_CHECKS,
    TARGET_TV,
    Task,
    below_resolution,
    campaign_ok,
    decode_record,
    encode_record,
    exact_tvs_of,
    lifted_rule_entry,
    lifted_rule_tvs,
    run_task,
    task_key,
)

Config = ZooConfig  # the campaign runner's name for the flags (harness.runner)
LOCAL_WORKERS = ZOO_LOCAL_WORKERS  # the runs are independent processes


# --- the campaign runner's hooks (harness.runner): `specdec mutants` / `specdec campaign zoo` ---------------------

def validate(config: ZooConfig) -> None:
    from harness import preflight
    from harness.errors import HarnessError
    from harness.mutants.registry import get

    if config.quick and config.profile != "full" and config.profile != "quick":
        raise HarnessError(f"--quick is --profile quick: give one of --quick and --profile {config.profile}")
    plan = config.plan()
    if plan.seeds < 1 or plan.control_seeds < 1:
        raise HarnessError("--seeds and --control-seeds must be >= 1")
    if not 0 < plan.gate < 1:
        raise HarnessError(f"--false-alarm-rate must be in (0, 1), got {plan.gate}")
    if plan.compare_plans and plan.contracts and "generation" not in plan.contracts:
        raise HarnessError("--compare-plans compares the generation level's plans; add generation to --contract")
    preflight.threads(config.threads)  # this process's torch threads (every run sets one in its own)
    for name in plan.only:
        get(name)  # unknown names: "Did you mean ...?"


def provenance_fields(config: ZooConfig) -> dict:
    return {"seed": list(range(config.plan().seeds)), "dtype": "float32"}


def cells(config: ZooConfig) -> dict[str, tuple]:
    return plan_cells(config.plan())


def report(run) -> int:
    """report.md, campaign.json (a result envelope: the flags as its config, the plan in its summary), campaign.csv
    and the detection-vs-samples figure; the rows printed. Exit 0 as expected, 1 a mutant escaped or something that
    must pass failed, 2 runs not made (the same command resumes them)."""
    began = time.time() - run.seconds  # when this invocation's first cell could start: earlier records were resumed
    plan = run.config.plan()
    result = summarize(plan, [decode_record(r) for r in run.records])
    result.update(seconds=run.seconds, total_runs=len(run.cells), runs_made=len(run.done),
                  resumed_runs=sum(r.get("finished_at", 0) < began for r in run.records))
    summary = write_report(result, run.out, run, kind="campaign.zoo")
    for r in result["rows"]:
        print(f"  {r['name']:<34} {r['contract']:<10} {r['kind']:<10} rate at gate {100 * r['rate_at_gate']:5.1f}% "
              f"({r['runs']} runs)")
    print(f"\n  report: {summary['out']}/report.md")
    for problem in summary["problems"]:
        print(f"  PROBLEM: {problem}")
    missing = len(run.cells) - len(run.done)
    print(f"  overall: {'PASS' if summary['ok'] else 'FAIL'}" + (f" on the runs made ({missing} not made)" if missing
                                                                  else ""))
    return 0 if summary["ok"] else 1  # runs not made: exit 2 by the runner's rule (harness.runner._exit_code)


