"""One check engine for every level and verifier family.

Vocabulary (the same at the sampler, generation and engine levels):

- **trial source** — where trials come from: a verification step called on laws the harness built
  (sampler level), a whole `generate()` on a model pair (generation level), a served engine (engine
  level). A source lists the *cells* of its battery and draws trials for one cell.
- **cell** — one configuration tested on its own trials: a sampler case (p, q per position), a
  prompt × sampling setting, the greedy prompts.
- **check** — one unit of a cell's battery. It declares how many gating tests it emits for the cell,
  plans its sample size (TFP style: n for a detectable TV ε, and ε for n), runs on the trials and
  returns `TestResult`s; it gates (enters Holm) or advises (reported, never decides).
- **driver** — `run_battery`: sums the declared tests over every cell (m), plans each cell at the
  per-test level false_alarm_rate / m (Holm's first step: a test with p below it is rejected
  whatever the others say), draws, keeps drawing while a check reports a shortfall (a position
  reached less often than planned), runs the checks, stops early once the verdict is decided, applies
  Holm, and judges the plan's power: a run whose achieved detectable TV is above `inconclusive_tv`
  is INCONCLUSIVE, never PASS.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

from harness.check.config import (  # noqa: F401 - re-exported: the engine's public names
    DEFAULT_FALSE_ALARM_RATE,
    DEFAULT_GAMMA,
    DEFAULT_POWER,
    DEFAULT_TV,
    FAMILIES,
    INCONCLUSIVE_TV,
    LEVELS,
    CheckConfig,
)
from harness.check.report import CheckReport, deterministic_result
from harness.stats import TestResult


@dataclasses.dataclass
class Check:
    """One unit of a cell's battery.

    tests(cell) -> int                       gating tests it emits for that cell (0 for an advisory check)
    run(cell, trials, level, power)          -> list[TestResult] (exactly tests(cell) of them when it gates)
    samples_for(cell, tv, level, power)      -> trials it needs to detect `tv` at `power` (None: no demand)
    shortfall(cell, trials, tv, level, power) -> more trials it needs given what the trials reached (0: none)
    """

    name: str
    tests: Callable[[Any], int]
    run: Callable[[Any, Any, float, float], list[TestResult]]
    samples_for: Callable[[Any, float, float, float], int] | None = None
    shortfall: Callable[[Any, Any, float, float, float], int] | None = None
    gating: bool = True


@dataclasses.dataclass
class Cell:
    """One configuration of a battery with the checks that run on its trials."""

    name: str
    checks: list[Check]
    data: Any  # what the source needs to draw trials (a case plan, a prompt and a setting, ...)
    tv: float  # detectable TV the plan aims at for this cell
    summary: dict = dataclasses.field(default_factory=dict)  # reported per cell (plan, acceptance, ...)
    results: list[TestResult] = dataclasses.field(default_factory=list)  # its gating results so far (driver)

    def decided(self, level: float) -> bool:
        """A gating test of this cell is at or below the per-test level: Holm rejects it whatever the rest say."""
        return any(t.p_value <= level for t in self.results)

    def declared_tests(self) -> int:
        return sum(c.tests(self) for c in self.checks if c.gating)


class MalformedTrials(Exception):  # noqa: N818 - a condition of the trials, not a harness failure
    """The implementation returned output that breaks the contract: the cell fails its format test."""


class TrialSource:
    """What a level provides to the driver. Subclasses implement `cells` and `draw`."""

    level = "?"

    def cells(self, config: CheckConfig) -> list[Cell]:  # pragma: no cover - abstract
        raise NotImplementedError

    def draw(self, cell: Cell, n: int, progress: Callable[[int], None] | None):  # pragma: no cover - abstract
        """n new trials for `cell` (raise MalformedTrials with a one-line reason on contract violations)."""
        raise NotImplementedError

    def extend(self, trials, more):
        """Trials drawn so far plus `more` (numpy arrays: concatenated along rows)."""
        import numpy as np

        return np.concatenate([trials, more])

    def count(self, trials) -> int:
        return len(trials)

    def finish(self, report: CheckReport, config: CheckConfig) -> None:
        """Run-level advisories and notes after every cell (e.g. reproducibility)."""


def select(chosen: list | None, catalogue: list, kind: str) -> list:
    """Entries of `catalogue` (objects with a .name) by name, or given objects as they are; None: all of it.
    Unknown names raise UnknownNameError ("Did you mean ...?", exit 2)."""
    if not chosen:
        return list(catalogue)
    by_name = {c.name: c for c in catalogue}
    unknown = [c for c in chosen if isinstance(c, str) and c not in by_name]
    if unknown:
        from harness.errors import UnknownNameError

        raise UnknownNameError(kind, unknown[0], list(by_name))
    return [by_name[c] if isinstance(c, str) else c for c in chosen]


def plan_cell(cell: Cell, level: float, power: float) -> int:
    demands = [c.samples_for(cell, cell.tv, level, power) for c in cell.checks if c.samples_for]
    return max([1, *demands])


def run_battery(source: TrialSource, config: CheckConfig, *, impl_name: str,
                progress: Callable[[int], None] | None = None) -> CheckReport:
    """Plan, draw, test and decide every cell of `source`'s battery (see the module docstring)."""
    started = time.perf_counter()
    cells = source.cells(config)
    m = sum(cell.declared_tests() + 1 for cell in cells)  # + 1: each cell's format test
    level = config.false_alarm_rate / m
    report = CheckReport(impl_name, source.level, config.false_alarm_rate, config.tv, config.power, config.seed,
                         device=config.device)
    report.family = config.family
    report.inconclusive_tv = config.inconclusive_tv
    deadline = None if config.time_budget_s is None else time.monotonic() + config.time_budget_s
    for index, cell in enumerate(cells):
        planned = config.samples or plan_cell(cell, level, config.power)
        planned = min(planned, config.max_rows)
        cell.summary.setdefault("planned", planned)
        trials, problem = _draw_following_reach(source, cell, planned, level, config, progress, deadline)
        report.tests.append(deterministic_result(f"{cell.name}/format", problem is None,
                                                 n=0 if trials is None else source.count(trials),
                                                 message=problem or ""))
        if trials is not None:
            report.samples += source.count(trials)
            cell.summary["samples"] = source.count(trials)
            if problem is None:
                _run_checks(cell, trials, level, config.power, report)
        cell.summary.setdefault("format_problems", [problem] if problem else [])
        report.cases.append({"name": cell.name, **cell.summary})
        if config.stop_on_fail and any(t.p_value <= level for t in report.tests):
            skipped = [c.name for c in cells[index + 1:]]
            if skipped:
                report.notes.append(f"verdict decided at {cell.name} (a test has p <= {level:.2g}, rejected by "
                                    f"Holm whatever the rest says); skipped: {', '.join(skipped)}")
            break
        if deadline is not None and time.monotonic() > deadline:
            rest = [c.name for c in cells[index + 1:]]
            if rest:
                report.notes.append(f"time budget reached: cells not run: {', '.join(rest)}")
            break
    source.finish(report, config)
    report.notes.append(f"{m} gating tests declared, Holm at family-wise {config.false_alarm_rate:g} "
                        f"(per-test plan level {level:.2g})")
    report.declared_tests = m
    report.seconds = time.perf_counter() - started
    return report.decide()


