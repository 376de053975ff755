"""What the contexts cell's pooled and per-context tests detect: power per (deviation class, ε, f), by simulation.

    specdec campaign headline --out results/headline [--sims 200] [--seed 0]

The toy pair's default contexts cell draws 1,100 rows of 40 tokens over 520 contexts (round robin, so about 85
tokens per context), each token from its own law. Here every token gets a synthetic law over V = 16 tokens
(softmax of N(0, σ²) logits, σ = 1.5: the entropy is reported) and, at a fraction f of the contexts (every token of
those contexts), the emitted law is replaced by a deviation of total variation exactly ε:

- `tilt`: q ∝ p^β with one β < 1 (flatter: a temperature too high, a penalty on the likely tokens) per law;
- `tilt±`: the same at half the deviating contexts and q ∝ p^β with β > 1 (sharper) at the other half, so the
  pooled PIT law is a mixture whose deviations partly cancel (per-row garbage temperatures);
- `swap`: mass ε moved between two tokens of neighbouring rank (a deviation the PIT's bins hardly see).

Each test runs at the default toy plan's per-test Holm rate (1e-3 / 45 gating tests). The row ε = 0 is each test's
false-alarm rate at that rate and at 0.01. Every number in the written table is measured by the run that wrote it.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from harness.configs import option
from harness.reporting import header, rate, rerun, table
from harness.stats import (
    probit_mean_test,
    probit_per_stratum_test,
    stratified_uniformity_test,
    uniformity_test,
)

TIMING_SEED, TIMING_ROUNDS = 2000, 2
ENGINE_SEED = 3000


@dataclasses.dataclass
class Config:
    sims: int = option(200, "--sims", "runs per (class, ε, f); the null gets 5×", int, "N")
    seed: int = option(0, "--seed", "seed of the simulation", int, "S")
    timing: list[str] | None = option(None, "--timing", "instead of the simulation: time these generation mutants at "
                                      "the default plan and at the plan without contexts, alternating "
                                      "(OUT/timing.json)", metavar="MUTANT", nargs="+")
    engine: list[str] | None = option(None, "--engine", "instead of the simulation: serve these generation mutants "
                                      "(specdec serve's app, toy-low unless the entry names a pair) and check them at "
                                      "the engine level with --contexts catalogue and none, alternating "
                                      "(OUT/engine.json)", metavar="MUTANT", nargs="+")
    engine_seeds: int = option(2, "--engine-seeds", "with --engine: seeds per mutant and plan", int, "N")


WHERE = "local"  # the simulation prints as it goes; the timing rows are measured in this process, in order
ROWS, LENGTH, CONTEXTS, VOCAB, SIGMA = 1_100, 40, 520, 16, 1.5
RATE = 1e-3 / 45  # the default toy plan's per-test rate (45 gating tests declared at T = 1)
POWER = 0.99
EPSILONS = (0.0, 0.01, 0.02, 0.03, 0.05)
FRACTIONS = (1.0, 0.5, 0.2)
CLASSES = ("tilt", "tilt±", "swap")
MIN_EXPECTED = 5.0  # GATE_MIN_EXPECTED of the generation battery


def tests(u: np.ndarray, context: np.ndarray, row: np.ndarray) -> dict[str, float]:
    """p-values of the contexts cell's PIT tests that pool or stratify over contexts (harness.check.context_cells)."""
    return {"pooled PIT (binned)": uniformity_test(u, min_expected=MIN_EXPECTED).p_value,
            "per-context PIT (binned)": stratified_uniformity_test(u, context, min_expected=MIN_EXPECTED).p_value,
            "probit mean": probit_mean_test(u).p_value,
            "probit per context": probit_per_stratum_test(u, context).p_value,
            "probit per row": probit_per_stratum_test(u, row).p_value}


def _tilted(p: np.ndarray, beta: np.ndarray) -> np.ndarray:
    q = np.power(p, beta[:, None])
    return q / q.sum(1, keepdims=True)


