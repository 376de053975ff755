"""The sampling-parameters campaign: the parameter mutants (exact TV + detection over seeds) and the reference under
every parameter at once (false alarms over seeds), on the toy pairs.

    specdec campaign params --out results/params [--seeds 20 --control-seeds 200 --samples 2000]

Cells (harness.runner: journaled in OUT/journal.jsonl, so a rerun resumes; --local-workers N spreads them):
- `exact_tv/NAME`: per entry and toy prompt, the TV between its exact output law and the target's (3 new tokens,
  γ = 3, float64 enumeration of the batched loop with its hooks);
- one generation-level check per entry and seed (suites.campaigns.zoo's `run_task`), each at the entry's own pair
  and setting and `--samples` per prompt cell, without the contexts cells: the mutants over `--seeds` seeds
  (stopping at the first decided cell), the control `reference_all_parameters` over `--control-seeds` seeds.

The report: OUT/exact_tv.json, OUT/campaign.json (one row per entry: runs, FAILs at the gate, the rate at the gate and
at a nominal 0.05 with Clopper–Pearson 95% intervals, the exact TVs) and OUT/report.md. Exit 0 when every mutant is
caught in ≥ 95% of its seeds (suites.campaigns.zoo.campaign_ok: a mutant below the plan's resolution is reported,
not gated) and the control never FAILs; 1 otherwise.
"""

from __future__ import annotations

import dataclasses

from harness.configs import option
from harness.defaults import DEFAULT_FALSE_ALARM_RATE
from harness.reporting import header, pct, rerun, table

MUTANTS = ("min_p_first_position_only", "logit_bias_draft_only", "penalties_from_prefix_before_block",
           "penalty_draft_only", "min_new_tokens_bonus_only", "bad_words_bonus_only", "top_p_before_temperature")
CONTROL = "reference_all_parameters"
KINDS = {"toy": "0.7", "toy-eos": "eos"}  # registered pair -> its float64 toy models
GATE = DEFAULT_FALSE_ALARM_RATE  # the family-wise false-alarm rate of every run
NOMINAL = 0.05  # the control's false alarms are also read at this nominal rate (where 200 runs say something)
FIRST_SEED = 2000  # the zoo's generation-level seeds: 2000, 2001, ...


@dataclasses.dataclass
class Config:
    seeds: int = option(20, "--seeds", "seeds per mutant (its detection rate)", int, "N")
    control_seeds: int = option(200, "--control-seeds", f"seeds of the control {CONTROL} (its false-alarm rate)",
                                int, "N")
    samples: int = option(2000, "--samples", "samples per prompt × setting cell of every check", int, "N")
    only: list[str] | None = option(None, "--only", "run only these entries (default: the mutants and the control)",
                                    metavar="NAME", nargs="+")


LOCAL_WORKERS = 2  # the checks are independent single-threaded runs


def validate(config: Config) -> None:
    from harness.errors import HarnessError

    if config.seeds < 0 or config.control_seeds < 0:
        raise HarnessError("--seeds and --control-seeds must be >= 0")
    if config.samples < 1:
        raise HarnessError(f"--samples must be >= 1, got {config.samples}")
    unknown = sorted(set(config.only or ()) - {*MUTANTS, CONTROL})
    if unknown:
        raise HarnessError(f"--only: not an entry of this campaign: {', '.join(unknown)}; its entries: "
                           f"{', '.join((*MUTANTS, CONTROL))}")


def provenance_fields(config: Config) -> dict:
    return {"seed": FIRST_SEED}


def entries(config: Config) -> list[str]:
    return [n for n in (*MUTANTS, CONTROL) if not config.only or n in config.only]


def cells(config: Config) -> dict[str, tuple]:
    """The exact TVs, then every entry's seeds (the zoo's Task for each: its pair, its fixed plan)."""
    from harness.mutants import get
    from suites.campaigns._zoo_tasks import Task, task_key

    out: dict[str, tuple] = {f"exact_tv/{name}/length3/gamma3": ("exact_tv", name) for name in entries(config)}
    for name in entries(config):
        mutant = name != CONTROL
        for s in range(config.seeds if mutant else config.control_seeds):
            task = Task(name, "detect" if mutant else "calibrate", FIRST_SEED + s, None, config.samples,
                        get(name).pair, "prompts")
            out[task_key(task, GATE)] = ("check", dataclasses.asdict(task))
    return out


def run_cell(kind: str, what) -> dict:
    """`exact_tv`: the entry `what`'s exact TVs; `check`: one run of the zoo's on the task `what` (its verdict, family
    p, samples, seconds)."""
    if kind == "exact_tv":
        return exact_tv(what)
    from suites.campaigns._zoo_tasks import Task, run_task

    result = run_task(Task(**what), GATE)
    return {**result, "task": dataclasses.asdict(result["task"])}


