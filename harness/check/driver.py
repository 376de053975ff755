"""The check driver: one for every level (tier) and verifier family.

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
  per-test rate false_alarm_rate / m (Holm's first step: a test with p below it is rejected
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

from harness.check.config import (  # noqa: F401 - re-exported: the driver's public names
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
from harness.errors import HarnessError
from harness.progress import Step
from harness.stats import TestResult
from harness.stats.sequential import eprocess_result


@dataclasses.dataclass
class Check:
    """One unit of a cell's battery.

    tests(cell) -> int                       gating tests it emits for that cell (0 for an advisory check)
    run(cell, trials, rate, power)           -> list[TestResult] (exactly tests(cell) of them when it gates)
    samples_for(cell, tv, rate, power)       -> trials it needs to detect `tv` at `power` (None: no demand)
    shortfall(cell, trials, tv, rate, power)  -> more trials it needs given what the trials reached (0: none)
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

    def decided(self, rate: float) -> bool:
        """A gating test of this cell is at or below the per-test rate: Holm rejects it whatever the rest say."""
        return any(t.p_value <= rate for t in self.results)

    def declared_tests(self) -> int:
        return sum(c.tests(self) for c in self.checks if c.gating)


class MalformedTrials(Exception):  # noqa: N818 - a condition of the trials, not a harness failure
    """The implementation returned output that breaks the contract: the cell fails its format test."""


class TrialSource:
    """What a level provides to the driver. Subclasses implement `cells` and `draw`."""

    level = "?"
    progress_unit: str | None = None  # what its draws count on `progress(n)` (the progress line's unit)

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

    def chunk(self, cell: Cell) -> int | None:
        """Trials per implementation call (sequential mode looks after every chunk); None: one draw."""
        return None

    def monitors(self, cell: Cell, config: CheckConfig) -> list[Monitor]:
        """Anytime-valid tests of `cell` for the sequential mode (none: the fixed-n plan decides)."""
        return []

    def finish(self, report: CheckReport, config: CheckConfig) -> None:
        """Run-level advisories and notes after every cell (e.g. reproducibility)."""

    def progress_step(self, cell: Cell, n: int) -> Step:
        """How the progress line counts drawing n trials of `cell` (harness.progress.Step): the phase it belongs
        to, the units its draws pass to `progress(k)`, their relative cost, the cost of its tests. Default: n units
        of cost 1, tests free."""
        return Step(cell.name, "cell", n)


class _Tracker:
    """The driver's side of a progress display with a plan (harness.progress.Progress): a plain `progress(n)`
    callable, or none, gets only the counts."""

    def __init__(self, progress, source: TrialSource):
        self.display = progress if callable(getattr(progress, "plan", None)) else None
        self.source = source

    def plan(self, runs: list) -> None:
        if self.display is not None:
            self.display.plan([self.source.progress_step(run.cell, run.planned) for run in runs],
                              unit=self.source.progress_unit)

    def enter(self, cell: Cell, testing: bool = False) -> None:
        if self.display is not None:
            self.display.enter(cell.name, testing)

    def extend(self, cell: Cell, more: int) -> None:
        if self.display is not None and more > 0:
            self.display.extend(cell.name, self.source.progress_step(cell, more).units)

    def tested(self, cell: Cell) -> None:
        if self.display is not None:
            self.display.tested(cell.name)


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


def plan_cell(cell: Cell, rate: float, power: float) -> int:
    demands = [c.samples_for(cell, cell.tv, rate, power) for c in cell.checks if c.samples_for]
    return max([1, *demands])


class Monitor:
    """Anytime-valid tests of one cell (sequential mode): e-processes updated after every chunk of trials.

    `processes` maps a test name to its e-process (harness.stats.sequential); `update(trials)` feeds one
    chunk and returns the deterministic problems it saw (e.g. a token where p = 0), which stop the run."""

    processes: dict

    def update(self, trials) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError


FIRST_FRACTION = 1e-3  # sequential mode: the first look comes after this fraction of every cell's plan
GROWTH = 1.15  # looks at fractions FIRST_FRACTION·GROWTH^r: ≤ 15 % more trials than the crossing needed


def look_schedule(rows: int, first_fraction: float = FIRST_FRACTION, growth: float = GROWTH) -> list[int]:
    """Cumulative trial counts of the looks for a cell planned at `rows` (strictly increasing, ends at rows)."""
    looks, fraction = [], first_fraction
    while True:
        target = min(rows, max(1, math.ceil(rows * fraction)))
        if not looks or target > looks[-1]:
            looks.append(target)
        if target >= rows:
            return looks
        fraction *= growth


