"""The benchmark planner: a registry of suites and the function that turns a `BenchConfig` into cells.

A suite is a list of `Sweep`s (a grid of one kind over pairs × temperatures × γ). The suites themselves
are policy: suites/sweeps.py registers them with `@register_suite` (and the plain `--pair` grid with
`@register_grid`); this module loads it through harness.policy on first use. Unknown names get a
"Did you mean" error. With `--pair`/`--target` and no `--suite`, the plan is the grid on that pair.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from harness.bench.cells import Cell
from harness.bench.config import BenchConfig
from harness.errors import HarnessError, UnknownNameError
from harness.policy import load

GAMMAS = tuple(range(1, 9))  # a sweep's γ values unless it names its own


@dataclasses.dataclass(frozen=True)
class Sweep:
    kind: str  # "timing" (ar + spec cells), "compare" (reference vs transformers) or "tokens" (counts only)
    pairs: tuple[str, ...]
    gammas: tuple[int, ...] = GAMMAS
    temperatures: tuple[float, ...] = (0.0, 1.0)
    top_k: int | None = None
    top_p: float | None = None
    prompts: int = 2  # timing: prompts per repeat (B = 1 each); tokens: rows per batch
    max_new_tokens: int = 64  # timing: per prompt; tokens: 0 = 2(γ + 1) per row
    repeats: int = 3
    warmup: int = 1
    synthetic_cost_ms: tuple[float, float] | None = None
    min_row_steps: int = 10_000  # tokens sweeps only
    device: str = "cpu"


@dataclasses.dataclass(frozen=True)
class SuiteSpec:
    name: str
    build: Callable[[bool], list[Sweep]]  # build(quick) -> sweeps
    description: str
    time_budget_s: float | None = None  # no new cell starts after this (unless --time-budget says otherwise)


@dataclasses.dataclass
class Plan:
    name: str  # run folder name
    suite: str
    cells: list[Cell]
    skip_reason: str | None = None  # set when the whole plan cannot run here (gpu suite without CUDA)
    time_budget_s: float | None = None


_SUITES: dict[str, SuiteSpec] = {}
_GRID: list[Callable[[tuple[str, ...], bool], list[Sweep]]] = []


def _registered() -> dict[str, SuiteSpec]:
    """The registry, after the policy's suites (suites/sweeps.py) registered themselves."""
    load("sweeps", "benchmark suites")  # imported once; it registers on import
    return _SUITES


def register_grid(build):
    """The plain grid `--pair NAME` runs: build(pairs, quick) -> sweeps."""
    _GRID[:] = [build]
    return build


def register_suite(name: str, description: str, time_budget_s: float | None = None):
    def deco(build):
        if name in _SUITES:
            raise ValueError(f"suite {name!r} registered twice")
        _SUITES[name] = SuiteSpec(name, build, description, time_budget_s)
        return build

    return deco


def suite_specs() -> dict[str, SuiteSpec]:
    return dict(_registered())


def _overrides(config: BenchConfig, kind: str) -> dict:
    """Sweep fields that the config sets explicitly (None means: keep the suite's). Counts-only sweeps
    keep their own batch shape and take no synthetic cost (only timing depends on those)."""
    values = {"gammas": config.gammas, "temperatures": config.temperatures, "top_k": config.top_k,
              "top_p": config.top_p, "device": config.device}
    if kind != "tokens":
        values.update(repeats=config.repeats, prompts=config.prompts, max_new_tokens=config.max_new_tokens,
                      synthetic_cost_ms=config.synthetic_cost_ms)
    return {k: v for k, v in values.items() if v is not None}


def _threads(config: BenchConfig, pair: str) -> int | None:
    if config.threads is not None:
        return config.threads
    from harness.pairs import pair_specs

    spec = pair_specs().get(pair)
    # Tiny toy models: OpenMP threads only add contention (1.8 ms vs 14-37 ms per forward under load).
    return 1 if spec is not None and "toy" in spec.tags else None


