"""Raw cell records -> flat summary rows (what rows.csv / rows.json hold and the report plots).

Per timing cell: tokens/s, speedup over the autoregressive baseline per repeat (median and spread),
tokens per target call and the accepted-count histogram, acceptance per draft position, measured α
(Σ min(p, q) over the positions that were tested), the costs c = draft call / T(1) and r = T(γ+1) / T(1)
(the reference's own timers; T(1) from the baseline of the same run), Leviathan's prediction (r = 1) and
the cost model's, measured/predicted ratios (measured / cost model is the headline, flagged outside
COST_MODEL_BAND), and the acceptance and latency fields under vLLM's names (harness.bench.conventions).
"""

from __future__ import annotations

import math
import statistics

from harness.bench import conventions, theory
from harness.bench.cells import Cell, sampling_label

TOKEN_TOLERANCE = 0.03  # the token formula must hold within ±3% (over ≥ 10k target calls)
SPEEDUP_FLOOR = 0.9  # measured speedup must reach 0.9 × predicted on synthetic-cost pairs
# measured / cost-model prediction outside this band is flagged (docs/BENCH.md): below, the run is slower than
# its own forward passes explain (overhead); above, faster than they allow (timers or counts wrong) - or the
# few steps of a short timed cell realized far more or fewer tokens per call than α predicts (see its ± SE)
COST_MODEL_BAND = (0.8, 1.2)
LOAD_DRIFT_R = 0.9  # r below this: the baseline and the cell were timed under different machine load


def _div(a: float, b: float) -> float:
    return a / b if b else math.nan


def _spread(values: list[float], prefix: str) -> dict:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return {f"{prefix}_median": math.nan, f"{prefix}_min": math.nan, f"{prefix}_max": math.nan,
                f"{prefix}_per_repeat": values}
    return {f"{prefix}_median": statistics.median(finite), f"{prefix}_min": min(finite),
            f"{prefix}_max": max(finite), f"{prefix}_per_repeat": values}


def rates(measurement: dict, method: str) -> list[float]:
    """Tokens per second of each repeat."""
    t = measurement["timings"][method]
    return [_div(n, s) for n, s in zip(t["tokens"], t["seconds"], strict=True)]


def _ratios(num: list[float], den: list[float]) -> list[float]:
    """Per-repeat ratios (repeat r of one method over repeat r of the other: measured side by side)."""
    return [_div(a, b) for a, b in zip(num, den, strict=False)]


def tokens_per_target_call(measurement: dict, method: str) -> list[float]:
    """Per repeat: tokens returned / target forward passes (B = 1), as realized in the timed runs."""
    return _ratios(measurement["timings"][method]["tokens"], measurement["forwards"][method]["target_calls"])


def _acceptance_free_check(row: dict, measurement: dict, speedup: list[float]) -> dict:
    """Leviathan's speedup with the acceptance realized in the timed runs instead of its expectation.

    A timed run of a few hundred steps realizes tokens per call within ±5-10% of (1 − α^{γ+1})/(1 − α)
    (that part is checked on ≥ 10k row-steps by the counts); dividing it out leaves what the wall clock
    measures: does one step cost (1 + c · drafts per step) target passes, with negligible overhead?
    """
    f = measurement["forwards"]["ref"]
    realized = tokens_per_target_call(measurement, "ref")
    drafts = _ratios(f["draft_calls"], f["target_calls"])
    given = [_div(t, 1 + row["c"] * d) for t, d in zip(realized, drafts, strict=True)]
    out = {"tokens_per_call_realized": _div(sum(measurement["timings"]["ref"]["tokens"]), sum(f["target_calls"])),
           "predicted_speedup_realized": statistics.median(given),
           "speedup_ratio_se": _div(row["tokens_per_call_se"], row["tokens_per_call"])}
    out.update(_spread(_ratios(speedup, given), "walltime_ratio"))
    if math.isfinite(row.get("r", math.nan)):  # the cost model at the realized acceptance: what is left is overhead
        model = [_div(t, row["r"] + row["c"] * d) for t, d in zip(realized, drafts, strict=True)]
        out["predicted_speedup_cost_model_realized"] = statistics.median(model)
        out.update(_spread(_ratios(speedup, model), "cost_model_ratio_realized"))
    return out


def cost_model(row: dict, gamma: int, ar_target_ms: float, speedup_median: float) -> dict:
    """Both predictions from costs measured in this run, and measured / cost model (the headline).

    T(1) = the autoregressive baseline's mean target call, T(γ+1) = the speculative run's mean target call,
    draft = its mean draft call (each mean includes that run's one prefill call per prompt, as its wall time
    does): r = T(γ+1) / T(1), c = draft / T(1). Leviathan's prediction is the cost model at r = 1."""
    out = {"r": _div(row["target_ms_per_call"], ar_target_ms), "c_verify": row["c"],
           "c": _div(row["draft_ms_per_call"], ar_target_ms)}
    alpha = row["acceptance_rate"]
    if not (math.isfinite(alpha) and 0 <= alpha <= 1 and math.isfinite(out["c"]) and out["r"] > 0):
        return out
    out["predicted_speedup"] = theory.predicted_speedup(alpha, gamma, out["c"])
    out["predicted_speedup_cost_model"] = theory.cost_model_speedup(alpha, gamma, out["r"], out["c"])
    out["cost_model_ratio"] = _div(speedup_median, out["predicted_speedup_cost_model"])
    lo, hi = COST_MODEL_BAND
    out["cost_model_flag"] = not lo <= out["cost_model_ratio"] <= hi
    # a pass over γ + 1 ≥ 2 positions cannot cost less than a one-token pass on the same machine: the load
    # changed between the baseline and this cell (--interleave times both in the same minutes)
    out["load_drift_flag"] = out["r"] < LOAD_DRIFT_R
    return out


def spec_decode_summary(s: dict) -> dict:
    """vLLM-named acceptance fields of a merged stats record (records from before these counts: none)."""
    if "drafting_row_steps" not in s:
        return {}
    return conventions.spec_decode_fields(s["drafting_row_steps"], s["drafted_all_steps"], s["accepted_all_steps"],
                                          s["accepted"], s["reached"])


def per_prompt_speedup(measurement: dict, baseline: dict, method: str = "ref", base_method: str = "ar") -> dict:
    """Each prompt's own speedup (its tokens/s over the baseline's on the same prompt, seed and repeat; median over
    repeats), so a cell says how many prompts it rests on and how they spread."""
    mine = (measurement.get("requests") or {}).get(method)
    base = {(q["repeat"], q["prompt"]): q for q in (baseline.get("requests") or {}).get(base_method) or []}
    if not mine or not base:
        return {}
    ratios: dict[int, list[float]] = {}
    for q in mine:
        b = base.get((q["repeat"], q["prompt"]))
        if b is not None and q["e2el_s"] > 0 and b["e2el_s"] > 0 and b["tokens"]:
            ratios.setdefault(q["prompt"], []).append((q["tokens"] / q["e2el_s"]) / (b["tokens"] / b["e2el_s"]))
    per_prompt = [statistics.median(v) for _, v in sorted(ratios.items())]
    if not per_prompt:
        return {}
    return {"speedup_per_prompt": per_prompt, "speedup_prompt_min": min(per_prompt),
            "speedup_prompt_max": max(per_prompt), "speedup_prompt_median": statistics.median(per_prompt),
            "prompts_timed": len(per_prompt),
            "distinct_prompts": measurement.get("distinct_prompts", len(per_prompt))}  # a set shorter than asked cycles


def latency_summary(measurement: dict, method: str) -> dict:
    """vLLM-named latency fields of one method's generations (records from before per-request timing: none)."""
    requests = (measurement.get("requests") or {}).get(method)
    return conventions.latency_fields(requests) if requests else {}


def stats_summary(s: dict, gamma: int) -> dict:
    """Acceptance statistics of the reference's runs (merged GenerationStats, see measure.merge_stats)."""
    hist = s["accepted_hist"]
    full = sum(hist)
    mean_tokens = _div(sum((k + 1) * h for k, h in enumerate(hist)), full)
    second = _div(sum((k + 1) ** 2 * h for k, h in enumerate(hist)), full)
    sd = math.sqrt(max(second - mean_tokens**2, 0.0)) if full else math.nan
    alpha = _div(s["alpha_sum"], s["alpha_count"])
    target_ms = 1e3 * _div(s["target_seconds"], s["target_calls"])
    draft_ms = 1e3 * _div(s["draft_seconds"], s["draft_calls"])
    out = {
        "acceptance_rate": alpha,
        "row_steps": s["row_steps"],
        "full_row_steps": full,
        "target_calls": s["target_calls"],
        "tokens_per_call": mean_tokens,  # over full-γ row-steps: what the formula describes
        "tokens_per_call_se": _div(sd, math.sqrt(full)) if full else math.nan,
        "tokens_per_call_all_steps": _div(s["accepted_all_steps"] + s["row_steps"], s["row_steps"]),
        "accepted_hist": hist,
        "acceptance_per_position": [_div(a, r) for a, r in zip(s["accepted"], s["reached"], strict=True)],
        "reached_per_position": s["reached"],  # row-steps that tested draft position i (the denominators)
        "target_ms_per_call": target_ms,
        "draft_ms_per_call": draft_ms,
        "c": _div(draft_ms, target_ms),
    }
    if math.isfinite(alpha) and 0 <= alpha <= 1:
        out["predicted_tokens_per_call"] = theory.expected_tokens_per_call(alpha, gamma)
        out["tokens_ratio"] = _div(mean_tokens, out["predicted_tokens_per_call"])
        if math.isfinite(out["c"]):
            out["predicted_speedup"] = theory.predicted_speedup(alpha, gamma, out["c"])
    return out