@dataclasses.dataclass
class _CellRun:
    """What the driver knows about one cell while it draws."""

    cell: Cell
    planned: int
    trials: Any = None
    problem: str | None = None
    monitors: list = dataclasses.field(default_factory=list)
    crossed: list[str] = dataclasses.field(default_factory=list)  # e-processes over the threshold, or support
    done: bool = False  # drawn to its plan and its reach top-up (or stopped by a format problem)

    def count(self, source) -> int:
        return 0 if self.trials is None else source.count(self.trials)


def run_battery(source: TrialSource, config: CheckConfig, *, impl_name: str,
                progress: Callable[[int], None] | None = None) -> CheckReport:
    """Plan, draw, test and decide every cell of `source`'s battery (see the module docstring).

    Modes, all drawing through `source.draw` (so every level and family has them): a fixed n
    (`config.samples`), the planned n with the reach-following top-up, early stop once a cell's verdict
    is decided (`stop_on_fail`), and anytime-valid monitoring (`config.sequential`: the cells' monitors
    are e-processes watched after every chunk; the first crossing of log(M / α) stops the run)."""
    started = time.perf_counter()
    cells = source.cells(config)
    if not cells:
        raise HarnessError(f"{impl_name}: the plan has no cell this implementation can run at these settings (a "
                           "sampling parameter its signature does not take, e.g. min_p for a generate() of the "
                           "contract's §1b signature, leaves none): see docs/CHECKING.md")
    runs = [_CellRun(cell, 0) for cell in cells]
    if config.sequential:
        for run in runs:
            run.monitors = source.monitors(run.cell, config)
    m_seq = sum(len(mon.processes) for run in runs for mon in run.monitors)
    m = sum(cell.declared_tests() + 1 for cell in cells) + m_seq  # + 1: each cell's format test
    rate = config.false_alarm_rate / m
    report = CheckReport(impl_name, source.level, config.false_alarm_rate, config.tv, config.power, config.seed,
                         device=config.device)
    report.family = config.family
    report.config = config
    report.inconclusive_tv = config.inconclusive_tv
    deadline = None if config.time_budget_s is None else time.monotonic() + config.time_budget_s
    for run in runs:
        run.planned = min(config.samples or plan_cell(run.cell, rate, config.power), config.max_rows)
        run.cell.summary.setdefault("planned", run.planned)
    track = _Tracker(progress, source)
    track.plan(runs)
    stop = _draw_sequential(source, runs, rate, config, progress, deadline, m, track) if config.sequential else None
    ran: list[_CellRun] = []
    for index, run in enumerate(runs):
        cell = run.cell
        if not config.sequential:
            run.trials, run.problem = _draw_following_reach(source, run, rate, config, progress, deadline, track)
        ran.append(run)
        n = run.count(source)
        report.tests.append(deterministic_result(f"{cell.name}/format", run.problem is None, n=n,
                                                 message=run.problem or ""))
        if run.trials is not None:
            report.samples += n
            cell.summary["samples"] = n
            if run.problem is None and stop is None:
                track.enter(cell, testing=True)
                _run_checks(cell, run.trials, rate, config.power, report)
        track.tested(cell)
        cell.summary.setdefault("format_problems", [run.problem] if run.problem else [])
        if config.sequential:
            cell.summary["planned_rows"] = run.planned
            cell.summary["rows"] = n
            cell.summary["rows_fraction_of_plan"] = n / run.planned if run.planned else 1.0
            support = [c for c in run.crossed if "(support)" in c]
            if support:
                report.tests.append(deterministic_result(f"{cell.name}/support", False, n=n, message="; ".join(support)))
            report.tests += [eprocess_result(proc, name) for mon in run.monitors for name, proc in mon.processes.items()]
        report.cases.append({"name": cell.name, **{k: v for k, v in cell.summary.items() if not k.startswith("_")}})  # "_x": the source's own
        if stop is not None:
            continue
        if config.stop_on_fail and any(t.p_value <= rate for t in report.tests):
            skipped = [c.name for c in cells[index + 1:]]
            if skipped:
                report.notes.append(f"verdict decided at {cell.name} (a test has p <= {rate:.2g}, rejected by "
                                    f"Holm whatever the rest says); skipped: {', '.join(skipped)}")
            break
        if deadline is not None and time.monotonic() > deadline:
            rest = [c.name for c in cells[index + 1:]]
            if rest:
                report.notes.append(f"time budget reached: cells not run: {', '.join(rest)}")
            break
    source.finish(report, config)
    if config.sequential:
        report.notes.append(_sequential_note(stop, ran, source, m, m_seq, config.false_alarm_rate))
    report.notes.append(f"{m} gating tests declared, Holm at family-wise {config.false_alarm_rate:g} "
                        f"(per-test plan rate {rate:.2g})")
    report.declared_tests = m
    report.seconds = time.perf_counter() - started
    if stop is not None:
        # Stopped early: the family still has M members (those not run count as p = 1), so a test is
        # rejected at the first Holm step's rate α/M — what a crossing means.
        report.tests = [dataclasses.replace(t, reject=t.p_value <= rate) for t in report.tests]
        return report
    return report.decide()


