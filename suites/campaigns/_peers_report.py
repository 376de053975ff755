"""The report of `specdec campaign peers` (suites/campaigns/peers.py): results/peers/README.md and campaign.json.

Not a campaign itself (no cells): the peers campaign's report, kept apart so that module stays short.
"""

from __future__ import annotations

import math
import statistics

from harness.peers import peer_tests
from harness.reporting import header, rerun, table

SAMPLER_TESTS = [t.name for t in peer_tests("sampler")]
GREEDY_TESTS = [t.name for t in peer_tests("generation")]
SHORT = {"vllm_v1_histogram": "vLLM V1", "vllm_mrv2_chisq": "vLLM MRV2", "trtllm_kl": "TRT-LLM",
         "vllm_greedy_66": "vLLM greedy", "sglang_one_prompt": "SGLang", "transformers_assisted_greedy": "transformers",
         "llamacpp_with_without_draft": "llama.cpp"}
CAUGHT = 0.95  # "catches": detected in at least this share of its seeds (the zoo's gate)


def _rate(records: list[dict], key: str = "passed", fail_when=False) -> tuple[int, int]:
    k = sum(1 for r in records if bool(r[key]) == fail_when) if key == "passed" else sum(bool(r[key]) for r in records)
    return k, len(records)


def _cell(k_n: tuple[int, int] | None) -> str:
    if not k_n or not k_n[1]:
        return "–"
    k, n = k_n
    return f"{k}/{n}"


def _med(values):
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return statistics.median(values) if values else None


def collect(run, campaign) -> dict:
    """`campaign`: the peers campaign module (its entries, exact TVs and resolution rule), passed in by it: this
    helper imports no campaign (the import layers allow no cycle)."""
    below_resolution, entries, exact_tv_rows = campaign.below_resolution, campaign.entries, campaign.exact_tv_rows

    peer: dict[tuple, list] = {}
    spec: dict[str, list] = {}
    checks = [r for r in run.records if r["kind"] == "oracle_check"]
    for record in run.records:
        if record["kind"] == "oracle_check":
            continue
        if record["kind"] == "peer":
            test, name, _seed, mode = record["args"]
            peer.setdefault((test, name, mode), []).append(record)
        else:
            spec.setdefault(record["args"][0], []).append(record)
    rows = []
    for impl in entries(run.config):
        name = impl.name
        row = {"name": name, "contract": impl.contract, "kind": impl.kind, "models": impl.models}
        tests = SAMPLER_TESTS if impl.contract == "sampler" else GREEDY_TESTS
        for test in tests:
            for mode in ("own", "equal"):
                recs = peer.get((test, name, mode), [])
                if recs:
                    row[f"{test}/{mode}"] = (sum(not r["passed"] for r in recs), len(recs))
        recs = spec.get(name, [])
        if recs:
            row["specdec"] = (sum(r["fail"] for r in recs), len(recs))
            row["specdec_median_samples"] = _med([r["samples"] for r in recs])
            if impl.contract == "sampler":
                row["fixed_plan"] = _med([r["fixed_plan"] for r in recs])
                for key, col in (("rows", "oracle"), ("law_rows", "law_oracle")):
                    pairs = [(r["samples"], r["oracle"][key]) for r in recs if r.get("oracle") and r["oracle"][key]]
                    if pairs:
                        row[f"{col}_median_rows"] = _med([o for _, o in pairs])
                        row[f"{col}_ratio"] = _med([s / o for s, o in pairs if o and math.isfinite(o)])
                    row["oracle_skipped"] = sorted({c for r in recs if r.get("oracle") for c in
                                                    r["oracle"]["skipped_cases"]})
        if impl.contract == "sampler":
            row["exact_tv"] = exact_tv_rows().get(name)
            row["below_resolution"] = impl.kind == "mutant" and below_resolution(name)
        else:
            row["below_resolution"] = False
        rows.append(row)
    return {"rows": rows, "oracle_checks": checks}


def _caught(row: dict, key: str) -> bool:
    k_n = row.get(key)
    return bool(k_n and k_n[1] and k_n[0] / k_n[1] >= CAUGHT)


def summary_lines(rows: list[dict]) -> list[str]:
    lines = []
    for level, tests in (("sampler", SAMPLER_TESTS), ("generation", GREEDY_TESTS)):
        mine = [r for r in rows if r["contract"] == level and r["kind"] == "mutant" and not r["below_resolution"]]
        if not mine:
            continue
        def count(key: str, mine=mine) -> str:
            ran = [r for r in mine if r.get(key)]
            caught = sum(_caught(r, key) for r in ran)
            return f"{caught}" if len(ran) == len(mine) else f"{caught} (of the {len(ran)} it ran on)"

        parts = [f"{SHORT[t]}'s test catches {count(f'{t}/own')}" for t in tests]
        if level == "sampler":
            parts += [f"{SHORT[t]} at specdec's n {count(f'{t}/equal')}" for t in tests
                      if any(f"{t}/equal" in r for r in mine)]
        parts.append(f"specdec {count('specdec')}")
        lines.append(f"{level} level: of {len(mine)} mutants above resolution, " + ", ".join(parts)
                     + f" (caught: detected in ≥ {CAUGHT:.0%} of the seeds run)")
    return lines