def exact_tv(name: str, length: int = 3, gamma: int = 3) -> dict:
    """Per prompt: TV between the entry's exact output law and the target's (float64 enumeration)."""
    import torch

    from harness.check.exact_laws import continuation_law, total_variation
    from harness.models.toy_pairs import toy_models, toy_prompts
    from harness.mutants import get
    from harness.mutants.generation import exact_output_law
    from specdec_ref.generate import REFERENCE_HOOKS, default_eos, eos_set

    torch.set_num_threads(1)
    impl = get(name)
    target, draft = toy_models(KINDS[impl.pair], torch.float64)
    eos = eos_set(default_eos(target))
    (setting,) = impl.fn.settings
    hooks = getattr(impl.fn, "hooks", None) or REFERENCE_HOOKS
    return {"pair": impl.pair, "setting": setting.label, "tv_per_prompt": [
        total_variation(exact_output_law(target, draft, p, length, gamma, setting, hooks, eos),
                        continuation_law(target, p, length, setting, target.config.vocab_size, eos))
        for p in toy_prompts()[:2]]}


def rows(config: Config, done: dict, tvs: dict) -> list[dict]:
    """One row per entry from its finished runs: the rates at the gate and at a nominal 0.05 (95% intervals)."""
    from harness.mutants import get
    from harness.stats.rates import clopper_pearson

    out = []
    for name in entries(config):
        runs = [r for r in done.values() if "task" in r and r["task"]["name"] == name]
        n, fails = len(runs), sum(r["fail"] for r in runs)
        nominal = sum(r["family_p"] <= NOMINAL for r in runs)
        impl = get(name)
        row = {"name": name, "contract": impl.contract, "kind": impl.kind, "pair": impl.pair, "runs": n,
               "failed_runs": fails, "rate_at_gate": fails / n if n else None,
               "rate_at_nominal": nominal / n if n else None, "samples_per_cell": config.samples,
               "seconds": round(sum(r["seconds"] for r in runs), 1)}
        row["ci_gate_low"], row["ci_gate_high"] = clopper_pearson(fails, n) if n else (None, None)
        row["ci_nominal_low"], row["ci_nominal_high"] = clopper_pearson(nominal, n) if n else (None, None)
        if name in tvs:
            row["setting"] = tvs[name]["setting"]
            row.update({f"exact_tv_prompt{i}": float(tv) for i, tv in enumerate(tvs[name]["tv_per_prompt"])})
        promised = [r["resolution_tv"] for r in runs if r.get("resolution_tv")]
        if promised:
            row["resolution_tv"] = min(promised)  # the smallest joint-law TV a prompt cell promised
        out.append(row)
    return out


def _pct(x: float | None) -> str:
    return pct(x, missing="-")


def table_rows(table: list[dict]) -> list[list[str]]:
    """report.md's table: per entry its exact TVs, runs, FAILs at the gate and runs with family p ≤ NOMINAL (95% CI)."""
    return [[f"`{r['name']}`", r["kind"], r["pair"], r.get("setting", "-"),
             " / ".join(f"{r[k]:.3f}" for k in ("exact_tv_prompt0", "exact_tv_prompt1") if k in r) or "-",
             str(r["runs"]),
             f"{r['failed_runs']} = {_pct(r['rate_at_gate'])} ({_pct(r['ci_gate_low'])}–{_pct(r['ci_gate_high'])})",
             f"{_pct(r['rate_at_nominal'])} ({_pct(r['ci_nominal_low'])}–{_pct(r['ci_nominal_high'])})",
             f"{r['seconds']:.0f}"] for r in table]


def markdown(rows_: list[dict], ok: bool, problems: list[str], run) -> str:
    lines = ["# The sampling parameters beyond temperature / top-k / top-p", "",
             header(run, f"gate (family-wise false-alarm rate) {GATE:g}",
                    f"{run.config.samples} samples per prompt cell, no contexts cells"), "", rerun(run), "",
             f"**Overall: {'PASS' if ok else 'FAIL'}**" + ("" if ok else " — " + "; ".join(problems)), "",
             table(["entry", "kind", "pair", "setting", "exact TV (prompt 0 / 1)", "runs", "FAIL at the gate (95% CI)",
                    f"family p ≤ {NOMINAL:g} (95% CI)", "seconds"], table_rows(rows_)),
             "", "For a mutant the rate is its detection rate; for the control, its false-alarm rate.", ""]
    return "\n".join(lines)


def report(run) -> int:
    """OUT/exact_tv.json, OUT/campaign.json, OUT/report.md; exit 0 when every mutant is caught (≥ 95% of its seeds,
    unless below resolution) and the control never FAILs at the gate."""
    from suites.campaigns._zoo_tasks import campaign_ok

    tvs = {args[1]: run.done[key] for key, args in run.cells.items() if args[0] == "exact_tv" and key in run.done}
    if tvs:
        run.write_result("exact_tv.json", "campaign.params.exact_tv", report=tvs, summary={"entries": len(tvs)})
        for name, row in tvs.items():
            print(f"{name:36s} {row['pair']:8s} exact TV {', '.join(f'{t:.4f}' for t in row['tv_per_prompt'])}")
    found = rows(run.config, run.done, tvs)
    ok, problems = campaign_ok([r for r in found if r["runs"]])  # an entry with no run yet (--stop-at): not judged
    run.write_result("campaign.json", "campaign.params", rows=found,
                     summary={"ok": ok, "problems": problems, "complete": run.complete, "command": run.command})
    run.write_text("report.md", markdown(found, ok, problems, run))
    print("ok" if ok else "PROBLEMS: " + "; ".join(problems))
    return 0 if ok else 1