def _draw_chunk(source, run: _CellRun, n: int, progress, log_threshold: float | None) -> bool:
    """Draw n more trials for `run` (in the source's chunks when monitored); True when the run must stop."""
    chunk = source.chunk(run.cell) if run.monitors else None
    left = n
    while left > 0:
        size = min(left, chunk or left)
        try:
            more = source.draw(run.cell, size, progress)
        except MalformedTrials as exc:
            got = getattr(exc, "trials", None)
            if got is not None:
                run.trials = got if run.trials is None else source.extend(run.trials, got)
            run.problem, run.done = str(exc), True
            return True
        run.trials = more if run.trials is None else source.extend(run.trials, more)
        left -= size
        if run.monitors:
            for mon in run.monitors:
                run.crossed += mon.update(more)
            run.crossed += [name for mon in run.monitors for name, proc in mon.processes.items()
                            if proc.max_log_e >= log_threshold and name not in run.crossed]
            if run.crossed:
                return True
    return False


def _shortfall(source, run: _CellRun, rate: float, config: CheckConfig) -> int:
    if config.samples is not None or run.trials is None:  # a fixed n is kept
        return 0
    have = source.count(run.trials)
    more = max([0, *(c.shortfall(run.cell, run.trials, run.cell.tv, rate, config.power)
                     for c in run.cell.checks if c.shortfall)])
    return min(more, config.max_rows - have)


def _draw_following_reach(source, run: _CellRun, rate, config, progress, deadline, track: _Tracker):
    """Draw the planned trials, then keep drawing while a check reports a shortfall (up to max_rows)."""
    track.enter(run.cell)
    if _draw_chunk(source, run, run.planned, progress, None):
        return run.trials, run.problem
    while deadline is None or time.monotonic() < deadline:
        more = _shortfall(source, run, rate, config)
        track.extend(run.cell, more)
        if more <= 0 or _draw_chunk(source, run, more, progress, None):
            break
    return run.trials, run.problem


def _draw_sequential(source, runs: list[_CellRun], rate: float, config: CheckConfig, progress, deadline,
                     m: int, track: _Tracker):
    """Every cell advances to the same growing fraction of its plan, round after round, the monitors
    updated after every chunk; then the reach top-up, monitored too. Returns (cell, reasons) of the first
    crossing or format problem, or None when every cell reached its plan."""
    from harness.stats.sequential import crossing_log_threshold

    log_threshold = crossing_log_threshold(m, config.false_alarm_rate)
    schedules = [look_schedule(run.planned) for run in runs]
    for look in range(max(len(s) for s in schedules)):
        for run, schedule in zip(runs, schedules, strict=True):
            if look < len(schedule):
                track.enter(run.cell)
            if look < len(schedule) and _draw_chunk(source, run, schedule[look] - run.count(source), progress,
                                                    log_threshold):
                return run.cell.name, ([run.problem] if run.problem else []) + run.crossed
    for run in runs:
        while deadline is None or time.monotonic() < deadline:
            more = _shortfall(source, run, rate, config)
            if more <= 0:
                break
            track.enter(run.cell)
            track.extend(run.cell, more)
            if _draw_chunk(source, run, more, progress, log_threshold):
                return run.cell.name, ([run.problem] if run.problem else []) + run.crossed
    return None


def _sequential_note(stop, runs: list[_CellRun], source, m: int, m_seq: int, false_alarm_rate: float) -> str:
    from harness.stats.sequential import crossing_log_threshold

    used = sum(run.count(source) for run in runs)
    planned = sum(run.planned for run in runs) or 1
    head = (f"sequential: {m_seq} e-processes + {m - m_seq} fixed-n tests, one family at {false_alarm_rate:g}; "
            f"crossing at log e >= {crossing_log_threshold(m, false_alarm_rate):.2f}; ")
    if m_seq == 0:
        head += "this level has no anytime-valid tests, so the fixed-n plan decides; "
    if stop is None:
        return head + f"no crossing: all {planned} planned rows drawn, Holm over all {m} tests decided"
    case, reasons = stop
    return head + (f"stopped in case {case} after {used} of {planned} planned rows ({used / planned:.2%}): "
                   + "; ".join(reasons))


def _run_checks(cell: Cell, trials, rate: float, power: float, report: CheckReport) -> None:
    for check in cell.checks:
        results = check.run(cell, trials, rate, power)
        if check.gating:
            declared = check.tests(cell)
            if len(results) != declared:
                raise AssertionError(f"check {check.name} on {cell.name} declared {declared} gating tests but "
                                     f"emitted {len(results)}: the Holm plan would be wrong")
            report.tests += results
            cell.results += results
        else:
            report.advisories += results


