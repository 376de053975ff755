"""Writing a run's results: rows.csv, rows.json, PNG figures and report.md (all atomic writes)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from harness.bench import plots
from harness.bench.summarize import COST_MODEL_BAND, LOAD_DRIFT_R, SPEEDUP_FLOOR, TOKEN_TOLERANCE, best_gammas
from harness.envelope import write_result
from harness.records import atomic_write_text, provenance, save_figure
from harness.reporting import markdown_table


def fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def run_provenance(rows: list[dict]) -> dict:
    """The run's provenance: this write's commit, machine, versions and time; the cells' seeds, devices and dtypes
    (each row keeps its own cell's provenance)."""
    meta = provenance(seed=None)
    seeds = sorted({r["seed"] for r in rows if isinstance(r.get("seed"), int)})
    meta["seed"] = seeds[0] if len(seeds) == 1 else (seeds or None)
    for key in ("device", "dtype"):
        values = sorted({str(r[key]) for r in rows if r.get(key)})
        if values:
            meta[key] = ", ".join(values)
    return meta


def write_rows(out_dir: Path, rows: list[dict], *, kind: str = "bench", config=None,
               summary: dict | None = None) -> dict[str, Path]:
    """rows.csv, and rows.json: a result envelope (docs/RESULTS-FORMAT.md) of `kind` holding the rows."""
    import pandas as pd

    flat = [{k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()} for row in rows]
    csv = pd.DataFrame(flat).to_csv(index=False)
    return {"rows.csv": atomic_write_text(out_dir / "rows.csv", csv),
            "rows.json": write_result(out_dir / "rows.json", kind, config=config, provenance=run_provenance(rows),
                                      rows=rows, summary=summary)}


def write_figures(out_dir: Path, rows: list[dict]) -> dict[str, Path]:
    import matplotlib.pyplot as plt

    written = {}
    for name, make in plots.FIGURES.items():
        fig = make(rows)
        if fig is not None:
            written[name] = save_figure(fig, out_dir / name)
            plt.close(fig)
        else:
            (out_dir / name).unlink(missing_ok=True)  # an earlier run's figure would be read as this run's
    return written


def _matrix(rows: list[dict], kind: str, key: str) -> str | None:
    """γ down, series across: `key` of each cell (e.g. measured/predicted)."""
    cells = [r for r in rows if r["kind"] == kind and key in r]
    if not cells:
        return None
    series = list(dict.fromkeys(r["group"] for r in cells))
    pairs = [r["pair"] for r in {r["group"]: r for r in cells}.values()]
    names = {r["group"]: r["pair"] if pairs.count(r["pair"]) == 1 else f"{r['pair']} ({r['sampling']})" for r in cells}
    gammas = sorted({r["gamma"] for r in cells})
    lookup = {(r["group"], r["gamma"]): r[key] for r in cells}
    body = [[str(g)] + [fmt(lookup.get((s, g)), 3) for s in series] for g in gammas]
    return markdown_table(["γ"] + [names[s] for s in series], body)


def _tokens_section(rows: list[dict]) -> list[str]:
    cells = [r for r in rows if r["kind"] == "tokens"]
    if not cells:
        return []
    ok = sum(r["within_tolerance"] for r in cells)
    worst = max(cells, key=lambda r: abs(r["tokens_ratio"] - 1))
    body = [[r["pair"], r["sampling"], str(r["gamma"]), f"{r['full_row_steps']:,}", r["acceptance_rate"], r["tokens_per_call"],
             r["predicted_tokens_per_call"], r["tokens_ratio"], f"{r['tokens_z']:+.2f}",
             "yes" if r["within_tolerance"] else "**no**"] for r in cells]
    return [
        "## Token formula: tokens per target call vs (1 − α^{γ+1}) / (1 − α)",
        "",
        f"Counts only (no timing), batched rows, full-γ row-steps only. **{ok}/{len(cells)} cells within "
        f"±{TOKEN_TOLERANCE:.0%}**; worst: {worst['pair']} γ={worst['gamma']} at {worst['tokens_ratio']:.4f}. "
        f"Fewest row-steps in a cell: {min(r['full_row_steps'] for r in cells):,}.",
        "",
        "measured / predicted:",
        "",
        _matrix(rows, "tokens", "tokens_ratio"),
        "",
        "![tokens per call](tokens_per_call_vs_gamma.png)",
        "",
        "<details><summary>all token-formula cells</summary>",
        "",
        markdown_table(["pair", "sampling", "γ", "row-steps", "α measured", "tokens/call", "predicted", "ratio", "z", "±3%"],
               body),
        "",
        "</details>",
        "",
    ]


SYNTHETIC_LABEL = "synthetic inputs (token ids, not text)"  # beside every number measured on them


def _inputs(r: dict) -> str:
    return f" [{SYNTHETIC_LABEL}]" if r.get("random_prompts") else ""


def _positions(values) -> str:
    return " ".join(fmt(v, 2) for v in values) if values else "–"


def _latency(row: dict, metric: str) -> str:
    if row.get(f"mean_{metric}_ms") is None:
        return "–"
    return " / ".join(fmt(row.get(f"{s}_{metric}_ms"), 1) for s in ("mean", "median", "p99"))


def _per_prompt(r: dict) -> str:
    if "speedup_prompt_median" not in r:
        return "–"
    return (f"{r['speedup_prompt_median']:.3f} [{r['speedup_prompt_min']:.3f}, {r['speedup_prompt_max']:.3f}] "
            f"({r['distinct_prompts']})")


def _headline(cells: list[dict]) -> list[str]:
    """measured / cost model over every timed cell: the report's first number."""
    rated = [r for r in cells if "cost_model_ratio" in r]
    if not rated:
        return []
    lo, hi = COST_MODEL_BAND
    flagged = [r for r in rated if r["cost_model_flag"]]
    ratios = [r["cost_model_ratio"] for r in rated]
    lines = [f"**Measured / cost-model prediction: {len(rated) - len(flagged)}/{len(rated)} cells within the band "
             f"[{lo}, {hi}]**, range [{min(ratios):.3f}, {max(ratios):.3f}] (measured / Leviathan: "
             f"[{min(r['speedup_ratio'] for r in rated):.3f}, {max(r['speedup_ratio'] for r in rated):.3f}])."]
    if flagged:
        lines[0] += " Flagged (⚠): " + ", ".join(f"{r['group']} γ={r['gamma']} {r['cost_model_ratio']:.3f}"
                                                  for r in flagged) + "."
    drift = [r for r in rated if r.get("load_drift_flag")]
    if drift:
        lines[0] += (f" **Load drift** (⚠ on r: r < {LOAD_DRIFT_R}, a verify pass cheaper than a one-token pass): "
                     + ", ".join(f"{r['group']} γ={r['gamma']} r={r['r']:.2f}" for r in drift)
                     + " — the baseline and the cell ran under different machine load, so their speedups are not "
                     "measurements of speculation; rerun with --interleave.")
    interleaved = any(r.get("interleaved") for r in cells)
    if interleaved:
        lines[0] += " Baselines interleaved: each γ cell timed its own autoregressive baseline in rotation with it."
    wins = [r for r in cells if r["speedup_median"] > 1]
    lines[0] += (" Speculation pays (median speedup > 1) in: " + ", ".join(
        f"{r['group']}{_inputs(r)} γ={r['gamma']} ({r['speedup_median']:.3f} [{r['speedup_min']:.3f}, "
        f"{r['speedup_max']:.3f}] over repeats; per prompt {_per_prompt(r)})" for r in wins) + "." if wins
        else " No cell has a median speedup above 1.")
    return lines + [""]


def _category(row: dict) -> str | None:
    """The catalogue category a row's prompts are (`--categories` / `--prompt-select catalogue:C`), else None."""
    select = row.get("prompt_select") or ()
    return select[0].removeprefix("catalogue:") if len(select) == 1 and select[0].startswith("catalogue:") else None


def _category_section(cells: list[dict]) -> list[str]:
    """One line per catalogue category and series: its best γ, with how many prompts it rests on and their spread."""
    groups = list(dict.fromkeys(r["group"] for r in cells if _category(r)))
    if not groups:
        return []
    best = [max((r for r in cells if r["group"] == g), key=lambda r: r["speedup_median"]) for g in groups]
    return ["### By prompt category (best γ of each)", "",
            "Per prompt: each prompt's own speedup (its tokens/s over the baseline's on the same prompt, seed and "
            "repeat), median [min, max] over the n distinct prompts the cell rests on.", "",
            markdown_table(["category", "series", "γ", "speedup [min, max] over repeats", "per prompt: median [min, max]",
                            "prompts", "measured / cost model"],
                           [[_category(r), r["group"] + _inputs(r), str(r["gamma"]),
                             f"{r['speedup_median']:.3f} [{r['speedup_min']:.3f}, {r['speedup_max']:.3f}]",
                             (f"{r['speedup_prompt_median']:.3f} [{r['speedup_prompt_min']:.3f}, "
                              f"{r['speedup_prompt_max']:.3f}]" if "speedup_prompt_median" in r else "–"),
                             fmt(r.get("distinct_prompts")), fmt(r.get("cost_model_ratio"))] for r in best]), ""]


def _latency_runs(members: list[dict]) -> list[tuple[str, dict]]:
    if members[0].get("interleaved"):  # every cell has its own baseline
        return [run for r in members for run in ((f"autoregressive (γ = {r['gamma']} cell)", r.get("ar_latency") or {}),
                                                  (f"γ = {r['gamma']}", r))]
    return [("autoregressive", members[0].get("ar_latency") or {})] + [(f"γ = {r['gamma']}", r) for r in members]


def _group_tables(members: list[dict]) -> list[str]:
    ar = members[0]
    lo, hi = COST_MODEL_BAND
    speed = markdown_table(
        ["γ", "speedup [min, max]", "per prompt: median [min, max] (n prompts)", "Leviathan (r = 1)", "cost model", "**measured / cost model**", "± SE (acceptance)",
         "at realized acceptance", "measured / Leviathan", "α", "c", "r = T(γ+1)/T(1)", "tokens/call", "E[tokens/call]"],
        [[("**" + str(r["gamma"]) + "**") if r.get("best_gamma") == r["gamma"] else str(r["gamma"]),
          f"{r['speedup_median']:.3f} [{r['speedup_min']:.3f}, {r['speedup_max']:.3f}]", _per_prompt(r),
          r.get("predicted_speedup"), r.get("predicted_speedup_cost_model"),
          (("⚠ " if r.get("cost_model_flag") else "") + fmt(r.get("cost_model_ratio"))),
          fmt(100 * r.get("speedup_ratio_se", math.nan), 1) + "%", r.get("cost_model_ratio_realized_median"),
          r.get("speedup_ratio"), r["acceptance_rate"], r["c"], ("⚠ " if r.get("load_drift_flag") else "") + fmt(r.get("r")),
          r["tokens_per_call"],
          r.get("predicted_tokens_per_call")] for r in members])
    accept = markdown_table(
        ["γ", "acceptance rate % (vLLM)", "acceptance length 1 + accepted/drafts (vLLM)", "tokens / target call",
         "drafts", "draft tokens", "accepted tokens", "per position, unconditional (accepted at i / drafts)",
         "per position, conditional (accepted at i / reached i)"],
        [[str(r["gamma"]), r.get("spec_decode_acceptance_rate"), r.get("spec_decode_acceptance_length"),
          r.get("tokens_per_call_realized"), fmt(r.get("spec_decode_num_drafts")),
          fmt(r.get("spec_decode_draft_tokens")), fmt(r.get("spec_decode_accepted_tokens")),
          _positions(r.get("spec_decode_per_position_acceptance_rates")),
          _positions(r.get("per_position_acceptance_conditional"))] for r in members])
    latency = markdown_table(["run", "requests", "TTFT ms (mean / median / p99)", "TPOT ms", "ITL ms", "E2EL ms"],
                     [[name, fmt(r.get("completed")), _latency(r, "ttft"), _latency(r, "tpot"), _latency(r, "itl"),
                       _latency(r, "e2el")]
                      for name, r in _latency_runs(members)])
    if ar.get("interleaved"):
        head = ("Autoregressive, timed inside each γ cell in rotation with it: " + "; ".join(
            f"γ={r['gamma']} cell {r['ar_tokens_per_s_median']:.2f} tokens/s, T(1) = {r['ar_target_ms_per_call']:.2f} ms"
            for r in members) + ".")
    else:
        head = (f"Autoregressive: {ar['ar_tokens_per_s_median']:.2f} tokens/s [{ar['ar_tokens_per_s_min']:.2f}, "
                f"{ar['ar_tokens_per_s_max']:.2f}], T(1) = {ar['ar_target_ms_per_call']:.2f} ms per target call.")
    return [head, "",
            f"Speedup and its two predictions (⚠: measured / cost model outside [{lo}, {hi}]):", "", speed, "",
            "Acceptance, in the conventions engines report (docs/BENCH.md):", "", accept, "",
            "Latency per generation (B = 1; a token is emitted when the target pass that decided it ends):", "",
            latency, ""]


def _timing_section(rows: list[dict]) -> list[str]:
    cells = [r for r in rows if r["kind"] == "spec" and "speedup_median" in r]
    if not cells:
        return []
    synthetic = [r for r in cells if r["synthetic_target_ms"] is not None and "speedup_ratio" in r]
    lines = ["## Walltime speedup over autoregressive", "",
             "Each γ cell is timed against its group's autoregressive baseline, measured in the same run on the "
             "same prompts and seeds, tokens counted the same way (new tokens returned / wall time). Speedup per "
             "repeat = reference tokens/s ÷ baseline tokens/s of the same repeat; median [min, max] over repeats.", "",
             "Two predictions at the measured α, both from costs measured in this run: T(1) = the baseline's mean "
             "target call, T(γ+1) = the speculative run's mean target call (it scores γ + 1 positions), draft = its "
             "mean draft call; c = draft / T(1), r = T(γ+1) / T(1) (each mean includes the run's one prefill call per "
             "prompt, as its wall time does).", "",
             "- Leviathan's (1 − α^{γ+1}) / ((1 − α)(γc + 1)): assumes r = 1, a verify pass as cheap as a one-token "
             "pass (a weight-bandwidth-bound GPU);",
             "- the cost model E[tokens/call] / (r + γc) (docs/BENCH.md): the verify pass at its measured "
             "price. **measured / cost model is the headline**; outside the band "
             f"[{COST_MODEL_BAND[0]}, {COST_MODEL_BAND[1]}] a cell is flagged ⚠ — the run is slower (or faster) "
             "than its own forward passes explain. '± SE' is the acceptance noise of the timed steps, and "
             "'at realized acceptance' puts the tokens per call realized in those steps in place of E[tokens/call]: "
             "what remains is time outside the forward passes.", ""]
    lines += _headline(cells) + _category_section(cells)
    if synthetic:
        lines += _synthetic_summary(synthetic)
    lines += ["![speedup vs gamma](speedup_vs_gamma.png)", ""]
    best = best_gammas(rows)
    if best:
        lines += ["Best γ per pair and sampling:", "",
                  markdown_table(["series", "best γ (measured)", "speedup", "best γ (Leviathan)",
                          "best γ (cost model, among those measured)"],
                         [[b["group"], str(b["best_gamma"]), b["speedup_median"], str(b["predicted_best_gamma"]),
                           fmt(b.get("cost_model_best_gamma"))] for b in best]), ""]
    groups = list(dict.fromkeys(r["group"] for r in cells))
    for sampled in (False, True):  # greedy and sampled runs in separate tables
        mine = [g for g in groups if (next(r for r in cells if r["group"] == g)["temperature"] != 0) == sampled]
        if mine:
            lines += [f"### {'Sampled' if sampled else 'Greedy'}", ""]
        for group in mine:
            members = [r for r in cells if r["group"] == group]
            lines += [f"#### {group}{_inputs(members[0])}", ""] + _group_tables(members)
    lines += ["rows.json carries these numbers per cell under `vllm bench serve`'s names where vLLM has them "
              "(`spec_decode_acceptance_rate`, `spec_decode_acceptance_length`, `spec_decode_num_drafts`, "
              "`spec_decode_draft_tokens`, `spec_decode_accepted_tokens`, `spec_decode_per_position_acceptance_rates`, "
              "`mean/median/p99/std_{ttft,tpot,itl,e2el}_ms`), plus `per_position_acceptance_conditional`, "
              "`predicted_speedup` (Leviathan), `predicted_speedup_cost_model`, `cost_model_ratio`, `r`, `c`.", ""]
    return lines


def _synthetic_summary(cells: list[dict]) -> list[str]:
    low = [r for r in cells if r["speedup_ratio"] < SPEEDUP_FLOOR]
    worst = min(cells, key=lambda r: r["speedup_ratio"])
    wall = [r["walltime_ratio_median"] for r in cells]
    return [
        f"Synthetic-cost cells: **{len(cells) - len(low)}/{len(cells)} reach {SPEEDUP_FLOOR} × predicted**; lowest "
        f"measured/predicted {worst['speedup_ratio']:.3f} ({worst['pair']} γ={worst['gamma']}, acceptance noise "
        f"±{worst['speedup_ratio_se']:.1%} per SE).", "",
        "measured / predicted speedup (synthetic-cost cells):", "", _matrix(cells, "spec", "speedup_ratio"), "",
        "A timed cell is a few hundred steps, so its realized tokens per call scatter around "
        "(1 − α^{γ+1}) / (1 − α) by the SE shown per cell below (the formula itself is checked on ≥ 10k row-steps "
        "above); that scatter passes straight into measured/predicted. With the acceptance realized in the same "
        "timed runs instead of its expectation, i.e. predicted = (tokens per target call) / (1 + c · drafts per "
        "target call), what is left is what the wall clock measures — step cost and overhead: "
        f"**measured / predicted in [{min(wall):.3f}, {max(wall):.3f}]**, "
        f"{sum(w >= SPEEDUP_FLOOR for w in wall)}/{len(wall)} cells ≥ {SPEEDUP_FLOOR}:", "",
        _matrix(cells, "spec", "walltime_ratio_median"), "", "![measured over predicted](speedup_ratio_vs_gamma.png)", "",
        "measured / predicted tokens per call in the timed runs:", "", _matrix(cells, "spec", "tokens_ratio"), ""]


def _compare_section(rows: list[dict]) -> list[str]:
    cells = [r for r in rows if r["kind"] == "compare"]
    if not cells:
        return []
    body = [[r["pair"], r["sampling"], str(r["gamma"]),
             f"{r['ref_speedup_median']:.3f} [{r['ref_speedup_min']:.3f}, {r['ref_speedup_max']:.3f}]",
             f"{r['hf_speedup_median']:.3f} [{r['hf_speedup_min']:.3f}, {r['hf_speedup_max']:.3f}]",
             r["ref_over_hf_speedup_median"], r["ref_over_hf_tokens_per_s_median"], r.get("predicted_speedup"),
             r["tokens_per_call"], r["hf_tokens_per_call"]] for r in cells]
    return ["## Reference vs transformers assisted generation", "",
            "Same pair, prompts, seeds, γ and sampling; in every repeat all four generators run back to back "
            "(order rotated): the reference and its autoregressive baseline, transformers `generate` with "
            "`assistant_model` (constant γ) and plain transformers `generate`. Each speedup is over its own "
            "baseline; ratios are per repeat, then the median.", "",
            markdown_table(["pair", "sampling", "γ", "reference speedup", "assisted speedup", "ref/assisted speedup",
                    "ref/assisted tokens/s", "predicted", "ref tokens/call", "assisted tokens/call"], body),
            "", "![reference vs assisted](reference_vs_assisted.png)", ""]


def _header(plan_name: str, suite: str, rows: list[dict], command: str | None) -> list[str]:
    first = rows[0] if rows else {}
    versions = first.get("versions") or {}
    lines = [f"# Speculative decoding benchmark: `{plan_name}`", "",
             f"- suite: `{suite}`; cells: {len(rows)}",
             f"- git commit: `{first.get('git_commit')}`; device: {first.get('device')}; dtype: {first.get('dtype')}",
             f"- versions: {', '.join(f'{k} {v}' for k, v in versions.items())}",
             f"- UTC time of the first cell of the plan: {first.get('utc_time')}; seeds: base {first.get('seed')} "
             "(repeat r, prompt i: seed + 1000 r + i)",
             "- raw rows: [rows.csv](rows.csv), [rows.json](rows.json); per-cell records: rows.jsonl"]
    random = sorted({r["pair"] for r in rows if r.get("random_prompts")})
    if random:
        lines.append(f"- **{SYNTHETIC_LABEL}**: {', '.join(random)} ha{'s' if len(random) == 1 else 've'} no text "
                     "prompts; their prompts are token ids (random for the toy pairs), not text: speedups on such inputs "
                     "are not those on text (SPEED-Bench finds random-token inputs overstate speculative throughput)")
    chosen = sorted({"+".join(r["prompt_select"]) for r in rows if r.get("prompt_select")})
    if chosen:
        lines.append(f"- prompts: only {', '.join(chosen)} (a bare name: a kind or id of the pair's default set, "
                     "suites/prompts/prompts.jsonl, chat-templated; `catalogue:NAME`: a category or id of the bench "
                     "catalogue, suites/prompts/bench.jsonl, encoded as plain text)")
    if command:
        lines.append(f"- reproduce: `{command}`")
    return lines + ["", "Notation (Leviathan et al. 2023): p = target, q = draft, γ = drafts per step, "
                    "α = Σ min(p, q) measured on the positions visited, c = draft call / T(1) and r = T(γ+1) / T(1) "
                    "(T(1): the autoregressive baseline's target call, T(γ+1): the speculative run's; the reference's "
                    "own device-synchronized timers). Definitions: docs/BENCH.md.", ""]


def _acceptance_section(figures: dict) -> list[str]:
    lines = []
    if "accepted_hist.png" in figures:
        lines += ["## Accepted drafts per step", "", "![accepted histograms](accepted_hist.png)", ""]
    if "acceptance_per_position.png" in figures:
        lines += ["## Acceptance per draft position", "", "![acceptance per position](acceptance_per_position.png)",
                  ""]
    return lines


def write_report(out_dir: Path, plan_name: str, suite: str, rows: list[dict], *, command: str | None = None,
                 unfinished: int = 0, notes: list[str] | None = None, config=None) -> dict[str, Path]:
    """rows.csv, rows.json, figures and report.md in out_dir; returns {file name: path}.

    `notes` (freshness of the cells: measured now vs resumed and when; clamped lengths) go first; `config` is
    the BenchConfig the run was asked with (rows.json's `config`)."""
    summary = {"plan": plan_name, "suite": suite, "cells": len(rows), "unfinished": unfinished,
               "notes": list(notes or []), "command": command}
    files = write_rows(out_dir, rows, config=config, summary=summary)
    figures = write_figures(out_dir, rows)
    files.update(figures)
    lines = _header(plan_name, suite, rows, command)
    lines += [f"> {note}" for note in notes or []] + ([""] if notes else [])
    if unfinished:
        lines += [f"> **{unfinished} cells not measured yet** (time budget); rerun the same command to resume.", ""]
    lines += _tokens_section(rows) + _timing_section(rows) + _compare_section(rows) + _acceptance_section(figures)
    files["report.md"] = atomic_write_text(out_dir / "report.md", "\n".join(lines) + "\n")
    return files