def sweep_cells(sweep: Sweep, config: BenchConfig, checkpoints: tuple[str, str] | None = None) -> list[Cell]:
    """The cells of one sweep; in a timing sweep each group's `ar` cell comes first."""
    cells = []
    selections = ([("catalogue:" + c,) for c in config.categories] if config.categories and config.endpoint is None
                  else [config.prompt_select])  # in-process --categories: one group per catalogue category
    for pair, temperature, select in ((p, t, s) for p in sweep.pairs for t in sweep.temperatures for s in selections):
        base = Cell(kind="ar", pair=pair, gamma=0, temperature=float(temperature), top_k=sweep.top_k,
                    top_p=sweep.top_p, prompts=sweep.prompts, max_new_tokens=sweep.max_new_tokens,
                    repeats=sweep.repeats, warmup=sweep.warmup, synthetic_cost_ms=sweep.synthetic_cost_ms,
                    device=sweep.device, dtype=config.dtype, seed=config.seed, threads=_threads(config, pair),
                    checkpoints=checkpoints, prompt_select=select,
                    interleave=bool(config.interleave) and sweep.kind == "timing")
        if sweep.kind == "timing" and not base.interleave:
            cells.append(base)
        kind = {"timing": "spec", "compare": "compare", "tokens": "tokens"}[sweep.kind]
        for gamma in sweep.gammas:
            extra = {"repeats": 1, "warmup": 0, "min_row_steps": sweep.min_row_steps,
                     "max_new_tokens": sweep.max_new_tokens or 2 * (gamma + 1)} if kind == "tokens" else {}
            cells.append(dataclasses.replace(base, kind=kind, gamma=gamma, **extra))
    return cells


def make_plan(config: BenchConfig) -> Plan:
    """Suite (or plain grid) -> cells, with the config's explicit values applied to every sweep."""
    config.validate()
    checkpoints = None
    if config.target is not None:
        checkpoints = (str(config.target), str(config.draft))
        pairs: tuple[str, ...] | None = (f"{Path(config.target).name}+{Path(config.draft).name}",)
    else:
        pairs = config.pairs
        if pairs:
            from harness.pairs import pair_specs

            known = pair_specs()
            for name in pairs:
                if name not in known:
                    raise UnknownNameError("pair", name, list(known))
    suite = config.suite or ("grid" if pairs else ("quick" if config.quick else "default"))
    if suite == "grid":
        _registered()
        sweeps = _GRID[0](pairs, config.quick)
    elif suite in _registered():
        sweeps = _SUITES[suite].build(config.quick)
    else:
        raise UnknownNameError("suite", suite, [*_registered(), "grid"])
    if pairs:
        sweeps = [dataclasses.replace(s, pairs=pairs) for s in sweeps]
    if config.categories:
        from harness.policy import load

        load("http_bench").catalogue(config.categories)  # an unknown category: UnknownNameError, exit 2
    if config.compare_hf:
        sweeps += [dataclasses.replace(s, kind="compare") for s in sweeps if s.kind == "timing"]
    cells = [c for s in sweeps
             for c in sweep_cells(dataclasses.replace(s, **_overrides(config, s.kind)), config, checkpoints)]
    cells = list(dict.fromkeys(cells))  # a cell asked for twice is measured once
    name = config.run_name or (suite if suite != "grid" else "grid-" + "-".join(pairs))
    budget = config.time_budget_s if config.time_budget_s is not None else getattr(_SUITES.get(suite), "time_budget_s",
                                                                                   None)
    return Plan(name=name, suite=suite, cells=cells, skip_reason=_device_problem(cells, suite), time_budget_s=budget)


def _device_problem(cells: list[Cell], suite: str) -> str | None:
    """The gpu suite skips cleanly without CUDA; any other CUDA request there is a usage error."""
    devices = {c.device for c in cells}
    if not any(d.startswith("cuda") for d in devices):
        return None
    import torch

    if torch.cuda.is_available():
        return None
    reason = "no CUDA device here (torch.cuda.is_available() is False)"
    if suite == "gpu":
        return reason
    raise HarnessError(f"--device cuda was asked for but there is {reason}; use --device cpu")