def _draw_following_reach(source, cell, planned, level, config, progress, deadline):
    """Draw the planned trials, then keep drawing while a check reports a shortfall (up to max_rows)."""
    try:
        trials = source.draw(cell, planned, progress)
        while config.samples is None and (deadline is None or time.monotonic() < deadline):  # a fixed n is kept
            have = source.count(trials)
            more = max([0, *(c.shortfall(cell, trials, cell.tv, level, config.power)
                             for c in cell.checks if c.shortfall)])
            more = min(more, config.max_rows - have)
            if more <= 0:
                break
            trials = source.extend(trials, source.draw(cell, more, progress))
        return trials, None
    except MalformedTrials as exc:
        return getattr(exc, "trials", None), str(exc)


def _run_checks(cell: Cell, trials, level: float, power: float, report: CheckReport) -> None:
    for check in cell.checks:
        results = check.run(cell, trials, level, power)
        if check.gating:
            declared = check.tests(cell)
            if len(results) != declared:
                raise AssertionError(f"check {check.name} on {cell.name} declared {declared} gating tests but "
                                     f"emitted {len(results)}: the Holm plan would be wrong")
            report.tests += results
            cell.results += results
        else:
            report.advisories += results


def detectable(results: list[TestResult]) -> float:
    """Largest finite detectable TV among results that promise one in a TV metric (nan if none)."""
    values = [t.detectable_tv for t in results if t.detectable_tv is not None and math.isfinite(t.detectable_tv)
              and t.details.get("detectable_metric", "").startswith("TV")]
    return max(values) if values else math.nan
