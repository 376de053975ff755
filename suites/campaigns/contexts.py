"""The contexts campaign: the context-diverse default plan on the toy pair, measured.

    specdec campaign contexts --out results/contexts [--parts mutant,timing,control] [--seeds 20]
        [--control-seeds 200] [--control-samples N] [--stop-at UNIX_TIME|HH:MM] [--budget-s S] [--held-lock]

Every run is a cell of `harness.executor.run_cells`, journaled in OUT/journal.jsonl: a rerun skips the seeds a part
already ran, so a part can be run in chunks (`--stop-at` / `--budget-s`: no run starts after them). Each part's
record is OUT/PART.json, written from the journal; OUT/campaign.json is their merge. Parts:
- `mutant`: the sampling-path block-boundary mutant (harness.mutants.generation:stale_page_at_block_boundary_sampling)
  at the default plan with the catalogue over `--seeds` seeds (100, 101, …), stopping at the first decided
  cell: detections at the gate;
- `timing`: one run each of the old plan (the pair's two prompts, 20,000 samples per cell, `--contexts none`)
  and the plan with the catalogue (prompt cells + contexts cells, harness/contexts.py), the reference
  generate(), timed in one process with the load average beside them (run it under `heavy --exclusive`);
- `engine`: the mutant (`--seeds`) and the reference (`--control-seeds`) served by `specdec serve` and checked
  over HTTP (`specdec verify --level engine --pair toy --contexts catalogue`), `--engine-samples` per cell;
- `demo` (opt-in: name it in --parts; needs the embedded SmolLM2 pair): the demo's generation level, its old plan
  (two prompts, default settings, 480 samples of 4 new tokens) and its plan now (the catalogue, one sampling
  setting, 16 new tokens), timed one after the other in one process -> OUT/demo.json;
- `control`: the reference over up to `--control-seeds` seeds (1000, 1001, …): false alarms at the gate, at the
  default plan or at `--control-samples N` per cell (the same battery: the false-alarm rate of exact tests does
  not depend on n; each row records the n it ran at).
The mutant and timing parts hold the machine's CPU lock (/tmp/specdec-cpu.lock) as one block; each control run
takes it for itself. `--held-lock`: the caller holds it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import os
import time

import torch

from harness.check.generation import run_generation_check
from harness.configs import Parser, add_arguments, option
from harness.contexts import coverage, plan
from harness.envelope import read_result, write_result
from harness.executor import Journal, LocalExecutor, add_runner_arguments, deadline, run_cells
from harness.mutants import get
from harness.pairs import get_pair
from harness.records import provenance
from specdec_ref.adapters import generate as reference_generate
from suites.outputs import FOLDERS

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
    from harness.check.exact_laws import continuation_law, total_variation
    from harness.models.toy_pairs import toy_models, toy_prompts
    from harness.mutants.generation import exact_output_law
    from specdec_ref.generate import default_eos, eos_set

    out = {}
    for name in HOOK_MUTANTS:
        impl = get(name)
        target, draft = toy_models({"toy": "0.7", "toy-eos": "eos"}[impl.pair], torch.float64)
        eos = eos_set(default_eos(target))
        (setting,) = impl.fn.settings
        out[name] = {"pair": impl.pair, "setting": setting.label, "tv_per_prompt": [
            total_variation(exact_output_law(target, draft, p, length, gamma, setting, impl.fn.hooks, eos),
                            continuation_law(target, p, length, setting, 16, eos)) for p in toy_prompts()[:2]]}
    return out


PARTS = ("mutant", "timing", "control", "engine")
OPT_IN_PARTS = ("demo",)  # named in --parts only: needs the embedded SmolLM2 pair


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


def demo_timing(threads: int = 2) -> dict:
    """The demo's generation level on the embedded SmolLM2 pair, its old plan and its plan now, one after the other in
    this process (the pair loaded once, before either clock starts): seconds, the headline detectable TV, the
    contexts cell's TV per family. Never resumed: the ratio comes from one process."""
    from harness.check.api import run_verify
    from harness.models.smollm2 import smollm2_available
    from suites.campaigns.demo import OLD_DEMO_PLAN, demo_generation_config

    ok, why = smollm2_available()
    if not ok:
        return {"error": f"specdec campaign contexts --parts demo: the embedded SmolLM2 pair is not installed ({why})"}
    torch.set_num_threads(threads)
    get_pair("smollm2")  # load (and cache) the pair outside both clocks
    record: dict = {"pair": "smollm2", "threads": threads, "provenance": provenance(seed=0, device="cpu")}
    raw: dict = {}
    for name, override in (("old_plan", OLD_DEMO_PLAN), ("new_plan", {})):
        config = demo_generation_config("smollm2", **override)
        load_before, started = _load(), time.perf_counter()
        report = run_verify(config)
        raw[name] = time.perf_counter() - started
        record[name] = {
            "plan": {k: getattr(config, k) for k in ("samples", "length", "contexts", "settings", "score_dtype")},
            "verdict": report.verdict, "seconds": round(raw[name], 1),
            "load_before": load_before, "load_after": _load(), "samples": report.samples,
            "detectable_tv": report.detectable_tv, "declared_tests": report.declared_tests,
            "tokens": {c["name"]: c["tokens"] for c in report.cases if "tokens" in c},
            "detectable_tv_per_family": {c["name"]: c["detectable_tv_per_family"] for c in report.cases
                                         if "detectable_tv_per_family" in c}}
    record["ratio_new_over_old"] = round(raw["new_plan"] / raw["old_plan"], 3)
    return record