def minimax_rows(seed: int = 0) -> list[dict]:
    """Per default case: V, planned TV, the rows at its least-reached tested position, and √V/ε²."""
    from harness.check.config import DEFAULT_MAX_ROWS
    from harness.check.sampler import MAX_CELLS, default_cases, plan_cases, plan_rows
    from harness.defaults import DEFAULT_FALSE_ALARM_RATE, DEFAULT_POWER
    from harness.peers.oracle import minimax_identity_rows

    plans = plan_cases(default_cases(), seed)
    plan_rows(plans, tv=0.02, false_alarm_rate=DEFAULT_FALSE_ALARM_RATE, power=DEFAULT_POWER, max_rows=DEFAULT_MAX_ROWS)
    out = []
    for plan in plans:
        tv = plan.case.tv or 0.02
        reach = min(plan.reach[j] for j in plan.tested)
        at_position = plan.rows * reach
        V = plan.case.vocab
        support = max(int((plan.p[j] > 0).sum()) for j in plan.tested)
        out.append({"case": plan.case.name, "V": V, "support": support, "tv": tv, "rows": plan.rows,
                    "rows_at_least_reached": at_position, "minimax": minimax_identity_rows(support, tv),
                    "minimax_cells": minimax_identity_rows(min(support, MAX_CELLS), tv)})
    return out


def sampler_rows(rows: list[dict]) -> list[list[str]]:
    """The sampler-level table: per entry its exact TV, each peer test's k/n at its own n and at specdec's, specdec's
    k/n and samples, the fixed plan, the oracles' rows and specdec's ratio to them."""
    out = []
    for r in [r for r in rows if r["contract"] == "sampler"]:
        tv = r.get("exact_tv")
        out.append([f"`{r['name']}`", r["kind"],
                    "–" if tv is None else f"{tv:.3f}" + (" (below)" if r["below_resolution"] else ""),
                    *(_cell(r.get(f"{t}/{w}")) for t in SAMPLER_TESTS for w in ("own", "equal")),
                    _cell(r.get("specdec")), _num(r.get("specdec_median_samples")), _num(r.get("fixed_plan")),
                    _num(r.get("oracle_median_rows")), _ratio(r.get("oracle_ratio")),
                    _num(r.get("law_oracle_median_rows")), _ratio(r.get("law_oracle_ratio"))])
    return out


def greedy_rows(rows: list[dict]) -> list[list[str]]:
    """The generation-level table: per entry the pair it ran on, each greedy test's k/n, specdec's k/n and samples."""
    from harness.mutants.registry import get

    return [[f"`{r['name']}`", r["kind"], get(r["name"]).pair or "toy-low",  # the pair it ran on (peers._pair_of)
             *(_cell(r.get(f"{t}/own")) for t in GREEDY_TESTS), _cell(r.get("specdec")),
             _num(r.get("specdec_median_samples"))] for r in rows if r["contract"] == "generation"]