def _tv(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return 0.5 * np.abs(p - q).sum(1)


def tilt_to_tv(p: np.ndarray, eps: float, sharper: bool) -> np.ndarray:
    """q ∝ p^β with TV(q, p) = ε for every row (bisection on β; β < 1 flatter, β > 1 sharper)."""
    lo, hi = (np.ones(len(p)), np.full(len(p), 8.0)) if sharper else (np.full(len(p), 1e-3), np.ones(len(p)))
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        far = _tv(p, _tilted(p, mid)) > eps
        if sharper:
            hi, lo = np.where(far, mid, hi), np.where(far, lo, mid)
        else:
            lo, hi = np.where(far, mid, lo), np.where(far, hi, mid)
    return _tilted(p, 0.5 * (lo + hi))


def swap_to_tv(p: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    """Mass ε moved from the token of rank r to the token of rank r + 1 (r random among those that hold ε)."""
    q = p.copy()
    order = np.argsort(-p, axis=1, kind="stable")
    for i in range(len(p)):
        ranks = [r for r in range(VOCAB - 1) if p[i, order[i, r]] >= eps]
        r = ranks[rng.integers(len(ranks))] if ranks else 0
        take = min(eps, p[i, order[i, r]])
        q[i, order[i, r]] -= take
        q[i, order[i, r + 1]] += take
    return q


def pit(p: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Randomized PIT under descending probability order (ties by token id), as harness.stats.pit."""
    p_y = p[np.arange(len(y)), y]
    above = ((p > p_y[:, None]) | ((p == p_y[:, None]) & (np.arange(VOCAB)[None, :] < y[:, None]))) * p
    return above.sum(1) + rng.random(len(y)) * p_y


def sample(q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.minimum((q.cumsum(1) < rng.random(len(q))[:, None]).sum(1), VOCAB - 1)


def run(sims: int, seed: int, progress=None) -> dict:
    rng = np.random.default_rng(seed)
    n = ROWS * LENGTH
    row = np.repeat(np.arange(ROWS), LENGTH)
    context = row % CONTEXTS  # round robin, as harness.check.context_cells.context_rows
    logits = rng.normal(0.0, SIGMA, (n, VOCAB))
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    entropy = float(np.mean(-(p * np.log(p)).sum(1)))
    sign = np.where(rng.permutation(CONTEXTS) % 2 == 0, 1, -1)  # tilt±: which deviating contexts sharpen
    rows_out = []
    started = time.perf_counter()
    for cls in CLASSES:
        for eps in EPSILONS:
            if eps == 0 and cls != CLASSES[0]:
                continue  # the null is one row
            if eps == 0:
                laws = {"flat": p}
            elif cls == "swap":
                laws = {"flat": swap_to_tv(p, eps, rng)}
            else:
                laws = {"flat": tilt_to_tv(p, eps, sharper=False), "sharp": tilt_to_tv(p, eps, sharper=True)}
            for f in FRACTIONS if eps > 0 else (1.0,):
                deviating = rng.permutation(CONTEXTS) < round(f * CONTEXTS)
                q = p.copy()
                on = deviating[context]
                if eps > 0:
                    q[on] = laws["flat"][on]
                    if cls == "tilt±":
                        sharp = on & (sign[context] < 0)
                        q[sharp] = laws["sharp"][sharp]
                runs = sims * (5 if eps == 0 else 1)
                hits: dict[str, list[int]] = {}
                for _ in range(runs):
                    for name, pv in tests(pit(p, sample(q, rng), rng), context, row).items():
                        h = hits.setdefault(name, [0, 0])
                        h[0] += pv <= RATE
                        h[1] += pv <= 0.01
                for name, (k, k01) in hits.items():
                    rows_out.append({"class": "none (H0)" if eps == 0 else cls, "tv": eps, "fraction": f,
                                     "test": name, "runs": runs, "rejections": k, "power": k / runs,
                                     "rejections_at_0.01": k01})
                if progress:
                    progress(f"{cls} ε={eps} f={f}: " + ", ".join(f"{k} {v[0] / runs:.2f}" for k, v in hits.items()))
    return {"rows": rows_out, "rate": RATE, "power_target": POWER, "entropy_nats": entropy,
            "shape": {"rows": ROWS, "length": LENGTH, "contexts": CONTEXTS, "vocab": VOCAB, "sigma": SIGMA},
            "sims": sims, "seed": seed, "seconds": time.perf_counter() - started}


def power_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """The power table's tests (its columns after class, ε, f, runs) and rows: per (class, ε, f) each test's power."""
    rows = result["rows"]
    names = list(dict.fromkeys(r["test"] for r in rows))
    keyed = {(r["class"], r["tv"], r["fraction"], r["test"]): r for r in rows}
    body = []
    for cls, tv, f in dict.fromkeys((r["class"], r["tv"], r["fraction"]) for r in rows):
        cells = [keyed[(cls, tv, f, name)] for name in names]
        body.append([cls, f"{tv:g}", f"{f:g}", str(cells[0]["runs"]), *(f"{c['power']:.2f}" for c in cells)])
    return names, body


def markdown(result: dict, lead: tuple[str, ...] = ()) -> str:
    rows = result["rows"]
    shape = result["shape"]
    names, body = power_rows(result)
    lines = ["# The contexts cell's tests: detection power per (class, TV ε, fraction f of contexts)", "", *lead,
             f"Producer: `suites/campaigns/headline.py` (the simulation took {result['seconds']:.0f} s).", "",
             f"Shape of the toy pair's default contexts cell: {shape['rows']} rows × {shape['length']} tokens over "
             f"{shape['contexts']} contexts, V = {shape['vocab']}; synthetic per-token laws (softmax of N(0, "
             f"{shape['sigma']}²) logits, mean entropy {result['entropy_nats']:.2f} nats). Per-test rate "
             f"{result['rate']:.3g} (the default plan's Holm rate at 45 gating tests). A deviation of TV ε replaces "
             "the law of every token of a fraction f of the contexts. Power = rejections / runs.", "",
             table(["class", "TV ε", "fraction f", "runs", *names], body)]
    null = [r for r in rows if r["class"] == "none (H0)"]
    lines += ["", "False alarms under H0 (same runs): " + "; ".join(
        f"{r['test']} {r['rejections']} / {r['runs']} at that rate, {r['rejections_at_0.01']} / {r['runs']} at 0.01"
        for r in null) + ".", "",
        "Reading: the pooled binned PIT (the old headline) needs a deviation common to many contexts; a tilt whose "
        "sign changes across contexts (`tilt±`) cancels in it and in the probit mean, and is seen by the per-context "
        "statistics, the probit one most. A swap between neighbouring ranks moves the PIT by less than a bin: no "
        "pooled or per-context PIT test promises anything there; only the exact joint law at a prompt (the toy "
        "plan's prompt cells, 20,000 rows) states a token-law TV.", "",
        "The default plan on planted bugs (20 seeds each, `zoo-penalties/report.md`): `specdec mutants --only "
        "penalties_count_rejected_drafts penalties_count_rejected_drafts_mild temperature_garbage_at_draft_positions "
        "--seeds 20 --out results/headline/zoo-penalties`; add `--compare-plans` for the plan without contexts "
        "beside it. The reference's false alarms at the default plan's cells (`zoo-control/report.md`): `specdec "
        "mutants --only reference_generate --control-seeds 200 --out results/headline/zoo-control`.", "",
        "The engine level with a local target (`engine.md`, served mutants, `--contexts catalogue` vs `none`): `specdec "
        "campaign headline --engine stale_page_at_block_boundary_sampling rollback_wrong_after_step_k stale_target_cache "
        "draft_q_unprocessed --engine-seeds 1`.", ""]
    return "\n".join(lines)


def timing_cells(names: list[str], seed: int = TIMING_SEED, rounds: int = TIMING_ROUNDS) -> dict[str, tuple]:
    """Each named generation mutant at the default plan and at the plan without contexts, the order alternating
    between rounds (cells run in this order, in one process)."""
    return {f"timing/{r}/{name}/{plan}": ("timing", name, plan, r, seed) for r in range(rounds) for name in names
            for plan in (("default", "prompts") if r % 2 == 0 else ("prompts", "default"))}


def timing_run(name: str, plan: str, r: int, seed: int) -> dict:
    """One timed run (the zoo's run_task: 1 torch thread, the entry's own pair and settings)."""
    from harness.mutants.registry import get
    from suites.campaigns._zoo_tasks import Task, run_task

    got = run_task(Task(name, "detect", seed, None, 0, get(name).pair or "toy-low", plan), 1e-3)
    return {"name": name, "plan": plan, "round": r, "fail": got["fail"], "samples": got["samples"],
            "seconds": round(got["seconds"], 2)}


def engine_cells(names: list[str], seeds: int) -> dict[str, tuple]:
    """Each named mutant served, checked at the engine level with the contexts catalogue and without, the order
    alternating between seeds (cells run in this order, in one process)."""
    return {f"engine/{s}/{name}/{plan}": ("engine", name, plan, ENGINE_SEED + s) for s in range(seeds)
            for name in names for plan in (("catalogue", "none") if s % 2 == 0 else ("none", "catalogue"))}


def engine_run(name: str, plan: str, seed: int) -> dict:
    """One engine-level check of the served mutant with the local target as ground truth (a), its default plan
    otherwise (2,000 continuations per prompt × setting; stops at the first decided cell)."""
    import torch

    from harness.mutants.registry import get
    from harness.pairs import get_pair
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig
    from harness.served.serve import serving

    torch.set_num_threads(1)
    impl = get(name)
    pair = impl.pair or "toy-low"
    started = time.perf_counter()
    with serving(impl.fn, get_pair(pair)) as served:
        report = run_engine_check(EngineConfig(endpoint=served.url + "/v1", pair=pair, contexts=plan, seed=seed))
    first = next((t for t in report.tests if t.reject), None)
    return {"name": name, "pair": pair, "plan": plan, "seed": seed, "verdict": report.verdict,
            "fail": report.verdict == "fail", "samples": report.samples, "first_reject": first and first.name,
            "cells_run": len(report.cases), "seconds": round(time.perf_counter() - started, 2)}


def engine_rows(rows: list[dict]) -> list[list[str]]:
    """engine.md's table: per served mutant and plan, FAIL / runs, the first rejecting test, the median seconds."""
    out = []
    for name in dict.fromkeys(r["name"] for r in rows):
        for plan in ("none", "catalogue"):
            got = [r for r in rows if r["name"] == name and r["plan"] == plan]
            if got:
                secs = sorted(r["seconds"] for r in got)
                out.append([f"`{name}`", got[0]["pair"], plan, rate(sum(r["fail"] for r in got), len(got), ci=False),
                            next((r["first_reject"] for r in got if r["first_reject"]), "-"),
                            f"{secs[len(secs) // 2]:.0f}"])
    return out


def engine_markdown(rows: list[dict], lead: tuple[str, ...] = ()) -> str:
    return "\n".join([
        "# The engine level with a local target: contexts catalogue vs none on served mutants", "", *lead,
        "Each mutant is served by `specdec serve`'s app on 127.0.0.1 and checked by "
        "`run_engine_check` (ground truth: the local target); `catalogue` adds the contexts cells after the "
        "cells of the plan without contexts (same rows, same order), so a run that stops at its first decided "
        "cell decides what `none` decides, at the same cell; the catalogue is built only when a contexts cell reads it. "
        "Seconds are wall-clock on a shared 2-core machine; the plans alternate between seeds (catalogue first at "
        "even seeds), so with one seed the catalogue run also pays the first server start.", "",
        table(["mutant", "pair", "plan", "FAIL / runs", "first rejecting test", "median s"], engine_rows(rows)), ""])


def timing(names: list[str], seed: int = TIMING_SEED, rounds: int = TIMING_ROUNDS) -> list[dict]:
    return [run_cell(*args) for args in timing_cells(names, seed, rounds).values()]


def validate(config: Config) -> None:
    from harness.errors import HarnessError
    from harness.mutants.registry import get

    if config.sims < 1:
        raise HarnessError("--sims must be ≥ 1")
    if config.timing and config.engine:
        raise HarnessError("--timing and --engine are two runs: give one")
    if config.engine_seeds < 1:
        raise HarnessError("--engine-seeds must be ≥ 1")
    for name in (*(config.timing or ()), *(config.engine or ())):
        if get(name).contract != "generation":  # an unknown mutant: "Did you mean ...?" (exit 2)
            raise HarnessError(f"{name} is an entry of the {get(name).contract} contract; --timing and --engine "
                               "take generation mutants")


def journaled(config: Config) -> bool:
    return not config.timing  # a timing compares runs of one process: never resumed (engine runs are: minutes each)


def provenance_fields(config: Config) -> dict:
    if config.engine:
        return {"seed": ENGINE_SEED}
    return {"seed": TIMING_SEED} if config.timing else {"seed": config.seed, "dtype": "float64"}


def cells(config: Config) -> dict[str, tuple]:
    if config.engine:
        return engine_cells(config.engine, config.engine_seeds)
    if config.timing:
        return timing_cells(config.timing)
    return {f"power/sims{config.sims}/seed{config.seed}": ("power", config.sims, config.seed)}


def run_cell(kind: str, *args) -> dict:
    if kind == "timing":
        return timing_run(*args)
    if kind == "engine":
        return engine_run(*args)
    sims, seed = args
    return run(sims, seed, progress=lambda line: print(line, flush=True))


def report(run_) -> int:
    if run_.config.engine:
        rows = run_.records
        run_.write_result("engine.json", "campaign.headline.engine", rows=rows,
                          summary={"runs": len(rows), "fail": sum(r["fail"] for r in rows)})
        text = engine_markdown(rows, (header(run_), "", rerun(run_), ""))
        run_.write_text("engine.md", text)
        print(text)
        return 0
    if run_.config.timing:
        rows = run_.records
        run_.write_result("timing.json", "campaign.headline.timing", rows=rows, summary={"runs": len(rows)})
        for row in rows:
            print(row)
        return 0
    if not run_.complete:  # stopped before the simulation (--budget-s, --stop-at, --report-only on no journal)
        print("headline: the simulation did not run; nothing written")
        return 0
    result = run_.records[0]
    run_.write_result("power.json", "campaign.headline", rows=result["rows"],
                      summary={k: v for k, v in result.items() if k != "rows"})
    run_.write_text("README.md", markdown(result, (header(run_), "", rerun(run_), "")))
    print(f"wrote {run_.out / 'README.md'}")
    return 0
