"""The contexts campaign: the context-diverse default plan on the toy pair, measured.

    specdec campaign contexts --out results/contexts [--parts mutant,timing,control] [--seeds 20]
        [--control-seeds 200] [--control-samples N] [--stop-at UNIX_TIME|HH:MM] [--budget-s S] [--held-lock]

Every run is a cell of the campaign runner (harness.runner), in this process and in order, journaled in
OUT/journal.jsonl: a rerun skips the seeds a part already ran, so a part can be run in chunks (`--stop-at` /
`--budget-s`: no run starts after them). Each part this command runs gets its record OUT/PART.json, written from every
run of the journal; OUT/campaign.json is their merge. Parts:
- `mutant`: the sampling-path block-boundary mutant (harness.mutants.generation:stale_page_at_block_boundary_sampling)
  at the default plan with the catalogue over `--seeds` seeds (100, 101, …), stopping at the first decided
  cell: detections at the gate;
- `timing`: one run each of the old plan (the pair's two prompts, 20,000 samples per cell, `--contexts none`)
  and the plan with the catalogue (prompt cells + contexts cells, harness/contexts.py), the reference
  generate(), timed in one cell under one hold of the CPU lock, with the load average beside them (run it under
  `heavy --exclusive`); each command that names it measures it again (the report takes the latest);
- `engine`: the mutant (`--seeds`) and the reference (`--control-seeds`) served by `specdec serve` (one server at a
  time, started by the first cell that needs it) and checked over HTTP (`specdec verify --level engine --pair toy
  --contexts catalogue`), `--engine-samples` per cell;
- `demo` (opt-in: name it in --parts; needs the embedded SmolLM2 pair): the demo's generation level, its old plan
  (two prompts, default settings, 480 samples of 4 new tokens) and its plan now (the catalogue, one sampling
  setting, 16 new tokens), timed one after the other in one cell -> OUT/demo.json (measured again by each command
  that names it);
- `control`: the reference over up to `--control-seeds` seeds (1000, 1001, …): false alarms at the gate, at the
  default plan or at `--control-samples N` per cell (the same battery: the false-alarm rate of exact tests does
  not depend on n; each row records the n it ran at).
`--exact-only`: OUT/exact_tv.json alone (the hook mutants' exact TVs, seconds). Every run holds the machine's CPU
lock (/tmp/specdec-cpu.lock) for itself (the timing pair: both its runs under one hold). `--held-lock`: the caller
holds it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import time

import torch

from harness.check.generation import run_generation_check
from harness.configs import option
from harness.contexts import coverage, plan
from harness.mutants import get
from harness.pairs import get_pair
from specdec_ref.adapters import generate as reference_generate
from suites.campaigns._exact import HOOK_MUTANTS, exact_tvs, exact_tvs_at  # noqa: F401 - re-exported

GATE = 1e-3  # the family-wise false-alarm rate of `specdec verify` (its default)
MUTANT = "stale_page_at_block_boundary_sampling"
LOCK = "/tmp/specdec-cpu.lock"


@contextlib.contextmanager
def cpu_lock(path: str = LOCK, *, held: bool = False):
    """The machine's CPU lock for the block; `held`: the caller holds it already (--held-lock: e.g. `flock LOCK
    specdec campaign ...`)."""
    if held:
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
    """One generation-level run, under the CPU lock unless `lock` is False (held already)."""
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


PARTS = ("mutant", "timing", "control", "engine")
OPT_IN_PARTS = ("demo",)  # named in --parts only: needs the embedded SmolLM2 pair


def engine_run(url: str, seed: int, *, samples: int, stop_on_fail: bool, held: bool = False) -> dict:
    """One engine-level run over HTTP against `url` (`specdec serve`), the catalogue's contexts cells on."""
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig

    config = EngineConfig(endpoint=url + "/v1", pair="toy", contexts="catalogue", samples=samples, seed=seed,
                          false_alarm_rate=GATE, stop_on_fail=stop_on_fail, prompts=2)
    with cpu_lock(held=held):
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
    contexts cell's TV per family. The ratio comes from this one call."""
    from harness.check.api import run_verify
    from suites.campaigns._demo_plan import OLD_DEMO_PLAN, demo_generation_config

    torch.set_num_threads(threads)
    get_pair("smollm2")  # load (and cache) the pair outside both clocks
    record: dict = {"pair": "smollm2", "threads": threads}
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


def timing_pair(held: bool = False) -> dict:
    """The old plan (the pair's two prompts, 20,000 samples per cell, no contexts) and the plan with the catalogue,
    the reference generate(), one after the other under one hold of the CPU lock."""
    pair = get_pair("toy")
    with cpu_lock(held=held):
        timing = {"old_plan": one_run(reference_generate, pair, 0, contexts=False, samples=20_000, stop_on_fail=False,
                                      lock=False)}
        timing["new_plan"] = one_run(reference_generate, pair, 0, contexts=True, stop_on_fail=False, lock=False)
    timing["ratio_new_over_old"] = round(timing["new_plan"]["seconds"] / timing["old_plan"]["seconds"], 3)
    return timing


def _rows(done: dict, prefix: str) -> list[dict]:
    """The journaled runs under `prefix`, by seed."""
    return sorted((r for k, r in done.items() if k.rsplit("/", 1)[0] == prefix), key=lambda r: r["seed"])


def _latest(done: dict, prefix: str) -> dict | None:
    """The last journaled record of a once-per-invocation cell (`timing/…`, `demo/…`)."""
    return next((r for k, r in reversed(done.items()) if k.startswith(prefix + "/")), None)


@dataclasses.dataclass
class Config:
    seeds: int = option(20, "--seeds", "mutant seeds (100, 101, …), the mutant and engine parts", int, "N")
    control_seeds: int = option(200, "--control-seeds", "reference seeds (1000, 1001, …), the control and engine "
                                "parts", int, "N")
    control_samples: int | None = option(None, "--control-samples", "declared samples per cell of the control runs "
                                         "(default: the default plan). The false-alarm rate of exact tests does not "
                                         "depend on n; the JSON records the n used", int, "N")
    engine_samples: int = option(1100, "--engine-samples", "engine part: continuations per cell (1,100: the contexts "
                                 "cell's default plan)", int, "N")
    parts: tuple[str, ...] = PARTS  # the runner's --parts (demo: opt-in)
    skip_timing: bool = option(False, "--skip-timing", "leave the timing part out", action="store_true")
    exact_only: bool = option(False, "--exact-only", "only OUT/exact_tv.json (seconds)", action="store_true")
    held_lock: bool = option(False, "--held-lock", "the CPU lock is already held by the caller", action="store_true")


WHERE = "local"  # the CPU lock, the servers of the engine part and the timing pair are this process's
CONTEXT = True  # run_cell(held, ...): the session's Held (--held-lock, the engine part's server)


def parts(config: Config) -> list[str]:
    """The parts this command runs, in the order they run (none with --exact-only)."""
    if config.exact_only:
        return []
    return [p for p in (*OPT_IN_PARTS, *PARTS) if p in config.parts and not (p == "timing" and config.skip_timing)]


def validate(config: Config) -> None:
    from harness.errors import HarnessError

    if min(config.seeds, config.control_seeds) < 0 or config.engine_samples < 1:
        raise HarnessError("--seeds and --control-seeds must be >= 0, --engine-samples >= 1")
    if config.control_samples is not None and config.control_samples < 1:
        raise HarnessError(f"--control-samples must be >= 1, got {config.control_samples}")
    if "demo" in parts(config):
        from harness.models.smollm2 import smollm2_available

        ok, why = smollm2_available()
        if not ok:
            raise HarnessError(f"specdec campaign contexts --parts demo: the embedded SmolLM2 pair is not installed "
                               f"({why})")


@dataclasses.dataclass
class Held:
    """What the session holds for the cells: --held-lock, and the engine part's server while its cells run."""

    lock: bool = False  # the caller holds the CPU lock
    served: dict = dataclasses.field(default_factory=dict)  # {"kind": ..., "url": ..., "stack": ExitStack}

    def stop_server(self) -> None:
        if self.served:
            self.served.pop("stack").close()
            self.served.clear()

    def server_url(self, kind: str) -> str:
        """The URL of `specdec serve` running the mutant (kind "mutant") or the reference on the toy pair; one server
        at a time, started when the first cell of its kind runs."""
        if self.served.get("kind") != kind:
            from harness.served.serve import serving

            self.stop_server()
            stack = contextlib.ExitStack()
            fn = get(MUTANT).fn if kind == "mutant" else reference_generate
            server = stack.enter_context(serving(fn, get_pair("toy")))
            self.served.update(kind=kind, url=server.url, stack=stack)
        return self.served["url"]


@contextlib.contextmanager
def session(config: Config):
    """--held-lock for the run; the engine part's server (started by its first cell) is stopped at the end."""
    held = Held(lock=config.held_lock)
    try:
        yield held
    finally:
        held.stop_server()


def provenance_fields(config: Config) -> dict:
    return {"seed": 0, "dtype": "float64"}


def cells(config: Config) -> dict[str, tuple]:
    """The exact TVs (--exact-only), or the parts' runs: a demo and a timing pair (once per command: each is a new
    measurement), the mutant seeds, the control seeds, the engine part's mutant then control seeds."""
    if config.exact_only:
        return {"exact_tv": ("exact_tv",)}
    now = f"{time.time():.6f}"  # a once-per-command cell's key: this command's own measurement
    out: dict[str, tuple] = {}
    todo = parts(config)
    if "demo" in todo:
        out[f"demo/{now}"] = ("demo",)
    if "mutant" in todo:
        out.update({f"mutant/{100 + s}": ("mutant", 100 + s) for s in range(config.seeds)})
    if "timing" in todo:
        out[f"timing/{now}"] = ("timing",)
    if "control" in todo:
        out.update({f"control/{1000 + s}": ("control", 1000 + s, config.control_samples)
                    for s in range(config.control_seeds)})
    if "engine" in todo:
        out.update({f"engine-mutant/{100 + s}": ("engine-mutant", 100 + s, config.engine_samples)
                    for s in range(config.seeds)})
        out.update({f"engine-control/{1000 + s}": ("engine-control", 1000 + s, config.engine_samples)
                    for s in range(config.control_seeds)})
    return out


def run_cell(held: Held, kind: str, seed: int = 0, samples: int | None = None) -> dict:
    torch.set_num_threads(1)
    if kind == "exact_tv":
        return exact_tvs()
    if kind == "demo":
        return demo_timing()
    if kind == "timing":
        record = timing_pair(held.lock)
        print({k: (v["seconds"], v["detectable_tv"], v["verdict"]) for k, v in record.items() if isinstance(v, dict)},
              record["ratio_new_over_old"], flush=True)
        return record
    if kind in ("engine-mutant", "engine-control"):
        mutant = kind == "engine-mutant"
        return engine_run(held.server_url("mutant" if mutant else "control"), seed, samples=samples,
                          stop_on_fail=mutant, held=held.lock)
    pair = get_pair("toy")
    if kind == "mutant":
        record = one_run(get(MUTANT).fn, pair, seed, contexts=True, stop_on_fail=True, lock=not held.lock)
    else:
        record = {**one_run(reference_generate, pair, seed, contexts=True, samples=samples, stop_on_fail=False,
                            lock=not held.lock),
                  "declared_samples": samples or "default plan"}
    print(kind, record["seed"], record["verdict"], record["seconds"], flush=True)
    return record


def report(run) -> int:
    """The parts this command ran, each OUT/PART.json from every run of the journal, and OUT/campaign.json (their
    merge); --exact-only: OUT/exact_tv.json. Exit 0; with the demo part, 1 unless both its plans PASS."""
    done, config = run.journal, run.config
    if config.exact_only:
        tvs = done.get("exact_tv")
        if tvs is not None:
            run.write_result("exact_tv.json", "campaign.contexts.exact_tv", report=tvs, summary={"entries": len(tvs)})
            for name, row in tvs.items():
                print(f"{name:40s} {row['pair']:8s} {row['setting']:28s} exact TV "
                      + ", ".join(f"{t:.4f}" for t in row["tv_per_prompt"]))
        return 0
    m, c = _rows(done, "mutant"), _rows(done, "control")
    em, ec = _rows(done, "engine-mutant"), _rows(done, "engine-control")
    timing, demo = _latest(done, "timing"), _latest(done, "demo")
    records = {"mutant": {"runs": m}, "control": {"runs": c}, "timing": {"runs": [], "pair": timing or {}},
               "engine": {"runs": [], "mutant_runs": em, "control_runs": ec}}
    summary = {"command": run.command, "complete": run.complete}
    todo = parts(config)
    for part in (p for p in todo if p in records):
        run.write_result(f"{part}.json", f"campaign.contexts.{part}", report=records[part], summary=summary)
    if "demo" in todo and demo is not None:
        run.write_result("demo.json", "campaign.contexts.demo", report=demo,
                         summary={**summary, "ratio_new_over_old": demo["ratio_new_over_old"]})
        print({k: (v["seconds"], v["detectable_tv"], v["verdict"]) for k, v in demo.items() if isinstance(v, dict)
               and "seconds" in v}, demo["ratio_new_over_old"], flush=True)
    merged = {"mutant_detected": sum(r["fail"] for r in m), "mutant_seeds": len(m),
              "control_false_alarms": sum(r["fail"] for r in c), "control_seeds": len(c),
              "control_samples_per_cell": sorted({str(r.get("declared_samples")) for r in c}),
              "timing_ratio_new_over_old": (timing or {}).get("ratio_new_over_old")}
    if set(todo) - {"demo"}:
        run.write_result("campaign.json", "campaign.contexts", summary={**merged, **summary}, report={
            "gate": GATE, "pair": "toy", "mutant": MUTANT,
            "coverage": {str(k): v for k, v in coverage(plan(get_pair("toy"))["contexts"]).items()},
            "engine": {"mutant_detected": sum(r["fail"] for r in em), "mutant_seeds": len(em),
                       "control_false_alarms": sum(r["fail"] for r in ec), "control_seeds": len(ec)},
            "timing": timing or {}, "mutant_runs": m, "control_runs": c})
        print(merged)
    if "demo" in todo:
        return 0 if demo and all(demo[k]["verdict"] == "pass" for k in ("old_plan", "new_plan")) else 1
    return 0
