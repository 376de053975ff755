"""Figures of a benchmark run, from summary rows; each function returns a matplotlib Figure or None.

Theory curves are Leviathan et al. 2023 at the α and c measured for the same series (see theory.py).
"""

from __future__ import annotations

import math
import statistics

from harness.bench import theory
from harness.bench.summarize import SPEEDUP_FLOOR, TOKEN_TOLERANCE


def pyplot():
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
    alpha = _mean(members, "acceptance_rate")
    text = f"{name}  α={alpha:.2f}"
    return text + (f", c={_mean(members, 'c'):.3f}" if with_c else "")


def _panels(n: int, width: float = 3.6, height: float = 3.0):
    plt = pyplot()
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)[:n]


def speedup_vs_gamma(rows: list[dict]):
    """One panel per series: median speedup (bars: min–max over repeats), Leviathan's curve at the measured
    α and c, the cost model at each measured γ (its r is measured per γ), and Leviathan's prediction at the
    acceptance realized in the timed runs."""
    series = _series(rows, "spec")
    if not series:
        return None
    fig, axes = _panels(len(series))
    for ax, (name, members) in zip(axes, series.items(), strict=True):
        gammas = [r["gamma"] for r in members]
        med = [r.get("speedup_median", math.nan) for r in members]
        err = [[m - r.get("speedup_min", m) for m, r in zip(med, members, strict=True)],
               [r.get("speedup_max", m) - m for m, r in zip(med, members, strict=True)]]
        ax.errorbar(gammas, med, yerr=err, fmt="o-", color="tab:blue", capsize=3, label="measured")
        alpha, c = _mean(members, "acceptance_rate"), _mean(members, "c")
        if math.isfinite(alpha) and math.isfinite(c):
            grid = list(range(1, max(gammas) + 1))
            ax.plot(grid, [theory.predicted_speedup(alpha, g, c) for g in grid], "--", color="black",
                    label="Leviathan (r = 1) at α, c")
        ax.plot(gammas, [r.get("predicted_speedup_cost_model", math.nan) for r in members], "s:", color="tab:green",
                label="cost model E/(r + γc), r measured per γ")
        ax.plot(gammas, [r.get("predicted_speedup_realized", math.nan) for r in members], "x", color="tab:red",
                label="Leviathan at realized acceptance")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_title(f"{name}\nα={alpha:.2f}, c={c:.3f}", fontsize=8)
        ax.set_xlabel("γ", fontsize=8)
        ax.legend(fontsize=6)
    axes[0].set_ylabel("speedup over autoregressive")
    fig.suptitle("Speedup vs γ: Leviathan (r = 1), cost model E/(r+γc)", fontsize=9)
    _integer_ticks(*axes)
    fig.tight_layout()
    return fig


def speedup_ratio_vs_gamma(rows: list[dict]):
    """Measured / predicted speedup per series: at the measured α (bars ±1 SE of the realized acceptance)
    and at the acceptance realized in the timed runs (what the wall clock alone measures)."""
    series = _series(rows, "spec")
    if not series:
        return None
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, members) in enumerate(series.items()):
        color = colors[i % len(colors)]
        gammas = [r["gamma"] for r in members]
        ratio = [r.get("speedup_ratio", math.nan) for r in members]
        se = [q * r.get("speedup_ratio_se", math.nan) for q, r in zip(ratio, members, strict=True)]
        left.errorbar(gammas, ratio, yerr=se, fmt="o-", color=color, capsize=2, label=name)
        right.plot(gammas, [r.get("walltime_ratio_median", math.nan) for r in members], "o-", color=color)
    for ax, title in ((left, "at the measured α (bars: ±1 SE from the timed sample's acceptance)"),
                      (right, "at the acceptance realized in the timed runs")):
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axhline(SPEEDUP_FLOOR, color="red", lw=0.8, ls=":")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("γ")
    left.set_ylabel("measured / predicted speedup")
    left.legend(fontsize=6)
    _integer_ticks(left, right)
    return fig


def tokens_vs_gamma(rows: list[dict]):
    """Left: mean tokens per target call vs γ with (1−α^(γ+1))/(1−α); right: measured/predicted, ±3% band."""
    kind = "tokens" if any(r["kind"] == "tokens" for r in rows) else "spec"
    series = _series(rows, kind)
    if not series:
        return None
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, members) in enumerate(series.items()):
        color = colors[i % len(colors)]
        gammas = [r["gamma"] for r in members]
        left.errorbar(gammas, [r["tokens_per_call"] for r in members],
                      yerr=[2 * r["tokens_per_call_se"] for r in members], fmt="o", color=color, capsize=2,
                      label=_label(name, members, False))
        alpha = _mean(members, "acceptance_rate")
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
    """Each series' row at its largest γ: counts-only cells where a pair has them (many more steps), else
    its timed cells."""
    counted = _series(rows, "tokens")
    covered = {(m[0]["pair"], m[0]["sampling"]) for m in counted.values()}
    timed = {k: m for k, m in _series(rows, "spec").items() if (m[0]["pair"], m[0]["sampling"]) not in covered}
    return [(name, members[-1]) for name, members in {**counted, **timed}.items()]


