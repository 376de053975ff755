"""Coverage of the TV estimate's interval (issue 46), measured by simulation on laws whose exact TV is known.

    specdec campaign estimate --seeds 200 --n 2000 20000 --out results/estimate

For every sampler-level zoo entry with an exact per-position law (`harness.mutants.laws`: the mutants, the
lossy-by-design `lenient_acceptance`, `threshold_acceptance`, `relaxed_acceptance` and `typical_acceptance`, and the
reference, whose law is p: TV 0) on the catalogue cases anti-logits, zipf1000-high-alpha and gamma8-v100 (seed-0
laws; `--cases` adds others), at the first and the last position the optimal rule reaches with probability ≥ 0.1:
draw n tokens from the exact emitted law at that position (counts ~ Multinomial(n, law); ids outside [0, V) as their
own cell), run `harness.stats.estimate.tv_estimate` exactly as `specdec verify --estimate` does (B = 400, 95 %),
and record whether the interval holds the exact TV on the same partition, its width, and the estimate's error.
This is the estimator alone on the exact law (what the harness receives from an implementation whose law it is);
`specdec verify --estimate` runs end to end are in the README. Every (law, n) row is a cell of the campaign runner
(harness.runner), journaled in OUT/journal.jsonl: a rerun resumes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from harness.configs import option
from harness.reporting import header, rerun, table

CASES = ("anti-logits", "zipf1000-high-alpha", "gamma8-v100")
ENTRIES = ("reference_verify", "residual_from_p", "residual_from_q", "inverted_ratio", "residual_temperature",
           "reused_uniform_residual", "greedy_draft_softmax_q", "out_of_range_recovered", "q_bf16_one_side",
           "ratio_q_unprocessed", "lenient_acceptance", "threshold_acceptance", "relaxed_acceptance",
           "typical_acceptance")


def known_laws(cases: tuple[str, ...] = CASES, entries: tuple[str, ...] = ENTRIES) -> list[dict]:
    """(case, entry, position, p_j, law_j) for every entry × case × {first, last} tested position; laws with the
    same exact TV on the same case and position are kept once (many entries leave a position unchanged)."""
    import torch

    from harness.check.sampler import plan_cases, select_cases
    from harness.mutants.joint import GENERATION_ENTRIES, known_joint_laws
    from harness.mutants.registry import get

    joint = tuple(e for e in entries if e in GENERATION_ENTRIES)  # generation level: whole continuations at a prompt
    entries = tuple(e for e in entries if e not in joint)
    out, seen = known_joint_laws(joint) if joint else [], set()
    for case in select_cases(list(cases)):
        plan = plan_cases([case], 0)[0]
        positions = sorted({plan.tested[0], plan.tested[-1]})
        for name in entries:
            impl = get(name)
            laws = impl.position_laws(torch.from_numpy(plan.p), torch.from_numpy(plan.q)).double().numpy()
            for j in positions:
                law, p = laws[j], plan.p[j]
                full = 0.5 * (float(np.abs(law - p).sum()) + abs(1 - float(law.sum())))
                key = (case.name, j, round(full, 12))
                if key in seen:
                    continue
                seen.add(key)
                out.append({"case": case.name, "entry": name, "position": j, "p": p, "law": law, "exact_tv_full": full})
    return out


def simulate(entry: dict, n: int, seeds: int) -> dict:
    from harness.stats.estimate import (
        exact_partition_kl,
        exact_partition_tv,
        kl_estimate,
        partition,
        tv_estimate,
    )

    p, law = entry["p"], entry["law"]
    exact = exact_partition_tv(law, p, partition(p, n))
    exact_kl = exact_partition_kl(law, p, partition(p, n))  # inf where the law leaves p's support: no KL rows
    kl = {"covered": 0, "widths": [], "errors": []}
    inside = np.clip(law, 0, None)
    probs = np.append(inside, max(0.0, 1.0 - inside.sum()))
    probs /= probs.sum()
    covered, widths, errors, ests = 0, [], [], []
    for s in range(seeds):
        rng = np.random.default_rng([s, n, len(p)])
        draw = rng.multinomial(n, probs)
        e = tv_estimate(draw[:-1], p, rng=rng, outside=int(draw[-1]))
        covered += e["low"] <= exact <= e["high"]
        widths.append(e["high"] - e["low"])
        errors.append(e["estimate"] - exact)
        ests.append(e["estimate"])
        if math.isfinite(exact_kl):
            k = kl_estimate(draw[:-1], p, rng=rng, outside=int(draw[-1]))
            if k["estimate"] is not None:
                kl["covered"] += k["low"] <= exact_kl <= k["high"]
                kl["widths"].append(k["high"] - k["low"])
                kl["errors"].append(k["estimate"] - exact_kl)
    width = float(np.mean(widths))
    kl_row = {} if not kl["widths"] else {
        "kl_exact": exact_kl, "kl_coverage": kl["covered"] / seeds, "kl_mean_width": float(np.mean(kl["widths"])),
        "kl_bias": float(np.mean(kl["errors"]))}
    return {"case": entry["case"], "entry": entry["entry"], "position": entry["position"], "n": n, "seeds": seeds,
            "exact_tv": exact, "exact_tv_full": entry["exact_tv_full"], "coverage": covered / seeds,
            "mean_width": width, "width_sqrt_n": width * math.sqrt(n), "mean_estimate": float(np.mean(ests)),
            "bias": float(np.mean(errors)), "rmse": float(np.sqrt(np.mean(np.square(errors)))), **kl_row}


@dataclasses.dataclass
class Config:
    """`specdec campaign estimate` (harness.runner: every (law, n) row a cell, journaled in OUT/journal.jsonl)."""

    seeds: int = option(200, "--seeds", "simulated runs per (law, n)", int, "N")
    n: list = option([2000, 20000], "--n", "draws per run (one row per value)", int, "N", nargs="+")
    cases: list = option(list(CASES), "--cases", "run only these catalogue cases", metavar="CASE", nargs="+")
    entries: list = option(list(ENTRIES), "--entries", "run only these zoo entries (generation level: "
                           "penalties_count_rejected_drafts[_mild], reference_generate: the joint law of a toy "
                           "prompt's continuation and each position's)", metavar="NAME", nargs="+")
    rows: str | None = option(None, "--rows", "also append each row to this jsonl as it is measured", metavar="FILE")
    report_from: list | None = option(None, "--report-from", "write the report from rows measured before (jsonl "
                                      "files of --rows), measure nothing", metavar="JSONL", nargs="+")


def provenance_fields(config: Config) -> dict:
    return {"seed": 0}


def cells(config: Config) -> dict[str, tuple]:
    """One cell per (known law, n), in the order of the laws; none with --report-from."""
    if config.report_from:
        return {}
    return {f"{e['case']}/{e['entry']}/{e['position']}/{n}/{config.seeds}": (e, n, config.seeds, config.rows)
            for e in known_laws(tuple(config.cases), tuple(config.entries)) for n in config.n}


def run_cell(entry: dict, n: int, seeds: int, rows_path: str | None) -> dict:
    row = simulate(entry, n, seeds)
    line = json.dumps(row)
    print(line, flush=True)
    if rows_path:
        with open(rows_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    return row


def coverage_rows(rows: list[dict]) -> list[list[str]]:
    """Per (law, n): the exact TV, the interval's coverage and mean width, width·√n, the estimate's mean, bias, RMSE."""
    return [[r["case"], f"`{r['entry']}`", str(r["position"]), f"{r['n']:,}",
             f"{r['exact_tv']:.4f} / {r['exact_tv_full']:.4f}", f"{r['coverage']:.3f}", f"{r['mean_width']:.4f}",
             f"{r['width_sqrt_n']:.2f}", f"{r['mean_estimate']:.4f}", f"{r['bias']:+.4f}", f"{r['rmse']:.4f}"]
            for r in rows]


def kl_rows(rows: list[dict]) -> list[list[str]]:
    """The same for KL(emitted ‖ p), where the emitted support lies inside p's."""
    return [[r["case"], f"`{r['entry']}`", str(r["position"]), f"{r['n']:,}", f"{r['kl_exact']:.4f}",
             f"{r['kl_coverage']:.3f}", f"{r['kl_mean_width']:.4f}", f"{r['kl_bias']:+.4f}"] for r in rows]