def write_readme(run, campaign) -> dict:
    result = collect(run, campaign)
    rows = result["rows"]
    lines_summary = summary_lines(rows)
    cfg = run.config
    failures = [r["name"] for r in rows if r["kind"] != "mutant" and r.get("specdec") and r["specdec"][0]]
    md = ["# Peers' tests beside specdec, and beside the Neyman–Pearson limit", "",
          header(run, "a shared 2-core machine, other agents' jobs running beside it"), "", rerun(run), "",
          *([f"**Partial run: {len(run.cells) - len(run.done)} of {len(run.cells)} planned cells were not made "
             "(cut at --stop-at on a shared machine). Cells run in rounds of 5 seeds across every entry and test, so "
             "each table cell shows k/n with n the seeds actually run; the same command resumes the rest.**", ""]
            if len(run.done) < len(run.cells) else []),
          "Planned seeds: cheap peer tests and specdec's sampler check " f"{cfg.seeds}; vLLM MRV2 {cfg.mrv2_seeds}; "
          f"equal n {cfg.equal_n_seeds} ({cfg.equal_n_tests}{'' if cfg.mrv2_equal_n else '; MRV2 at equal n not run'}); "
          "one-prompt greedy tests "
          f"{cfg.greedy_seeds}; vLLM 100-prompt greedy {cfg.vllm_greedy_seeds}; controls {cfg.control_seeds}; specdec "
          f"generation level {cfg.generation_seeds}; specdec on mutants below resolution {cfg.below_resolution_seeds}"
          + (f"; skipped: {cfg.skip}" if cfg.skip else "") + ". The full campaign is "
          "`specdec campaign peers --out results/peers` (20 seeds everywhere).", "",
          "**Summary.**", "", *[f"- {line}" for line in lines_summary], "",
          "Each cell is detections / seeds for a mutant (false alarms / seeds for a control, equivalent or wasteful "
          "entry: all must pass). 'own': the test at its published sample size; 'eq n': the same test drawing "
          "specdec's default-plan rows (harness.peers.sampler). specdec: the sequential sampler check at the default "
          "plan (TV 0.02) on mutants; on correct entries the calibration battery (TV 0.1), whose false-alarm rate "
          "does not depend on n. Oracle: the Neyman–Pearson test against the mutant's exact law, rows split over the "
          "cases as specdec's plan splits them, α = 0.001, power 0.99 (harness.peers.oracle); ratio = specdec's "
          "samples to verdict / the oracle's, median over seeds.", ""]
    md += ["## Sampler level (§1a, chain rule)", "",
           table(["entry", "kind", "exact TV", *(f"{SHORT[t]} {w}" for t in SAMPLER_TESTS for w in ("own", "eq n")),
                  "specdec", "median samples", "fixed plan", "oracle rows", "ratio", "law-oracle rows", "ratio"],
                 sampler_rows(rows))]
    ratios = [r["oracle_ratio"] for r in rows if r.get("oracle_ratio") and not r["below_resolution"]]
    law_ratios = [r["law_oracle_ratio"] for r in rows if r.get("law_oracle_ratio") and not r["below_resolution"]]
    for label, rs in (("Oracle (exact row law, null = Algorithm 1)", ratios),
                      ("Law oracle (emitted tokens only)", law_ratios)):
        md += ["", f"{label} ratio, median over the {len(rs)} mutants above resolution: **{_ratio(_med(rs))}** "
               f"(range {_ratio(min(rs) if rs else None)} – {_ratio(max(rs) if rs else None)})."]
    for c in result["oracle_checks"]:
        md.append(f"Normal approximation checked by simulation (`{c['entry']}` on case {c['case']}, seed 0): the "
                  f"oracle's n = {c['oracle_rows']:.0f} rows for power {c['power_target']:g}; the NP test on "
                  f"{c['replicates']:,} Monte-Carlo replicates of n rows resampled from {c['rows']:,} rows drawn from "
                  f"the mutant and from the reference (their exact LLRs) reaches power **{c['simulated_power']:.3f}**. "
                  f"Exact vs empirical row LLR under the null: mean {c['null_mean_exact']:.5f} vs {c['null_mean']:.5f}, "
                  f"variance {c['null_var_exact']:.5f} vs {c['null_var']:.5f}; share of the mutant's rows the null "
                  f"can emit {c['alt_rho_exact']:.4f} (exact) vs {c['alt_finite_share']:.4f}.")
    md.append("")
    md += ["## Generation level (§1b): the greedy end-to-end tests", "",
           table(["entry", "kind", "pair", *(SHORT[t] for t in GREEDY_TESTS), "specdec", "median samples"],
                 greedy_rows(rows))]
    md += ["", "## False alarms on the correct entries", "",
           "specdec on every control, equivalent and wasteful entry beside the peers' rates (counts above): "
           + ("**0 false alarms**" if not failures else f"**false alarms on {', '.join(failures)}**")
           + f" over {sum(r['specdec'][1] for r in rows if r['kind'] != 'mutant' and r.get('specdec'))} runs.", ""]
    mm = minimax_rows()
    md += ["## The minimax identity-testing rate", "",
           "Testing one law over k tokens against every law at TV ≥ ε needs of order √k/ε² samples (Paninski 2008; "
           "Valiant & Valiant 2014; with a failure probability δ, (√(k log 1/δ) + log 1/δ)/ε², Diakonikolas et al. "
           "2017). specdec's plan per default case (seed 0) at its least-reached tested position, against √k/ε² for k = "
           "the law's support and for k = 32 (the cells its omnibus tests coarsen to):", "",
           table(["case", "V", "support", "ε", "rows", "rows at least-reached position", "√k/ε²", "ratio", "√32/ε²",
                  "ratio"], [[m["case"], str(m["V"]), str(m["support"]), f"{m['tv']:g}", str(m["rows"]),
                              f"{m['rows_at_least_reached']:.0f}", f"{m['minimax']:.0f}",
                              f"{m['rows_at_least_reached'] / m['minimax']:.1f}", f"{m['minimax_cells']:.0f}",
                              f"{m['rows_at_least_reached'] / m['minimax_cells']:.1f}"] for m in mm])]
    md += ["", "Reproduce: the command above (the journal resumes; `--report-only` rewrites this file).", ""]
    run.write_text("README.md", "\n".join(md))
    run.write_result("campaign.json", "campaign.peers", rows=[_jsonable(r) for r in rows],
                     summary={"lines": lines_summary, "minimax": mm, "oracle_ratio_median": _med(ratios),
                              "law_oracle_ratio_median": _med(law_ratios),
                              "specdec_control_failures": failures, "cells": len(run.cells), "made": len(run.done)})
    return {"summary_lines": lines_summary, "specdec_control_failures": failures}


def _jsonable(row: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in row.items()}


def _num(x) -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.0f}"


def _ratio(x) -> str:
    return "–" if x is None else f"{x:.2f}"


__all__ = ["collect", "minimax_rows", "summary_lines", "write_readme"]
