"""The contexts campaign: the context-diverse default plan on the toy pair, measured.

    specdec campaign contexts --out results/contexts [--parts mutant,timing,control] [--seeds 20]
        [--control-seeds 200] [--control-samples N] [--stop-at UNIX_TIME] [--held-lock]

Parts (each with its own journal OUT/PART.json, resumed: seeds already there are not run again, so a part can be
run in chunks and two parts at once; OUT/campaign.json is their merge):
- `mutant`: the sampling-path block-boundary mutant (harness.mutants.generation:stale_page_at_block_boundary_sampling)
  at the default plan with the catalogue over `--seeds` seeds (100, 101, …), stopping at the first decided
  cell: detections at the gate;
- `timing`: one run each of the old plan (the pair's two prompts, 20,000 samples per cell, `--contexts none`)
  and the plan with the catalogue (prompt cells + contexts cells, harness/contexts.py), the reference
  generate(), timed in one process with the load average beside them (run it under `heavy --exclusive`);
- `engine`: the mutant (`--seeds`) and the reference (`--control-seeds`) served by `specdec serve` and checked
  over HTTP (`specdec verify --level engine --pair toy --contexts catalogue`), `--engine-samples` per cell;
- `control`: the reference over up to `--control-seeds` seeds (1000, 1001, …): false alarms at the gate, at the
  default plan or at `--control-samples N` per cell (the same battery: the false-alarm rate of exact tests does
  not depend on n; each row records the n it ran at).
The mutant and timing parts hold the machine's CPU lock (/tmp/specdec-cpu.lock) as one block; each control run
takes it for itself. `--held-lock`: the caller holds it.
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


PARTS = ("mutant", "timing", "control", "engine")


def engine_run(url: str, seed: int, *, samples: int, stop_on_fail: bool) -> dict:
    """One engine-level run over HTTP against `url` (`specdec serve`), the catalogue's contexts cells on."""
    from harness.served.check import EngineConfig, run_engine_check

    config = EngineConfig(endpoint=url + "/v1", pair="toy", contexts="catalogue", samples=samples, seed=seed,
                          false_alarm_rate=GATE, stop_on_fail=stop_on_fail, prompts=2)
    with cpu_lock():
        load_before, started = _load(), time.perf_counter()
        report = run_engine_check(config)
        seconds = time.perf_counter() - started
    families = {c["name"]: c["detectable_tv_per_family"] for c in report.cases if "detectable_tv_per_family" in c}
    return {"seed": seed, "verdict": report.verdict, "fail": report.verdict == "fail", "seconds": round(seconds, 1),
            "load_before": load_before, "load_after": _load(), "samples": report.samples,
            "declared_samples": samples, "detectable_tv": report.detectable_tv,
            "detectable_tv_per_family": families, "rejected": [t.name for t in report.tests if t.reject][:6],
            "declared_tests": report.declared_tests}