def profile_rows(profiles: list[dict]) -> list[list[str]]:
    """Per lossy-by-design entry, per position: estimate [95% interval] (exact TV)."""
    return [[f"`{prof['entry']}`", *(f"{r['estimate']:.3f} [{r['low']:.3f}, {r['high']:.3f}] ({r['exact_tv']:.3f})"
                                     for r in prof["positions"])] for prof in profiles]


def report(run) -> int:
    """coverage.json, positions.png and report.md; exit 1 unless every interval covers in >= 95 % of its runs."""
    args, out = run.config, run.out
    rows = []
    for path in args.report_from or ():
        rows += [json.loads(line) for line in Path(path).read_text().splitlines() if line.startswith("{")]
    rows += run.records
    if not rows:
        print("estimate: no row measured (out of time before the first cell); nothing written")
        return 1
    from harness.mutants.profile import PROFILE_ENTRIES, position_profile, profile_figure
    from harness.records import save_figure

    profiles = position_profile(PROFILE_ENTRIES)  # per-position estimate and band of the lossy-by-design entries
    save_figure(profile_figure(profiles), out / "positions.png")
    run.write_result("coverage.json", "campaign.estimate", rows=rows,
                     summary={"position_profiles": profiles, "seconds": run.seconds})
    lossy = [r for r in rows if r["exact_tv"] > 0]
    lines = ["# Coverage of the TV estimate's 95% interval on laws with a known exact TV (issue 46)", "",
             header(run), "",
             rerun(run) + " (suites/campaigns/estimate.py; rows measured by runs over the case subsets, "
             "`--cases ... --rows FILE`, are joined with `--report-from FILE ...`)", "",
             f"Coverage ≥ 95%: {sum(r['coverage'] >= 0.95 for r in rows)} of {len(rows)} (law, n) rows; lowest "
             f"{min(r['coverage'] for r in rows):.3f}. Lossy laws (exact TV > 0): {len(lossy)} rows, lowest coverage "
             f"{min((r['coverage'] for r in lossy), default=math.nan):.3f}.", "",
             table(["case", "entry", "position", "n", "exact TV (partition / full)", "coverage", "mean width",
                    "width·√n", "mean estimate", "bias", "RMSE"], coverage_rows(rows))]
    spread = max(r["width_sqrt_n"] for r in rows)
    lines += ["", f"Width·√n is at most {spread:.2f} over these laws: an interval of width w needs n ≈ "
              f"({spread:.2f} / w)² draws at a position (w = 0.02: {math.ceil((spread / 0.02) ** 2):,}; w = 0.01: "
              f"{math.ceil((spread / 0.01) ** 2):,})."]
    kl = [r for r in rows if "kl_coverage" in r]
    if kl:
        lines += ["", f"KL(emitted ‖ p) in nats, same laws where the emitted support lies inside p's ({len(kl)} "
                  f"rows): coverage ≥ 95% in {sum(r['kl_coverage'] >= 0.95 for r in kl)}; lowest "
                  f"{min(r['kl_coverage'] for r in kl):.3f}.", "",
                  table(["case", "entry", "position", "n", "exact KL (partition)", "coverage", "mean width", "bias"],
                        kl_rows(kl))]
    lines += ["", f"Per position, one run of {profiles[0]['rows']:,} rows on {profiles[0]['case']} (seed 0; the "
              "rows reaching position j follow the entry's own acceptance): estimate, 95% interval, exact TV "
              "(`harness.mutants.profile`; numbers under `position_profiles` in coverage.json).", "",
              "![per-position TV estimate and band](positions.png)", "",
              table(["entry", *(f"j = {r['position']}" for r in profiles[0]["positions"])], profile_rows(profiles))]
    run.write_text("report.md", "\n".join(lines) + "\n")
    return 0 if all(r["coverage"] >= 0.95 for r in rows) else 1
