"""The benchmark suites `specdec bench --suite NAME` runs (registered with harness.bench.plan.register_suite;
harness.bench.plan loads this module through harness.policy). A suite is a list of `Sweep`s (a grid of one
kind over pairs × temperatures × γ):

- `synthetic` — const-α toy pairs (α ∈ {0.2 … 0.95}, exact and context-free) at T = 1, γ = 1..8:
  the token formula over ≥ 10k full-γ row-steps per cell (counts only, batched rows), and the walltime
  speedup with every forward padded to 40 ms (target) / 4 ms (draft), so c ≈ 0.1;
- `default`   — `synthetic`, plus the γ 1..8 × temperature {0, 1} grid on the context-dependent `toy` pair
  and the reference vs transformers assisted generation on it (same synthetic cost). Real pairs are
  benchmarked with `--pair smollm2` (minutes per cell on a 2-core CPU) or the `gpu` suite;
- `quick`     — `default` shrunk to what CI can afford (≤ 2 min);
- `gpu`       — a quick grid on a real pair on CUDA (≤ 10 min), skipped cleanly where there is no CUDA;
- `grid`      — with `--pair`/`--target` and no `--suite`: γ 1..8 × temperature {0, 1} on that pair.
"""

from __future__ import annotations

from harness.bench.plan import Sweep, register_grid, register_suite

SYNTHETIC_COST_MS = (40.0, 4.0)  # c ≈ 0.1; the pad dwarfs Python's per-step overhead (~3 ms)
QUICK_COST_MS = (20.0, 2.0)
GPU_PAIRS = ("smollm2-trunc", "smollm2", "toy")  # first one available is benchmarked



def _const_pairs(alphas=None) -> tuple[str, ...]:
    from harness.models.toy_pairs import CONSTANT_ALPHAS

    return tuple(f"const-a{a}" for a in (alphas or CONSTANT_ALPHAS))


def _available(name: str) -> bool:
    from harness.pairs import pair_specs

    spec = pair_specs().get(name)
    return spec is not None and spec.available()[0]


@register_suite("synthetic", "const-alpha toy pairs: token formula (counts) and walltime with synthetic cost")
def _synthetic(quick: bool) -> list[Sweep]:
    if quick:
        return [Sweep("tokens", _const_pairs((0.4, 0.8, 0.95)), gammas=(1, 2, 4), temperatures=(1.0,),
                      prompts=1024, max_new_tokens=0, repeats=1, min_row_steps=3000),
                Sweep("timing", _const_pairs((0.6, 0.9)), gammas=(1, 2, 4, 8), temperatures=(1.0,), prompts=1,
                      max_new_tokens=48, synthetic_cost_ms=QUICK_COST_MS)]
    return [Sweep("tokens", _const_pairs(), temperatures=(1.0,), prompts=2048, max_new_tokens=0, repeats=1),
            Sweep("timing", _const_pairs(), temperatures=(1.0,), prompts=1, max_new_tokens=64,
                  synthetic_cost_ms=SYNTHETIC_COST_MS)]


@register_suite("default", "synthetic + gamma x temperature grid and reference vs transformers assisted on toy")
def _default(quick: bool) -> list[Sweep]:
    sweeps = _synthetic(quick)
    if quick:
        return [*sweeps, Sweep("compare", ("toy",), gammas=(4,), temperatures=(0.0, 1.0), prompts=1,
                               max_new_tokens=24, synthetic_cost_ms=QUICK_COST_MS)]
    return [*sweeps,
            Sweep("timing", ("toy",), prompts=1, max_new_tokens=48, synthetic_cost_ms=SYNTHETIC_COST_MS),
            Sweep("compare", ("toy",), gammas=(2, 4), prompts=1, max_new_tokens=48, synthetic_cost_ms=SYNTHETIC_COST_MS)]


@register_suite("quick", "the default suite shrunk to what CI can afford (<= 2 min)")
def _quick(quick: bool) -> list[Sweep]:
    return _default(True)


# 9 min: the cell running at the deadline still finishes, and the report must be written within 10 min.
@register_suite("gpu", "quick grid + transformers comparison on a real pair on CUDA (<= 10 min)", time_budget_s=540)
def _gpu(quick: bool) -> list[Sweep]:
    pair = next(name for name in GPU_PAIRS if _available(name))
    return [Sweep("timing", (pair,), gammas=(1, 2, 3, 4, 6, 8), prompts=4, max_new_tokens=64, device="cuda"),
            Sweep("compare", (pair,), gammas=(2, 4), prompts=2, max_new_tokens=64, device="cuda")]


@register_grid
def grid_sweeps(pairs: tuple[str, ...], quick: bool) -> list[Sweep]:
    """The plain `--pair NAME` grid: γ 1..8 × temperature {0, 1} × prompts."""
    if quick:
        return [Sweep("timing", pairs, gammas=(1, 2, 4, 8), prompts=1, max_new_tokens=32)]
    return [Sweep("timing", pairs)]