def load_journal(path: str) -> dict | None:
    """An earlier chunk's OUT/PART.json (resumed: the seeds it ran are not run again): its report with the
    chunks of its summary, or None."""
    if not os.path.exists(path):
        return None
    envelope = read_result(path)
    return {**envelope.report, "chunks": envelope.summary.get("chunks", [])}


def _migrate(journal: Journal, journals: dict) -> None:
    """Runs recorded in the per-part JSON files before this campaign ran on `run_cells` enter the cell journal
    under their keys (once), so a rerun resumes them as before."""
    have = journal.load()
    for part, runs_key, prefix in (("mutant", "runs", "mutant"), ("control", "runs", "control"),
                                   ("engine", "mutant_runs", "engine-mutant"),
                                   ("engine", "control_runs", "engine-control")):
        for row in journals[part].get(runs_key, []):
            if f"{prefix}/{row['seed']}" not in have:
                journal.append(f"{prefix}/{row['seed']}", row)


def _rows(done: dict, prefix: str) -> list[dict]:
    """The journaled runs under `prefix`, by seed."""
    return sorted((r for k, r in done.items() if k.rsplit("/", 1)[0] == prefix), key=lambda r: r["seed"])


@dataclasses.dataclass
class Config:
    """`specdec campaign contexts`: its flags (harness.configs.option)."""

    out: str = option(FOLDERS["campaign.contexts"], "--out", "results folder (default: suites/outputs.py)", metavar="DIR")
    seeds: int = option(20, '--seeds', 'seeds', int)
    control_seeds: int = option(200, '--control-seeds', 'control seeds', int)
    control_samples: int | None = option(None, '--control-samples', "declared samples per cell of the control runs (default: the default plan). The false-alarm "
                         "rate of exact tests does not depend on n; the JSON records the n used", int)
    engine_samples: int = option(1100, '--engine-samples', "engine part: continuations per cell (1,100: the contexts cell's default plan)", int)
    parts: str = option(",".join(PARTS), '--parts', f"comma-separated subset of {', '.join(PARTS)}")
    skip_timing: bool = option(False, '--skip-timing', 'skip timing', action='store_true')
    exact_only: bool = option(False, '--exact-only', "only OUT/exact_tv.json (seconds)", action='store_true')
    held_lock: bool = option(False, '--held-lock', "the CPU lock is already held by the caller", action='store_true')


