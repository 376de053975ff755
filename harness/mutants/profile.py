"""Per-position divergence of lossy sampler-level zoo entries with its band: the data and the figure of
the estimate campaign's report (suites/campaigns/estimate.py).

For an entry with an exact per-position law on a catalogue case: N rows of a verification step reach position j
with the entry's own probability Π_{i<j} P(accept at i); the tokens emitted there are drawn from the exact law at j,
and `harness.stats.estimate.tv_estimate` gives the estimate and its 95 % interval — what `specdec verify
--estimate` prints for that position — beside the exact TV.
"""

from __future__ import annotations

import numpy as np

PROFILE_ENTRIES = ("lenient_acceptance", "threshold_acceptance", "relaxed_acceptance", "typical_acceptance")


def position_profile(entries: tuple[str, ...], case: str = "gamma8-v100", rows: int = 100_000,
                     seed: int = 0) -> list[dict]:
    """One dict per entry: {entry, case, rows, positions: [{position, n, estimate, low, high, exact_tv,
    exact_tv_full}]}."""
    import torch

    from harness.check.sampler import plan_cases, select_cases
    from harness.mutants.registry import get
    from harness.stats.estimate import exact_partition_tv, partition, tv_estimate

    (spec,) = select_cases([case])
    plan = plan_cases([spec], seed)[0]
    p, q = torch.from_numpy(plan.p), torch.from_numpy(plan.q)
    out = []
    for name in entries:
        impl = get(name)
        laws = impl.position_laws(p, q).double().numpy()
        reach = np.concatenate([[1.0], np.cumprod(impl.exact_acceptance(p, q).double().numpy())])
        rng = np.random.default_rng([seed, len(out)])
        positions = []
        for j in range(laws.shape[0]):
            n = int(round(rows * reach[j]))
            if n == 0:
                continue
            inside = np.clip(laws[j], 0, None)
            probs = np.append(inside, max(0.0, 1.0 - inside.sum()))
            draw = rng.multinomial(n, probs / probs.sum())
            e = tv_estimate(draw[:-1], plan.p[j], rng=rng, outside=int(draw[-1]))
            full = 0.5 * (float(np.abs(laws[j] - plan.p[j]).sum()) + abs(1 - float(laws[j].sum())))
            positions.append({"position": j, "n": n, "estimate": e["estimate"], "low": e["low"], "high": e["high"],
                              "exact_tv": exact_partition_tv(laws[j], plan.p[j], partition(plan.p[j], n)),
                              "exact_tv_full": full})
        out.append({"entry": name, "case": case, "rows": rows, "positions": positions})
    return out


def profile_figure(profiles: list[dict]):
    """Estimate (dots), its 95 % interval (band) and the exact TV (crosses) per position, one panel per entry."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(profiles), figsize=(3.2 * len(profiles), 3.0), sharey=True, squeeze=False)
    for ax, prof in zip(axes[0], profiles, strict=True):
        pos = [r["position"] for r in prof["positions"]]
        ax.fill_between(pos, [r["low"] for r in prof["positions"]], [r["high"] for r in prof["positions"]],
                        alpha=0.3, label="95% interval")
        ax.plot(pos, [r["estimate"] for r in prof["positions"]], "o-", ms=4, label="estimate")
        ax.plot(pos, [r["exact_tv"] for r in prof["positions"]], "kx", ms=6, label="exact TV")
        ax.set_title(prof["entry"], fontsize=9)
        ax.set_xlabel("position j")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"TV at position j ({profiles[0]['case']})")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig
