"""Figures of a benchmark run, from summary rows; each function returns a matplotlib Figure or None.

Theory curves are Leviathan et al. 2023 at the α and c measured for the same series (see theory.py).
"""

from __future__ import annotations

import math
import statistics

from harness.bench import theory
from harness.bench.summarize import SPEEDUP_FLOOR, TOKEN_TOLERANCE


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _integer_ticks(*axes) -> None:
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _series(rows: list[dict], kind: str) -> dict[str, list[dict]]:
    """Rows of one kind grouped by their series (pair × sampling × cost), γ ascending."""
    out: dict[str, list[dict]] = {}
    for row in rows:
        if row["kind"] == kind:
            out.setdefault(row["group"], []).append(row)
    return {k: sorted(v, key=lambda r: r["gamma"]) for k, v in out.items()}


def _mean(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None and math.isfinite(r[key])]
    return statistics.mean(values) if values else math.nan


def _label(name: str, members: list[dict], with_c: bool) -> str:
    alpha = _mean(members, "alpha")
    text = f"{name}  α={alpha:.2f}"
    return text + (f", c={_mean(members, 'c'):.3f}" if with_c else "")


def speedup_vs_gamma(rows: list[dict]):
    """Top: median speedup (bars: min–max over repeats) with the predicted curve; bottom: measured/predicted."""
    series = _series(rows, "spec")
    if not series:
        return None
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8.5, 8), sharex=True, height_ratios=(2, 1))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, members) in enumerate(series.items()):
        color = colors[i % len(colors)]
        gammas = [r["gamma"] for r in members]
        med = [r.get("speedup_median", math.nan) for r in members]
        err = [[m - r.get("speedup_min", m) for m, r in zip(med, members, strict=True)],
               [r.get("speedup_max", m) - m for m, r in zip(med, members, strict=True)]]
        top.errorbar(gammas, med, yerr=err, fmt="o-", color=color, capsize=3, label=_label(name, members, True))
        alpha, c = _mean(members, "alpha"), _mean(members, "c")
        if math.isfinite(alpha) and math.isfinite(c):
            grid = list(range(1, max(gammas) + 1))
            top.plot(grid, [theory.predicted_speedup(alpha, g, c) for g in grid], "--", color=color, alpha=0.7)
        bottom.plot(gammas, [r.get("speedup_ratio", math.nan) for r in members], "o-", color=color)
    top.axhline(1.0, color="grey", lw=0.8)
    top.set_ylabel("speedup over autoregressive (median)")
    top.set_title("Speedup vs γ — dashed: predicted (1−α^(γ+1)) / ((1−α)(γc+1)) at measured α, c")
    top.legend(fontsize=7)
    bottom.axhline(1.0, color="grey", lw=0.8)
    bottom.axhline(SPEEDUP_FLOOR, color="red", lw=0.8, ls=":", label=f"{SPEEDUP_FLOOR} × predicted")
    bottom.set_ylabel("measured / predicted")
    bottom.set_xlabel("γ (drafted tokens per step)")
    bottom.legend(fontsize=7)
    _integer_ticks(bottom)
    return fig


def tokens_vs_gamma(rows: list[dict]):
    """Left: mean tokens per target call vs γ with (1−α^(γ+1))/(1−α); right: measured/predicted, ±3% band."""
    kind = "tokens" if any(r["kind"] == "tokens" for r in rows) else "spec"
    series = _series(rows, kind)
    if not series:
        return None
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, members) in enumerate(series.items()):
        color = colors[i % len(colors)]
        gammas = [r["gamma"] for r in members]
        left.errorbar(gammas, [r["tokens_per_call"] for r in members],
                      yerr=[2 * r["tokens_per_call_se"] for r in members], fmt="o", color=color, capsize=2,
                      label=_label(name, members, False))
        alpha = _mean(members, "alpha")
        if math.isfinite(alpha):
            grid = list(range(0, max(gammas) + 1))
            left.plot(grid, [theory.expected_tokens_per_call(alpha, g) for g in grid], "-", color=color, alpha=0.6)
        right.plot(gammas, [r.get("tokens_ratio", math.nan) for r in members], "o-", color=color)
    steps = min(r["full_row_steps"] for m in series.values() for r in m)
    left.set_title(f"Tokens per target call (≥ {steps:,} full-γ row-steps per point; bars ±2 SE)")
    left.set_xlabel("γ")
    left.set_ylabel("mean accepted drafts + 1")
    left.legend(fontsize=7)
    right.axhspan(1 - TOKEN_TOLERANCE, 1 + TOKEN_TOLERANCE, color="green", alpha=0.12, label="±3%")
    right.axhline(1.0, color="grey", lw=0.8)
    right.set_title("measured / predicted (1−α^(γ+1))/(1−α)")
    right.set_xlabel("γ")
    right.legend(fontsize=7)
    _integer_ticks(left, right)
    return fig


