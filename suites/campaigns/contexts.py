"""Issue 19 campaign: the context-diverse default plan on the toy pair, measured.

    specdec campaign contexts --out results/contexts [--seeds 20 --control-seeds 200 --budget-s 2400]

1. the sampling-path block-boundary mutant (see 2) first, then one run each of the old plan (the pair's two prompts, 20,000 samples per cell, `--contexts none`) and the
   new default plan (prompt cells + contexts cells, harness/contexts.py), the reference generate(), timed
   in one process with the load average beside them;
2. the sampling-path block-boundary mutant (harness.mutants.generation:stale_page_at_block_boundary_sampling)
   at the default plan over `--seeds` seeds (detections at the gate);
3. the reference at the default plan over up to `--control-seeds` seeds (false alarms at the gate), as many as
   fit in `--budget-s` seconds; the count that ran is what the README states.
The mutant seeds and the timing pair hold the machine's CPU lock (/tmp/specdec-cpu.lock) as one block
(their numbers come from one stretch of machine time); each control run takes it for itself, so other
heavy jobs interleave.
Writes OUT/campaign.json after every run (an interrupted campaign keeps what it measured).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import time

import torch

from harness.check.generation import run_generation_check
from harness.contexts import coverage, plan
from harness.mutants import get
from harness.pairs import get_pair
from harness.records import atomic_write_json, provenance
from specdec_ref.adapters import generate as reference_generate

GATE = 1e-3  # the family-wise false-alarm rate of `specdec verify` (its default)
MUTANT = "stale_page_at_block_boundary_sampling"
LOCK = "/tmp/specdec-cpu.lock"


HELD = {"lock": False}  # --held-lock: the caller already holds the CPU lock (e.g. `flock LOCK specdec campaign ...`)


@contextlib.contextmanager
def cpu_lock(path: str = LOCK):
    if HELD["lock"]:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def one_run(impl, pair, seed: int, *, contexts: bool, samples: int | None = None, stop_on_fail: bool,
            lock: bool = True) -> dict:
    with cpu_lock() if lock else contextlib.nullcontext():
        load_before, started = _load(), time.perf_counter()
        report = run_generation_check(impl, pair, seed=seed, false_alarm_rate=GATE, samples=samples,
                                      stop_on_fail=stop_on_fail, contexts=plan(pair, seed=seed) if contexts else None)
        seconds = time.perf_counter() - started
    families = {c["name"]: c["detectable_tv_per_family"] for c in report.cases if "detectable_tv_per_family" in c}
    return {"seed": seed, "verdict": report.verdict, "fail": report.verdict == "fail", "seconds": round(seconds, 1),
            "load_before": load_before, "load_after": _load(), "samples": report.samples,
            "detectable_tv": report.detectable_tv, "detectable_tv_per_family": families,
            "rejected": [t.name for t in report.tests if t.reject][:6], "declared_tests": report.declared_tests}


HOOK_MUTANTS = ("penalties_count_rejected_drafts", "penalties_count_rejected_drafts_mild",
                "min_new_tokens_counted_from_prompt")  # p/q-hook mutants: their output law is enumerable


def exact_tvs(length: int = 3, gamma: int = 3) -> dict:
    """Per hook mutant and toy prompt: TV between its exact output law (`exact_output_law`, float64) and the
    target's, on the pair's 4-token prompts with 3 new tokens. The runner mutants (block boundary, rollback
    after step k, prefix key) are exactly the reference there (no index reaches 16, at most 3 steps, no
    shared 16-token prefix): TV 0 by construction; at 40-token continuations nothing is enumerable (16^40)."""
    from harness.check.generation import continuation_law, total_variation
    from harness.models.toy_pairs import _prompts, _toy_models
    from harness.mutants.generation import exact_output_law
    from specdec_ref.generate import default_eos, eos_set

    out = {}
    for name in HOOK_MUTANTS:
        impl = get(name)
        target, draft = _toy_models({"toy": "0.7", "toy-eos": "eos"}[impl.pair], torch.float64)
        eos = eos_set(default_eos(target))
        (setting,) = impl.fn.settings
        out[name] = {"pair": impl.pair, "setting": setting.label, "tv_per_prompt": [
            total_variation(exact_output_law(target, draft, p, length, gamma, setting, impl.fn.hooks, eos),
                            continuation_law(target, p, length, setting, 16, eos)) for p in _prompts()[:2]]}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/contexts")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--control-seeds", type=int, default=200)
    ap.add_argument("--budget-s", type=float, default=2400.0, help="stop starting control runs after this")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--exact-only", action="store_true", help="only OUT/exact_tv.json (seconds)")
    ap.add_argument("--held-lock", action="store_true", help="the CPU lock is already held by the caller")
    ap.add_argument("--stop-at", type=float, default=None,
                    help="start no run after this Unix time (the JSON says how many ran)")
    args = ap.parse_args(argv)
    HELD["lock"] = args.held_lock

    def late() -> bool:
        return args.stop_at is not None and time.time() > args.stop_at
    if args.exact_only:
        os.makedirs(args.out, exist_ok=True)
        tvs = exact_tvs()
        atomic_write_json(f"{args.out}/exact_tv.json", tvs)
        for name, row in tvs.items():
            print(f"{name:40s} {row['pair']:8s} {row['setting']:28s} exact TV "
                  + ", ".join(f"{t:.4f}" for t in row["tv_per_prompt"]))
        return 0
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    pair = get_pair("toy")
    result = {"command": "specdec campaign contexts " + " ".join(argv or []), "gate": GATE,
              "pair": "toy", "mutant": MUTANT, "coverage": {str(k): v for k, v in coverage(plan(pair)["contexts"]).items()},
              "provenance": provenance(seed=0, device="cpu", dtype="float64"), "timing": {}, "mutant_runs": [],
              "control_runs": []}
    path = f"{args.out}/campaign.json"

    def save():
        m, c = result["mutant_runs"], result["control_runs"]
        result["summary"] = {"mutant_detected": sum(r["fail"] for r in m), "mutant_seeds": len(m),
                             "control_false_alarms": sum(r["fail"] for r in c), "control_seeds": len(c)}
        atomic_write_json(path, result)

    mutant = get(MUTANT).fn
    with cpu_lock():  # the mutant seeds and the timing pair: one stretch of machine time
        for s in range(args.seeds):
            if late():
                break
            result["mutant_runs"].append(one_run(mutant, pair, 100 + s, contexts=True, stop_on_fail=True, lock=False))
            save()
            print("mutant", s, result["mutant_runs"][-1]["verdict"], result["mutant_runs"][-1]["seconds"], flush=True)
        if not args.skip_timing and not late():
            result["timing"]["old_plan"] = one_run(reference_generate, pair, 0, contexts=False, samples=20_000,
                                                   stop_on_fail=False, lock=False)
            result["timing"]["new_plan"] = one_run(reference_generate, pair, 0, contexts=True, stop_on_fail=False,
                                                   lock=False)
            save()
            print({k: (v["seconds"], v["detectable_tv"], v["verdict"]) for k, v in result["timing"].items()},
                  flush=True)
    for s in range(args.control_seeds):
        if time.monotonic() - started > args.budget_s or late():
            break
        result["control_runs"].append(one_run(reference_generate, pair, 1000 + s, contexts=True, stop_on_fail=False))
        save()
        print("control", s, result["control_runs"][-1]["verdict"], result["control_runs"][-1]["seconds"], flush=True)
    save()
    print(result["summary"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