def _common(cell: Cell, record: dict) -> dict:
    prov = record.get("provenance", {})
    m = record["measurement"]
    cost = cell.synthetic_cost_ms
    return {
        "cell_id": record["cell_id"], "kind": cell.kind, "pair": cell.pair, "gamma": cell.gamma,
        "temperature": cell.temperature, "top_k": cell.top_k, "top_p": cell.top_p,
        "sampling": sampling_label(cell.temperature, cell.top_k, cell.top_p),
        "prompts": cell.prompts, "prompt_select": cell.prompt_select, "prompt_lengths": m.get("prompt_lengths"),
        "interleaved": bool(getattr(cell, "interleave", False)),
        "random_prompts": m.get("random_prompts"),
        "max_new_tokens": m.get("max_new_tokens_used", cell.max_new_tokens),
        "repeats": cell.repeats, "warmup": cell.warmup,
        "synthetic_target_ms": cost[0] if cost else None, "synthetic_draft_ms": cost[1] if cost else None,
        "threads": cell.threads, "seed": cell.seed, "device": prov.get("device", cell.device),
        "dtype": prov.get("dtype", cell.dtype), "git_commit": prov.get("git_commit"),
        "utc_time": prov.get("utc_time"), "versions": prov.get("versions"),
    }


def _ar_row(cell: Cell, record: dict) -> dict:
    m = record["measurement"]
    s = m["stats"]["ar"]
    return {**_spread(rates(m, "ar"), "tokens_per_s"),
            "target_ms_per_call": 1e3 * _div(s["target_seconds"], s["target_calls"]), **latency_summary(m, "ar")}


def _spec_row(cell: Cell, record: dict, baseline: dict | None) -> dict:
    m = record["measurement"]
    row = stats_summary(m["stats"]["ref"], cell.gamma)
    row.update(spec_decode_summary(m["stats"]["ref"]))
    row.update(latency_summary(m, "ref"))
    row.update(_spread(rates(m, "ref"), "tokens_per_s"))
    if baseline is None:  # its baseline was not measured (time budget): no speedup to report
        return row
    ar_rates = rates(baseline["measurement"], "ar")
    ar = baseline["measurement"]["stats"]["ar"]
    row.update(_spread(ar_rates, "ar_tokens_per_s"))
    speedup = _ratios(rates(m, "ref"), ar_rates)
    row.update(_spread(speedup, "speedup"))
    row["ar_target_ms_per_call"] = 1e3 * _div(ar["target_seconds"], ar["target_calls"])
    row["ar_latency"] = latency_summary(baseline["measurement"], "ar")
    row.update(per_prompt_speedup(m, baseline["measurement"]))
    row["verify_cost_ratio"] = _div(row["target_ms_per_call"], row["ar_target_ms_per_call"])
    row.pop("predicted_speedup", None)  # stats_summary's used c per verify call; redone with c per T(1)
    row.update(cost_model(row, cell.gamma, row["ar_target_ms_per_call"], row["speedup_median"]))
    if "predicted_speedup" in row:
        row["speedup_ratio"] = _div(row["speedup_median"], row["predicted_speedup"])
        row.update(_acceptance_free_check(row, m, speedup))
    return row


