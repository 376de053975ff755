"""Deep-tail probes (issue 46): RNG-resolution bugs that a TV plan cannot see, and what catching them costs.

    specdec campaign tail --reference-seeds 200 --mutant-seeds 3 --out results/tail

Cells (each one `run_sampler_check` of a registered implementation, 1 torch thread, journaled by the campaign
runner in OUT/journal.jsonl, so an interrupted run resumes where it stopped):

- the three planted RNG-resolution mutants (`fp32_exponential_race`, `floored_uniform_race`,
  `fp32_cumsum_inverse_cdf`) and the float64 race control on the opt-in case `tail-v131072` at its plan;
- the same three mutants on the default plan alone (no deep tail anywhere: they must pass, which is why the
  probe exists);
- the reference (`reference_verify`, float64 arithmetic on float32 inputs) on `tail-v131072`, seeds 0..N-1:
  the measured false-alarm rate of the deep-tail test;
- timing: the reference on the default plan and on the default plan + `tail-v131072`, seed 0.

The report also gives the exact power of the deep-tail test at the planned rows (exact binomial tails: no
simulation) and the exact false-alarm rate of a test on an implementation whose tail mass is p's.
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np

from harness.configs import option
from harness.reporting import header, rerun, table

CASE = "tail-v131072"
MUTANTS = ("fp32_exponential_race", "floored_uniform_race", "fp32_cumsum_inverse_cdf")
CONTROLS = ("fp64_exponential_race",)
REFERENCE = "reference_verify"
DEFICITS = (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 1.0)  # relative deficits of the deep-tail mass (exact power)


@dataclasses.dataclass
class Config:
    reference_seeds: int = option(200, "--reference-seeds", "the reference's seeds on the tail case (its false-alarm "
                                  "rate)", int, "N")
    reference_from: int = option(0, "--reference-from", "run the reference's seeds from this one (a second process "
                                 "can take the upper half; the journal joins them)", int, "S")
    mutant_seeds: int = option(3, "--mutant-seeds", "seeds per mutant and control on the tail case", int, "N")
    timing: bool = option(False, "--timing", "also time the reference on the default plan with and without the tail "
                          "case (seed 0)", action="store_true")
    only: list[str] | None = option(None, "--only", "run only these implementations' cells (the report still covers "
                                    "every cell of the journal)", metavar="NAME", nargs="+")


def run_cell(name: str, plan: str, seed: int) -> dict:
    """One check; plan "tail" (the opt-in case alone), "default", or "default+tail"."""
    import torch

    from harness.check.sampler import run_sampler_check
    from harness.mutants.registry import get

    torch.set_num_threads(1)
    cases = {"tail": [CASE], "default": None, "default+tail": ["default", CASE]}[plan]
    started = time.perf_counter()
    report = run_sampler_check(get(name).fn, impl_name=name, cases=cases, seed=seed)
    seconds = time.perf_counter() - started
    tail = [{"name": t.name, "hits": int(t.statistic), "n": t.n, "expected": t.details["expected"],
             "p_value": t.p_value, "reject": bool(t.reject)} for t in report.tests if t.name.endswith("/deep_tail")]
    rejected = sorted({t.name.rsplit("/", 1)[-1] for t in report.tests if t.reject})
    tail_rows = next((c.get("samples") for c in report.cases if c["name"] == CASE), None)
    return {"name": name, "plan": plan, "seed": seed, "verdict": report.verdict, "seconds": seconds,
            "samples": report.samples, "tail_rows": tail_rows, "deep_tail": tail, "rejected_kinds": rejected,
            "min_p": min((t.p_value for t in report.tests), default=1.0)}


def tail_cells(reference_seeds: int, mutant_seeds: int, timing: bool, reference_from: int = 0) -> dict[str, tuple]:
    """In the order they run: each mutant and control once on the tail case, the mutants on the default plan,
    the reference's seeds, the timing, then the mutants' further seeds."""
    out = {}
    for seed in range(min(1, mutant_seeds)):
        for name in (*MUTANTS, *CONTROLS):
            out[f"{name}/tail/{seed}"] = (name, "tail", seed)
    for name in MUTANTS:
        out[f"{name}/default/0"] = (name, "default", 0)
    for seed in range(reference_from, reference_seeds):
        out[f"{REFERENCE}/tail/{seed}"] = (REFERENCE, "tail", 1000 + seed)
    if timing:
        out[f"{REFERENCE}/default/0"] = (REFERENCE, "default", 0)
        out[f"{REFERENCE}/default+tail/0"] = (REFERENCE, "default+tail", 0)
    for seed in range(1, mutant_seeds):
        for name in (*MUTANTS, *CONTROLS):
            out[f"{name}/tail/{seed}"] = (name, "tail", seed)
    return out


def exact_power(rows: int, rate: float) -> list[dict]:
    """Exact power of the two-sided deep-tail test at each position of the case's seed-0 plan, against a relative
    deficit δ of the tail mass, at `rows` rows (position 1 reached by its expected share of rows)."""
    from scipy.stats import binom, binomtest

    from harness.check.sampler import deep_tail, plan_cases, select_cases, tail_positions

    plan = plan_cases(select_cases([CASE]), 0)[0]
    out = []
    for j in tail_positions(plan):
        mass = float(plan.p[j][deep_tail(plan.p[j])].sum())
        n = int(round(rows * plan.reach[j]))
        ks = np.arange(0, int(n * mass * 3) + 50)
        rejects = np.array([binomtest(int(k), n, mass).pvalue <= rate for k in ks])
        row = {"position": j, "reached_rows": n, "tail_mass": mass, "expected_hits": n * mass,
               "false_alarm": float(binom.pmf(ks, n, mass)[rejects].sum())}
        for d in DEFICITS:
            row[f"power_deficit_{d:g}"] = float(binom.pmf(ks, n, mass * (1 - d))[rejects].sum())
        out.append(row)
    return out


def retention() -> dict:
    """The fraction of the deep-tail mass each planted bug keeps at the tail case's two final draws (seed-0 laws):
    exact for the float32 running sum (the float32 arithmetic replayed on the law the mutant receives); for the two
    races the closed form of a race against the head (tail tokens competing with each other neglected: the tail
    holds ≤ 0.25 % of the mass): a tail token y of ratio r_y = p_y / p_head wins when E_y ≤ r_y·E_head; with
    c_y = 2^-24 / r_y, P = r_y·(1 + c_y)·e^(−c_y) when E is floored at 2^-24 and continuous above (u clamped),
    r_y·c_y·e^(−c_y) / (1 − e^(−c_y)) when E sits on the 2^-24 grid near 0 (24-bit uniforms)."""
    import torch

    from harness.check.sampler import deep_tail, plan_cases, select_cases
    from harness.mutants.sampler import fp32_cumsum

    plan = plan_cases(select_cases([CASE]), 0)[0]
    p = torch.from_numpy(plan.p).float().double()
    q = torch.from_numpy(plan.q).float().double()
    laws = {"residual (position 0)": (p[0] / p[0].sum() - q[0] / q[0].sum()).clamp_min(0),
            "bonus (position 1)": p[1] / p[1].sum()}
    out = {}
    for where, law in laws.items():
        law = (law / law.sum()).float()
        mask = torch.from_numpy(deep_tail(law.double().numpy()))
        mass = float(law.double()[mask].sum())
        cdf = torch.from_numpy(np.cumsum(law.numpy()))
        width = torch.diff(cdf, prepend=torch.zeros(1)).double() / float(cdf[-1])
        r = (law.double() / law.double().max())[mask]
        c = 2.0 ** -24 / r
        w = law.double()[mask] / mass
        out[where] = {"tail_mass": mass, "fp32_cumsum_inverse_cdf": float(width[mask].sum()) / mass,
                      "floored_uniform_race": float((w * (1 + c) * torch.exp(-c)).sum()),
                      "fp32_exponential_race": float((w * c * torch.exp(-c) / (1 - torch.exp(-c))).sum())}
    del fp32_cumsum  # the mutant's own float32 running sum is np.cumsum on float32, replayed above
    return out


def run_rows(records: list[dict]) -> list[list[str]]:
    """report.md's first table: every run (the reference's last), its verdict, rows, deep-tail hits per position."""
    return [[f"`{r['name']}`", r["plan"], str(r["seed"]), r["verdict"].upper(), f"{r['samples']:,}",
             "; ".join(f"{t['hits']}/{t['expected']:.1f} (p {t['p_value']:.1e})" for t in r["deep_tail"]) or "-",
             ", ".join(r["rejected_kinds"]) or "-", f"{r['seconds']:.1f}"]
            for r in sorted(records, key=lambda r: (r["name"] == REFERENCE, r["name"], r["plan"], r["seed"]))]


def power_rows(exact: list[dict]) -> list[list[str]]:
    """The deep-tail test's exact power at the plan, per position and deficit."""
    return [[str(p["position"]), f"{p['reached_rows']:,}", f"{p['tail_mass']:.3g}", f"{p['expected_hits']:.1f}",
             f"{p['false_alarm']:.1e}", *(f"{p[f'power_deficit_{d:g}']:.3f}" for d in DEFICITS)] for p in exact]