def argument_parser() -> argparse.ArgumentParser:
    """`specdec campaign contexts`: every flag from a config field (Config, the runner's)."""
    ap = Parser(description=__doc__.splitlines()[0], prog='specdec campaign contexts')
    add_arguments(ap, Config)
    add_runner_arguments(ap, where=False)
    return ap


def main(argv=None) -> int:
    ap = argument_parser()
    args = ap.parse_args(argv)
    HELD["lock"] = args.held_lock
    parts = set(filter(None, args.parts.split(",")))
    if parts - set(PARTS) - set(OPT_IN_PARTS):
        print(f"specdec campaign contexts: unknown --parts {sorted(parts - set(PARTS) - set(OPT_IN_PARTS))}; valid: "
              f"{', '.join(PARTS + OPT_IN_PARTS)}",
              file=__import__("sys").stderr)
        return 2
    if args.skip_timing:
        parts.discard("timing")
    late = deadline(args.stop_at, args.budget_s)
    if args.exact_only:
        os.makedirs(args.out, exist_ok=True)
        tvs = exact_tvs()
        write_result(f"{args.out}/exact_tv.json", "campaign.contexts.exact_tv", config=args,
                     provenance=provenance(seed=None, dtype="float64"), report=tvs, summary={"entries": len(tvs)})
        for name, row in tvs.items():
            print(f"{name:40s} {row['pair']:8s} {row['setting']:28s} exact TV "
                  + ", ".join(f"{t:.4f}" for t in row["tv_per_prompt"]))
        return 0
    os.makedirs(args.out, exist_ok=True)
    if "demo" in parts:
        with cpu_lock():
            record = demo_timing()
        if "error" in record:  # the run could not be done: exit 2, one line, nothing written
            print(record["error"], file=__import__("sys").stderr)
            return 2
        write_result(f"{args.out}/demo.json", "campaign.contexts.demo", config=args, provenance=record["provenance"],
                     report={k: v for k, v in record.items() if k != "provenance"},
                     summary={"ratio_new_over_old": record["ratio_new_over_old"]})
        print({k: (v["seconds"], v["detectable_tv"], v["verdict"]) for k, v in record.items() if isinstance(v, dict)
               and "seconds" in v}, record["ratio_new_over_old"], flush=True)
        parts.discard("demo")
        if not parts:
            return 0 if all(record[k]["verdict"] == "pass" for k in ("old_plan", "new_plan")) else 1
    torch.set_num_threads(1)
    pair = get_pair("toy")
    # Every run is a cell of run_cells, journaled in OUT/journal.jsonl (a rerun skips the seeds a part already ran);
    # OUT/PART.json (mutant, timing, control, engine) are the per-part records written from it, and
    # OUT/campaign.json their merge, rewritten after every run.
    journals = {part: load_journal(f"{args.out}/{part}.json") or {"runs": [], "chunks": []} for part in PARTS}
    journal = Journal(f"{args.out}/journal.jsonl", fresh=args.fresh)
    if not args.fresh:
        _migrate(journal, journals)
    chunk = {"command": "specdec campaign contexts " + " ".join(argv or []),
             "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "load_at_start": _load()}
    for part in parts:
        journals[part]["chunks"].append(chunk)

    meta = provenance(seed=0, device="cpu", dtype="float64")

    def save(part: str, done: dict | None = None):
        done = journal.load() if done is None else done
        if part in ("mutant", "control"):
            journals[part]["runs"] = _rows(done, part)
        if part == "engine":
            journals["engine"]["mutant_runs"] = _rows(done, "engine-mutant")
            journals["engine"]["control_runs"] = _rows(done, "engine-control")
        record = journals[part]
        write_result(f"{args.out}/{part}.json", f"campaign.contexts.{part}", config=args, provenance=meta,
                     report={k: v for k, v in record.items() if k != "chunks"}, summary={"chunks": record["chunks"]})
        merged = {part: load_journal(f"{args.out}/{part}.json") or {"runs": []} for part in PARTS}
        m, c = merged["mutant"]["runs"], merged["control"]["runs"]
        timing = merged["timing"].get("pair", {})
        summary = {"mutant_detected": sum(r["fail"] for r in m), "mutant_seeds": len(m),
                   "control_false_alarms": sum(r["fail"] for r in c), "control_seeds": len(c),
                   "control_samples_per_cell": sorted({str(r.get("declared_samples")) for r in c}),
                   "timing_ratio_new_over_old": timing.get("ratio_new_over_old")}
        write_result(f"{args.out}/campaign.json", "campaign.contexts", config=args, provenance=meta, summary=summary, report={
            "gate": GATE, "pair": "toy", "mutant": MUTANT,
            "coverage": {str(k): v for k, v in coverage(plan(pair)["contexts"]).items()},
            "engine": {"mutant_detected": sum(r["fail"] for r in merged["engine"].get("mutant_runs", [])),
                       "mutant_seeds": len(merged["engine"].get("mutant_runs", [])),
                       "control_false_alarms": sum(r["fail"] for r in merged["engine"].get("control_runs", [])),
                       "control_seeds": len(merged["engine"].get("control_runs", []))},
            "timing": timing, "mutant_runs": m, "control_runs": c,
            "chunks": {part: merged[part].get("chunks", []) for part in PARTS}})

    def cells(prefix: str, first: int, count: int) -> dict[str, tuple]:
        return {f"{prefix}/{first + s}": (first + s,) for s in range(count)}

    def report(prefix: str, part: str):
        def progress(done: int, total: int) -> None:
            if done:
                records = journal.load()  # read once per finished run: the record and the printed line
                save(part, records)
                row = _rows(records, prefix)
                print(prefix, f"{done}/{total}", "last:", row[-1]["seed"], row[-1]["verdict"], row[-1]["seconds"],
                      flush=True)
        return progress

    mutant = get(MUTANT).fn
    with cpu_lock(), LocalExecutor() as here:  # the mutant seeds and the timing pair: one stretch of machine time
        if "mutant" in parts:
            run_cells(here, lambda seed: one_run(mutant, pair, seed, contexts=True, stop_on_fail=True, lock=False),
                      cells("mutant", 100, args.seeds), journal=journal, stop=late, progress=report("mutant", "mutant"))
        if "timing" in parts and not late():  # never resumed: the ratio comes from one process
            timing = {"old_plan": one_run(reference_generate, pair, 0, contexts=False, samples=20_000,
                                          stop_on_fail=False, lock=False)}
            timing["new_plan"] = one_run(reference_generate, pair, 0, contexts=True, stop_on_fail=False, lock=False)
            timing["ratio_new_over_old"] = round(timing["new_plan"]["seconds"] / timing["old_plan"]["seconds"], 3)
            journals["timing"]["pair"] = timing
            save("timing")
            print({k: (v["seconds"], v["detectable_tv"], v["verdict"]) for k, v in timing.items() if isinstance(v, dict)},
                  timing["ratio_new_over_old"], flush=True)

    def control(seed: int) -> dict:
        row = one_run(reference_generate, pair, seed, contexts=True, samples=args.control_samples, stop_on_fail=False)
        return {**row, "declared_samples": args.control_samples or "default plan"}

    with LocalExecutor() as here:
        if "control" in parts:
            run_cells(here, control, cells("control", 1000, args.control_seeds), journal=journal, stop=late,
                      progress=report("control", "control"))
        if "engine" in parts:  # the same mutant and reference, served by `specdec serve`, checked over HTTP
            from harness.served.serve import serving

            for kind, fn, first, count, stop_on_fail in (
                    ("mutant", mutant, 100, args.seeds, True),
                    ("control", reference_generate, 1000, args.control_seeds, False)):
                with serving(fn, pair) as server:
                    run_cells(here, lambda seed, url=server.url, stop=stop_on_fail: engine_run(
                        url, seed, samples=args.engine_samples, stop_on_fail=stop),
                        cells(f"engine-{kind}", first, count), journal=journal, stop=late,
                        progress=report(f"engine-{kind}", "engine"))
    for part in parts:
        save(part)
    print(read_result(f"{args.out}/campaign.json").summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