def load_journal(path: str) -> dict | None:
    """The campaign.json of an earlier chunk (resumed: the seeds it ran are not run again), or None."""
    import json

    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/contexts")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--control-seeds", type=int, default=200)
    ap.add_argument("--control-samples", type=int, default=None,
                    help="declared samples per cell of the control runs (default: the default plan). The false-alarm "
                         "rate of exact tests does not depend on n; the JSON records the n used")
    ap.add_argument("--budget-s", type=float, default=2400.0, help="stop starting control runs after this")
    ap.add_argument("--engine-samples", type=int, default=1100,
                    help="engine part: continuations per cell (1,100: the contexts cell's default plan)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--exact-only", action="store_true", help="only OUT/exact_tv.json (seconds)")
    ap.add_argument("--held-lock", action="store_true", help="the CPU lock is already held by the caller")
    ap.add_argument("--stop-at", type=float, default=None,
                    help="start no run after this Unix time (the JSON says how many ran)")
    args = ap.parse_args(argv)
    HELD["lock"] = args.held_lock
    parts = set(filter(None, args.parts.split(",")))
    if parts - set(PARTS):
        print(f"specdec campaign contexts: unknown --parts {sorted(parts - set(PARTS))}; valid: {', '.join(PARTS)}",
              file=__import__("sys").stderr)
        return 2
    if args.skip_timing:
        parts.discard("timing")

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
    # One journal per part (OUT/mutant.json, timing.json, control.json), so that chunks of different parts can run
    # at once (one per CPU slot) and resume; OUT/campaign.json is their merge, rewritten after every run.
    journals = {part: load_journal(f"{args.out}/{part}.json") or {"runs": [], "chunks": []} for part in PARTS}
    chunk = {"command": "specdec campaign contexts " + " ".join(argv or []),
             "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "load_at_start": _load()}
    for part in parts:
        journals[part]["chunks"].append(chunk)

    def save(part: str):
        atomic_write_json(f"{args.out}/{part}.json", journals[part])
        merged = {part: load_journal(f"{args.out}/{part}.json") or {"runs": []} for part in PARTS}
        m, c = merged["mutant"]["runs"], merged["control"]["runs"]
        timing = merged["timing"].get("pair", {})
        atomic_write_json(f"{args.out}/campaign.json", {
            "gate": GATE, "pair": "toy", "mutant": MUTANT, "provenance": provenance(seed=0, device="cpu", dtype="float64"),
            "coverage": {str(k): v for k, v in coverage(plan(pair)["contexts"]).items()},
            "summary": {"mutant_detected": sum(r["fail"] for r in m), "mutant_seeds": len(m),
                        "control_false_alarms": sum(r["fail"] for r in c), "control_seeds": len(c),
                        "control_samples_per_cell": sorted({str(r.get("declared_samples")) for r in c}),
                        "timing_ratio_new_over_old": timing.get("ratio_new_over_old")},
            "engine": {"mutant_detected": sum(r["fail"] for r in merged["engine"].get("mutant_runs", [])),
                       "mutant_seeds": len(merged["engine"].get("mutant_runs", [])),
                       "control_false_alarms": sum(r["fail"] for r in merged["engine"].get("control_runs", [])),
                       "control_seeds": len(merged["engine"].get("control_runs", []))},
            "timing": timing, "mutant_runs": m, "control_runs": c,
            "chunks": {part: merged[part].get("chunks", []) for part in PARTS}})

    mutant = get(MUTANT).fn
    with cpu_lock():  # the mutant seeds and the timing pair: one stretch of machine time
        done = {r["seed"] for r in journals["mutant"]["runs"]}
        for s in range(args.seeds) if "mutant" in parts else ():
            if late():
                break
            if 100 + s in done:
                continue
            row = one_run(mutant, pair, 100 + s, contexts=True, stop_on_fail=True, lock=False)
            journals["mutant"]["runs"].append(row)
            save("mutant")
            print("mutant", 100 + s, row["verdict"], row["seconds"], flush=True)
        if "timing" in parts and not late():
            timing = {"old_plan": one_run(reference_generate, pair, 0, contexts=False, samples=20_000,
                                          stop_on_fail=False, lock=False)}
            timing["new_plan"] = one_run(reference_generate, pair, 0, contexts=True, stop_on_fail=False, lock=False)
            timing["ratio_new_over_old"] = round(timing["new_plan"]["seconds"] / timing["old_plan"]["seconds"], 3)
            journals["timing"]["pair"] = timing
            save("timing")
            print({k: (v["seconds"], v["detectable_tv"], v["verdict"]) for k, v in timing.items() if isinstance(v, dict)},
                  timing["ratio_new_over_old"], flush=True)
    done = {r["seed"] for r in journals["control"]["runs"]}
    for s in range(args.control_seeds) if "control" in parts else ():
        if time.monotonic() - started > args.budget_s or late():
            break
        if 1000 + s in done:
            continue
        row = one_run(reference_generate, pair, 1000 + s, contexts=True, samples=args.control_samples,
                      stop_on_fail=False)
        row["declared_samples"] = args.control_samples or "default plan"
        journals["control"]["runs"].append(row)
        save("control")
        print("control", 1000 + s, row["verdict"], row["seconds"], flush=True)
    if "engine" in parts:  # the same mutant and reference, served by `specdec serve`, checked over HTTP
        from harness.served.serve import serving

        journal = journals["engine"]
        for kind, fn, first, count, stop in (("mutant", mutant, 100, args.seeds, True),
                                             ("control", reference_generate, 1000, args.control_seeds, False)):
            runs = journal.setdefault(f"{kind}_runs", [])
            done = {r["seed"] for r in runs}
            with serving(fn, pair) as server:
                for s in range(count):
                    if time.monotonic() - started > args.budget_s or late():
                        break
                    if first + s in done:
                        continue
                    runs.append(engine_run(server.url, first + s, samples=args.engine_samples, stop_on_fail=stop))
                    save("engine")
                    print("engine", kind, first + s, runs[-1]["verdict"], runs[-1]["seconds"], flush=True)
    for part in parts:
        save(part)
    print({k: v for k, v in load_journal(f"{args.out}/campaign.json")["summary"].items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
