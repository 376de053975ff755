"""One verification run of a zoo entry (`Task`, `run_task`), the exact TVs the zoo compares with, and the rules that
read its rows (`below_resolution`, `campaign_ok`): shared by the zoo, headline, params and sequential campaigns (no
campaign imports another)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import time

import numpy as np
import torch

from harness.check.generation import run_generation_check
from harness.check.sampler import run_sampler_check
from harness.pairs import get_pair
from harness.stats.rates import family_p


@functools.lru_cache(maxsize=1)
def _hook_mutant_tvs() -> dict:
    from suites.campaigns._exact import exact_tvs

    return exact_tvs()


def lifted_rule_entry(impl) -> bool:
    """A generation entry whose verify step is a sampler rule lifted into generate() (the lossy-by-design
    entries, e.g. relaxed_acceptance_generate): its continuation law is enumerable on the toy pair."""
    hooks = getattr(impl.fn, "hooks", None)
    return (getattr(impl.fn, "exact_continuation_law", None) is not None and hooks is not None
            and getattr(hooks.verify, "rule", None) is not None and impl.pair in ("toy", None))


def lifted_rule_tvs(impl) -> list[float]:
    """Per toy prompt: the largest exact TV of the entry's 3-token continuation law over the default plan's
    settings (the prompt cells' law), so a lifted rule that is (almost) lossless there is known to be below the
    plan's resolution instead of counted as a miss."""
    from harness.check.settings import default_settings
    from suites.campaigns._exact import exact_tvs_at

    return exact_tvs_at(impl, default_settings())


def exact_tvs_of(impl) -> dict:
    """Sampler level: worst-position exact TV on the two standard configurations (high and low α).
    Generation level, for the mutants whose output law is enumerable on the toy prompts (the p/q-hook
    mutants of suites.campaigns.contexts): the exact TV of the 3-token continuation law at each prompt."""
    from harness.mutants.laws import exact_tvs
    from suites.campaigns._exact import HOOK_MUTANTS

    if impl.contract == "generation" and impl.name in HOOK_MUTANTS:
        tvs = _hook_mutant_tvs()[impl.name]["tv_per_prompt"]
        return {f"exact_tv_prompt{i}": float(tv) for i, tv in enumerate(tvs)}
    if impl.contract == "generation" and impl.kind == "mutant" and lifted_rule_entry(impl):
        return {f"exact_tv_prompt{i}": tv for i, tv in enumerate(lifted_rule_tvs(impl))}
    if impl.exact_law is None:
        return {}
    from suites.catalogues.sampler import CASES

    out = {}
    for case in CASES:
        if case.name in ("zipf1000-high-alpha", "anti-logits"):
            p, q = case.build(np.random.default_rng(0))
            try:
                out[f"exact_tv_{case.name}"] = max(exact_tvs(impl, torch.from_numpy(p), torch.from_numpy(q)))
            except Exception as exc:  # noqa: BLE001 - a law that does not apply to this shape is reported, not fatal
                out[f"exact_tv_{case.name}"] = f"n/a ({type(exc).__name__})"
    return out


# Levels whose implementations are steps of another contract than §1a, with the check that runs them.
STEP_CHECKS = {"tree": ("harness.check.tree", "run_tree_check"),
               "draft_step": ("harness.check.draft_step", "run_draft_step_check")}


@dataclasses.dataclass(frozen=True)
class Task:
    name: str  # registered implementation
    purpose: str  # "detect" | "calibrate" | "curve"
    seed: int
    rows: int | None  # sampler rows per case (None: the default plan)
    samples: int = 0  # generation level: per prompt × setting (0: the default plan)
    pair: str = ""
    plan: str = "default"  # generation level: "default" (with the contexts catalogue) | "prompts" (without)


# Calibration runs cap each case at this many input floats, (2γ+1)·V·rows: the V = 32,000 case gets
# fewer rows so that 200 seeds per control stay affordable.
CALIBRATION_FLOATS = 3e7


@functools.lru_cache(maxsize=4)
def _pair(name: str):
    return get_pair(name)


def run_task(task: Task, gate: float) -> dict:
    """One verification run; returns a compact, picklable summary (runs in a worker process)."""
    from harness.mutants.registry import get

    torch.set_num_threads(1)  # many small problems: threads only add contention on 2 cores
    started = time.perf_counter()
    impl = get(task.name)
    if impl.contract == "sampler":
        report = run_sampler_check(impl.fn, impl_name=impl.name, false_alarm_rate=gate, seed=task.seed,
                                   samples=task.rows, stop_on_fail=task.purpose != "calibrate",
                                   cases=[*impl.cases, "default"] if impl.cases else None,  # its opt-in cases first
                                   max_rows_per_case_floats=CALIBRATION_FLOATS if task.rows else None)
    elif impl.contract in STEP_CHECKS:  # the other step families: tree, draft-and-verify (their default plans)
        module, function = STEP_CHECKS[impl.contract]
        check = getattr(importlib.import_module(module), function)
        report = check(impl.fn, impl_name=impl.name, false_alarm_rate=gate, seed=task.seed,
                       stop_on_fail=task.purpose != "calibrate")
    else:
        pair = _pair(task.pair)
        contexts = None
        if task.plan == "default":  # the default plan's cells: the context catalogue's too
            from harness.contexts import plan

            contexts = plan(pair, seed=task.seed)
        report = run_generation_check(impl.fn, pair, impl_name=impl.name, false_alarm_rate=gate,
                                      seed=task.seed, samples=task.samples or None, gamma=3,
                                      stop_on_fail=task.purpose != "calibrate", contexts=contexts,
                                      settings=getattr(impl.fn, "settings", None))
    # the smallest TV of the joint continuation law a prompt cell promised (generation level): what a
    # mutant's exact TV at the prompts is compared with (below_resolution)
    joint = [t.detectable_tv for t in report.tests if "joint_pooled_pearson" in t.name and t.detectable_tv]
    return {"task": task, "fail": report.verdict == "fail", "family_p": family_p(report),
            "samples": report.samples, "resolution_tv": min(joint) if joint else None, "wasteful": bool(report.wasteful) if impl.contract != "generation" else None,
            "seconds": time.perf_counter() - started}


def task_key(task: Task, gate: float) -> str:
    """What identifies a run in the cell journal: everything its result depends on."""
    return json.dumps({**dataclasses.asdict(task), "gate": gate}, sort_keys=True)


def encode_record(result: dict) -> dict:
    """`run_task`'s result as a JSON record (its task as a dict), as the journal keeps it."""
    return {**result, "task": dataclasses.asdict(result["task"])}


def decode_record(record: dict) -> dict:
    """A journal record back to `run_task`'s result (its Task)."""
    return {**record, "task": Task(**record["task"])}


TARGET_TV = 0.02  # the sampler plan's default detectable TV (specdec verify --tv)


def below_resolution(row: dict, tv: float) -> bool:
    """A mutant whose exact TV is below the planned detectable TV everywhere: nothing is promised for it.
    The planned TV is `tv` (the sampler plan), or the row's `resolution_tv` where its runs stated one (the
    generation level: the smallest joint-law TV any of its prompt cells promised)."""
    tvs = [v for k, v in row.items() if k.startswith("exact_tv_") and isinstance(v, float)]
    if row.get("contract") == "generation" or any(k.startswith("exact_tv_prompt") for k in row):
        planned = row.get("resolution_tv")  # no promise stated: nothing is below it
        return bool(tvs) and planned is not None and max(tvs) < planned
    return bool(tvs) and max(tvs) < tv


def campaign_ok(rows: list[dict], tv: float = TARGET_TV) -> tuple[bool, list[str]]:
    """Exit-0 criterion: every mutant detected in ≥ 95% of seeds (except those below resolution, which
    are reported); nothing that must pass failed at the gate; wasteful variants reported as wasteful. A row with no
    run (a campaign cut short) is not judged."""
    problems = []
    for r in rows:
        if r.get("runs") == 0:
            continue
        if r["kind"] == "mutant" and r["rate_at_gate"] < 0.95 and not below_resolution(r, tv):
            problems.append(f"mutant {r['name']} detected in only {r['rate_at_gate']:.0%} of seeds")
        if r["kind"] != "mutant" and r["failed_runs"] > 0:
            problems.append(f"{r['kind']} {r['name']} failed {r['failed_runs']} of {r['runs']} runs at the gate")
        if r["kind"] == "wasteful" and r.get("wasteful_runs") == 0:
            problems.append(f"wasteful variant {r['name']} was never reported as wasteful")
    return not problems, problems