def _at_largest_gamma(rows: list[dict]) -> list[tuple[str, dict]]:
    kind = "tokens" if any(r["kind"] == "tokens" for r in rows) else "spec"
    return [(name, members[-1]) for name, members in _series(rows, kind).items()]


def accepted_histograms(rows: list[dict]):
    """Accepted drafts per step at the largest γ, one panel per series; dots: truncated geometric at α."""
    picked = _at_largest_gamma(rows)
    if not picked:
        return None
    plt = _pyplot()
    ncols = min(3, len(picked))
    nrows = math.ceil(len(picked) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax, (name, row) in zip(axes.flat, picked, strict=False):
        hist = row["accepted_hist"]
        total = sum(hist) or 1
        ks = list(range(len(hist)))
        ax.bar(ks, [h / total for h in hist], color="tab:blue", alpha=0.7, label="measured")
        if math.isfinite(row["alpha"]):
            ax.plot(ks, theory.accepted_count_pmf(row["alpha"], row["gamma"]), "ko", ms=4, label="theory")
        ax.set_title(f"{name}\nγ={row['gamma']}, α={row['alpha']:.3f}, {total:,} steps", fontsize=8)
        ax.set_xlabel("drafts accepted in a step")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(picked):]:
        ax.set_visible(False)
    _integer_ticks(*axes.flat)
    fig.tight_layout()
    return fig


def acceptance_per_position(rows: list[dict]):
    """P(draft i accepted | position i tested), largest γ per series; dashed: measured α."""
    picked = _at_largest_gamma(rows)
    if not picked:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, row) in enumerate(picked):
        color = colors[i % len(colors)]
        positions = list(range(1, row["gamma"] + 1))
        ax.plot(positions, row["acceptance_per_position"], "o-", color=color, label=f"{name} (γ={row['gamma']})")
        if math.isfinite(row["alpha"]):
            ax.axhline(row["alpha"], color=color, ls="--", lw=0.8)
    ax.set_xlabel("draft position i")
    ax.set_ylabel("acceptance rate at position i")
    ax.set_ylim(0, 1.05)
    ax.set_title("Acceptance per draft position (dashed: measured α)")
    ax.legend(fontsize=7)
    _integer_ticks(ax)
    return fig


def reference_vs_assisted(rows: list[dict]):
    """Speedup of the reference and of transformers assisted generation, each over its own baseline."""
    compare = [r for r in rows if r["kind"] == "compare"]
    if not compare:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(compare)), 4.5))
    xs = list(range(len(compare)))
    for offset, key, label in ((-0.2, "ref_speedup", "reference"), (0.2, "hf_speedup", "transformers assisted")):
        med = [r[f"{key}_median"] for r in compare]
        err = [[m - r[f"{key}_min"] for m, r in zip(med, compare, strict=True)],
               [r[f"{key}_max"] - m for m, r in zip(med, compare, strict=True)]]
        ax.bar([x + offset for x in xs], med, width=0.4, yerr=err, capsize=3, label=label)
    ax.plot(xs, [r.get("predicted_speedup", math.nan) for r in compare], "k_", ms=20, mew=2,
            label="predicted (reference's α, c)")
    for x, r in zip(xs, compare, strict=True):
        top = max(r["ref_speedup_max"], r["hf_speedup_max"])
        ax.annotate(f"ratio {r['ref_over_hf_speedup_median']:.2f}", (x, top), textcoords="offset points",
                    xytext=(0, 4), ha="center", fontsize=7)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(xs, [f"{r['pair']}\n{r['sampling']}\nγ={r['gamma']}" for r in compare], fontsize=8)
    ax.set_ylabel("speedup over own autoregressive baseline")
    ax.set_title("Reference vs transformers assisted generation (same pair, prompts, seeds, settings)")
    ax.legend(fontsize=7)
    return fig


FIGURES = {
    "speedup_vs_gamma.png": speedup_vs_gamma,
    "tokens_per_call_vs_gamma.png": tokens_vs_gamma,
    "accepted_hist.png": accepted_histograms,
    "acceptance_per_position.png": acceptance_per_position,
    "reference_vs_assisted.png": reference_vs_assisted,
}
