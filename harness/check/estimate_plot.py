"""The figure of a verify report's estimates (issue 46): per cell and law, the TV estimate at each position with its
95 % interval as a band, and the exact TV where the implementation's law is known. `specdec verify --json PATH`
writes it beside the JSON (PATH with `-estimates.png`) whenever the report carries estimates."""

from __future__ import annotations

MAX_PANELS = 6


def estimates_figure(estimates: list[dict], title: str = ""):
    """A matplotlib Figure, or None without estimates. Panels: one per (cell, law), in the report's order (failed
    cells first when the caller sorted them so), at most MAX_PANELS; a generation cell's whole continuation ("joint")
    sits left of its positions."""
    if not estimates:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[tuple, list[dict]] = {}
    for e in estimates:
        groups.setdefault((e["case"], e.get("law", "")), []).append(e)
    keys = list(groups)[:MAX_PANELS]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.4 * len(keys), 3.0), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        rows = sorted(groups[key], key=lambda e: -1 if e["position"] == "joint" else e["position"])
        x = [-1 if e["position"] == "joint" else e["position"] for e in rows]
        lows, highs = [e["low"] for e in rows], [e["high"] for e in rows]
        ax.fill_between(x, lows, highs, alpha=0.3, label="95% interval")
        ax.vlines(x, lows, highs, alpha=0.6, lw=3)  # the band of a single position
        ax.plot(x, [e["estimate"] for e in rows], "o-", ms=4, label="estimate")
        exact = [(xi, e["exact_tv"]) for xi, e in zip(x, rows, strict=True) if e.get("exact_tv") is not None]
        if exact:
            ax.plot(*zip(*exact, strict=True), "kx", ms=6, label="exact TV")
        ax.set_xticks(x, ["joint" if xi == -1 else str(xi) for xi in x])
        case, law = key
        law = law[len(case) + 1:] if law.startswith(case + "/") else ("" if law == case else law)
        ax.set_title(f"{case} {law}".strip(), fontsize=8)
        ax.set_xlabel("position")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("TV to the target")
    axes[0][0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def write_estimates_figure(report, json_path) -> str | None:
    """Save the report's estimates figure beside `json_path` (its stem + `-estimates.png`); the path, or None."""
    from pathlib import Path

    from harness.records import save_figure

    failed = report.failed_cells()
    rows = sorted(report.estimates, key=lambda e: e["case"] not in failed)
    fig = estimates_figure(rows, f"{report.impl}: {report.verdict.upper()}")
    if fig is None:
        return None
    path = Path(json_path)
    out = path.with_name(path.stem + "-estimates.png")
    save_figure(fig, out)
    return str(out)