def _compare_row(cell: Cell, record: dict) -> dict:
    m = record["measurement"]
    row = stats_summary(m["stats"]["ref"], cell.gamma)
    r = {name: rates(m, name) for name in ("ar", "ref", "hf_ar", "hf")}
    for name, values in r.items():
        row.update(_spread(values, f"{name}_tokens_per_s"))
    ref_speedup, hf_speedup = _ratios(r["ref"], r["ar"]), _ratios(r["hf"], r["hf_ar"])
    row.update(_spread(ref_speedup, "ref_speedup"))
    row.update(_spread(hf_speedup, "hf_speedup"))
    row.update(_spread(_ratios(ref_speedup, hf_speedup), "ref_over_hf_speedup"))
    row.update(_spread(_ratios(r["ref"], r["hf"]), "ref_over_hf_tokens_per_s"))
    f = m["forwards"]
    row["ref_tokens_per_call_realized"] = _div(sum(m["timings"]["ref"]["tokens"]), sum(f["ref"]["target_calls"]))
    row["hf_tokens_per_call"] = _div(sum(m["timings"]["hf"]["tokens"]), sum(f["hf"]["target_calls"]))
    row["hf_draft_calls_per_target_call"] = _div(sum(f["hf"]["draft_calls"]), sum(f["hf"]["target_calls"]))
    ar = m["stats"].get("ar")
    if ar:  # the same cost model as a spec cell, from the reference and its baseline timed in this cell
        row.pop("predicted_speedup", None)
        row.update(cost_model(row, cell.gamma, 1e3 * _div(ar["target_seconds"], ar["target_calls"]),
                              row["ref_speedup_median"]))
    row.update(spec_decode_summary(m["stats"]["ref"]))
    if "predicted_speedup" in row:
        row["speedup_ratio"] = _div(row["ref_speedup_median"], row["predicted_speedup"])
    return row


def _tokens_row(cell: Cell, record: dict) -> dict:
    m = record["measurement"]
    row = stats_summary(m["stats"]["ref"], cell.gamma)
    row["batches"] = m["batches"]
    row["measure_seconds"] = m["seconds"]
    pred = row.get("predicted_tokens_per_call", math.nan)
    row["tokens_z"] = _div(row["tokens_per_call"] - pred, row["tokens_per_call_se"])
    row["within_tolerance"] = bool(abs(row.get("tokens_ratio", math.nan) - 1) <= TOKEN_TOLERANCE)
    return row


def summarize(cells: list[Cell], records: dict[str, dict]) -> list[dict]:
    """One row per measured cell of the plan, in plan order; marks the best γ of each timing group."""
    rows = []
    for cell in cells:
        record = records.get(cell.id)
        if record is None:
            continue
        if cell.kind == "ar":
            extra = _ar_row(cell, record)
        elif cell.kind == "spec":
            extra = _spec_row(cell, record, records.get(cell.baseline().id))
        elif cell.kind == "compare":
            extra = _compare_row(cell, record)
        else:
            extra = _tokens_row(cell, record)
        rows.append({**_common(cell, record), **extra, "group": _group_name(cell)})
    _mark_best_gamma(rows)
    return rows


def _group_name(cell: Cell) -> str:
    cost = f", cost {cell.synthetic_cost_ms[0]:g}/{cell.synthetic_cost_ms[1]:g} ms" if cell.synthetic_cost_ms else ""
    chosen = f", prompts {'+'.join(cell.prompt_select)}" if getattr(cell, "prompt_select", None) else ""
    return f"{cell.pair} ({sampling_label(cell.temperature, cell.top_k, cell.top_p)}{cost}{chosen})"


def _mark_best_gamma(rows: list[dict]) -> None:
    """best_gamma: the measured γ with the highest median speedup in the row's group (and theory's pick)."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        if row["kind"] == "spec" and math.isfinite(row.get("speedup_median", math.nan)):
            groups.setdefault(row["group"], []).append(row)
    for members in groups.values():
        best = max(members, key=lambda r: r["speedup_median"])
        alphas = [r["acceptance_rate"] for r in members if math.isfinite(r["acceptance_rate"])]
        cs = [r["c"] for r in members if math.isfinite(r["c"])]
        predicted = (theory.optimal_gamma(statistics.mean(alphas), statistics.mean(cs), max(r["gamma"] for r in members))
                     if alphas and cs else None)
        modelled = [r for r in members if math.isfinite(r.get("predicted_speedup_cost_model", math.nan))]
        best_model = max(modelled, key=lambda r: r["predicted_speedup_cost_model"])["gamma"] if modelled else None
        for row in members:
            row["best_gamma"] = best["gamma"]
            row["predicted_best_gamma"] = predicted
            row["cost_model_best_gamma"] = best_model  # among the γ measured (r is measured per γ)


def best_gammas(rows: list[dict]) -> list[dict]:
    """One entry per timing group: pair, sampling, best γ measured and predicted, its speedup."""
    out = {}
    for row in rows:
        if row["kind"] == "spec" and row.get("best_gamma") == row["gamma"]:
            out[row["group"]] = {"group": row["group"], "pair": row["pair"], "sampling": row["sampling"],
                                 "best_gamma": row["gamma"], "speedup_median": row["speedup_median"],
                                 "predicted_best_gamma": row["predicted_best_gamma"],
                                 "cost_model_best_gamma": row.get("cost_model_best_gamma")}
    return list(out.values())