def write_report(run, done: dict) -> None:
    records = list(done.values())
    ref = [r for r in records if r["name"] == REFERENCE and r["plan"] == "tail"]
    rows = next((r["tail_rows"] for r in ref + records if r["plan"] == "tail" and r["tail_rows"]), None)
    summary = {"reference_runs": len(ref), "reference_false_alarms": sum(r["verdict"] == "fail" for r in ref),
               "reference_deep_tail_rejections": sum(any(t["reject"] for t in r["deep_tail"]) for r in ref)}
    rate = None
    if rows:
        from harness.check.config import DEFAULT_FALSE_ALARM_RATE
        from harness.check.driver import CheckConfig
        from harness.check.sampler import SamplerSource

        cells_ = SamplerSource(None).cells(CheckConfig(impl="x", cases=[CASE]))
        m = sum(c.declared_tests() + 1 for c in cells_)
        rate = DEFAULT_FALSE_ALARM_RATE / m
        summary["exact_power"] = exact_power(rows, rate)
        summary["plan_rate"] = rate
    summary["retention"] = retention()
    run.write_result("campaign.json", "campaign.tail", rows=records, summary=summary)
    lines = ["# Deep-tail probes: RNG-resolution bugs (issue 46)", "", header(run), "", rerun(run), "",
             table(["implementation", "plan", "seed", "verdict", "rows", "deep-tail hits / expected (per position)",
                    "rejected kinds", "seconds"], run_rows(records)),
             "", f"Reference on `{CASE}`: {summary['reference_false_alarms']} of {summary['reference_runs']} runs "
             f"FAIL; deep-tail test rejects in {summary['reference_deep_tail_rejections']} of them."]
    if rate:
        lines += ["", f"Exact power of the deep-tail test at the plan ({rows:,} rows, per-test rate {rate:.2g}):", "",
                  table(["position", "reached rows", "tail mass", "expected hits", "exact false-alarm",
                         *(f"deficit {d}" if i == 0 else f"{d}" for i, d in enumerate(DEFICITS))],
                        power_rows(summary["exact_power"]))]
    lines += ["", "Fraction of the deep-tail mass each planted bug keeps (1 − its deficit), per final draw (`retention()`):",
              "", table(["draw", "tail mass", *(f"`{m}`" for m in MUTANTS)],
                        [[where, f"{r['tail_mass']:.3g}", *(f"{r[m]:.3f}" for m in MUTANTS)]
                         for where, r in summary["retention"].items()])]
    run.write_text("report.md", "\n".join(lines) + "\n")