def accepted_histograms(rows: list[dict]):
    """Accepted drafts per step at the largest γ, one panel per series; dots: truncated geometric at α."""
    picked = _at_largest_gamma(rows)
    if not picked:
        return None
    plt = pyplot()
    ncols = min(3, len(picked))
    nrows = math.ceil(len(picked) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax, (name, row) in zip(axes.flat, picked, strict=False):
        hist = row["accepted_hist"]
        total = sum(hist) or 1
        ks = list(range(len(hist)))
        ax.bar(ks, [h / total for h in hist], color="tab:blue", alpha=0.7, label="measured")
        if math.isfinite(row["acceptance_rate"]):
            ax.plot(ks, theory.accepted_count_pmf(row["acceptance_rate"], row["gamma"]), "ko", ms=4, label="truncated geometric at α")
        ax.set_title(f"{name}\nγ={row['gamma']}, α={row['acceptance_rate']:.3f}, {total:,} steps", fontsize=8)
        ax.set_xlabel("drafts accepted in a step")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(picked):]:
        ax.set_visible(False)
    _integer_ticks(*axes.flat)
    fig.tight_layout()
    return fig


MIN_REACHED = 30  # positions tested fewer times than this are not plotted (their rate is mostly noise)


def acceptance_per_position(rows: list[dict]):
    """P(draft i accepted | position i tested), largest γ per series, bars ±2 binomial SE; dashed: measured α."""
    picked = _at_largest_gamma(rows)
    series = [(name, row, [(pos + 1, rate, n) for pos, (rate, n) in
                           enumerate(zip(row["acceptance_per_position"], row["reached_per_position"], strict=True))
                           if n >= MIN_REACHED]) for name, row in picked]
    if not any(points for _, _, points in series):
        return None  # no position tested often enough: an empty plot would only look like a result
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, row, points) in enumerate(series):
        color = colors[i % len(colors)]
        if points:
            xs, rates, ns = zip(*points, strict=True)
            se = [2 * math.sqrt(max(r * (1 - r), 0.0) / n) for r, n in zip(rates, ns, strict=True)]
            ax.errorbar(xs, rates, yerr=se, fmt="o-", color=color, capsize=2, label=f"{name} (γ={row['gamma']})")
        if math.isfinite(row["acceptance_rate"]):
            ax.axhline(row["acceptance_rate"], color=color, ls="--", lw=0.8)
    ax.set_xlabel("draft position i")
    ax.set_ylabel("acceptance rate at position i")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Acceptance per draft position (dashed: measured α; positions tested < {MIN_REACHED} times omitted)",
                 fontsize=9)
    ax.legend(fontsize=7)
    _integer_ticks(ax)
    return fig


def reference_vs_assisted(rows: list[dict]):
    """Speedup of the reference and of transformers assisted generation, each over its own baseline."""
    compare = [r for r in rows if r["kind"] == "compare"]
    if not compare:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(7, 1.6 * len(compare)), 5))
    xs = list(range(len(compare)))
    for offset, key, label in ((-0.2, "ref_speedup", "reference"), (0.2, "hf_speedup", "transformers assisted")):
        med = [r[f"{key}_median"] for r in compare]
        err = [[m - r[f"{key}_min"] for m, r in zip(med, compare, strict=True)],
               [r[f"{key}_max"] - m for m, r in zip(med, compare, strict=True)]]
        ax.bar([x + offset for x in xs], med, width=0.4, yerr=err, capsize=3, label=label)
    ax.plot(xs, [r.get("predicted_speedup", math.nan) for r in compare], "k_", ms=20, mew=2,
            label="predicted (reference's α, c)")
    tops = [max(r["ref_speedup_max"], r["hf_speedup_max"], r.get("predicted_speedup", 0.0)) for r in compare]
    for x, r, top in zip(xs, compare, tops, strict=True):
        ax.annotate(f"ref/assisted\n{r['ref_over_hf_speedup_median']:.2f}", (x, top), textcoords="offset points",
                    xytext=(0, 6), ha="center", fontsize=7)
    ax.set_ylim(0, 1.25 * max(tops))
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(xs, [f"{r['pair']}\n{r['sampling']}\nγ={r['gamma']}" for r in compare], fontsize=8)
    ax.set_ylabel("speedup over own autoregressive baseline")
    ax.set_title("Reference vs transformers assisted generation (same pair, prompts, seeds, settings)", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    return fig


FIGURES = {
    "speedup_vs_gamma.png": speedup_vs_gamma,
    "speedup_ratio_vs_gamma.png": speedup_ratio_vs_gamma,
    "tokens_per_call_vs_gamma.png": tokens_vs_gamma,
    "accepted_hist.png": accepted_histograms,
    "acceptance_per_position.png": acceptance_per_position,
    "reference_vs_assisted.png": reference_vs_assisted,
}