def cells(config: Config) -> dict[str, tuple]:
    """The cells this process runs: the reference's seeds from --reference-from, only the --only entries'."""
    todo = tail_cells(config.reference_seeds, config.mutant_seeds, config.timing, config.reference_from)
    return {k: v for k, v in todo.items() if not config.only or v[0] in config.only}


def validate(config: Config) -> None:
    from harness.errors import HarnessError
    from harness.mutants.registry import get

    if min(config.reference_seeds, config.reference_from, config.mutant_seeds) < 0:
        raise HarnessError("--reference-seeds, --reference-from and --mutant-seeds must be >= 0")
    for name in config.only or ():
        get(name)  # an unknown name: "Did you mean ...?" (exit 2)


def provenance_fields(config: Config) -> dict:
    return {"seed": 0}


def report(run) -> int:
    """report.md and campaign.json over every cell of the journal (whichever process ran it); exit 1 unless every
    mutant fails the tail case and everything else (controls, reference, mutants on the default plan) passes."""
    every = tail_cells(run.config.reference_seeds, run.config.mutant_seeds, run.config.timing)
    done = {k: run.journal[k] for k in every if k in run.journal}
    write_report(run, done)
    print(json.dumps({k: v["verdict"] for k, v in done.items()}))
    mutants_caught = all(v["verdict"] == "fail" for v in done.values() if v["name"] in MUTANTS and v["plan"] == "tail")
    must_pass = all(v["verdict"] != "fail" for v in done.values()
                    if v["name"] not in MUTANTS or v["plan"] == "default")
    return 0 if mutants_caught and must_pass else 1
