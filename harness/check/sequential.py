"""Sequential (anytime-valid) mode of the sampler-level check: stop as soon as the verdict is certain.

The fixed-n check (harness.check.sampler) draws every planned row before it looks. Here the rows of
all cases are drawn in rounds, each case advancing to the same growing fraction of its plan
(1/1000 of it first, then ×`growth` per round), and after every chunk a battery of test
martingales (harness.stats.sequential) is updated:

- per tested position j: a Dirichlet–multinomial e-process on the same ≤ 32-cell coarsening the
  omnibus tests use, and one on the two cells "inside / outside the 99 % nucleus" (the tail a
  coarsening hides); tokens where p_j = 0 fail at once (support);
- per position reached with probability ≥ MIN_REACH: P(accept draft j | reach j) ≤ Σ min(p_j, q_j);
- rows independent: the randomized PIT of each row's first token (exactly U(0, 1) and iid under H0
  for any lossless rule) bet on given the previous row's;
- format problems fail at once.

One family of M = (fixed-n gating tests) + (e-processes) tests shares the false-alarm rate α. A run
stops at the first e-process with log e ≥ log(M/α) (Ville + Bonferroni: ≤ α/M per process under any
monitoring), or at a deterministic failure. Otherwise it reaches the planned rows, and Holm at α over
all M tests decides: the fixed-n tests as today (planned at the per-test level α/M, so the stated
detectable TV holds) together with the e-processes' anytime p-values 1/sup e, which are valid
p-values at any stopping time. Every test's p-value is valid whenever the run stops, so the
family-wise false-alarm rate stays ≤ α under this optional stopping.

`python -m harness.check.sequential --calibrate --power --out results/sequential` measures false
alarms of the reference under continuous monitoring and samples-to-verdict of every sampler mutant.
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from collections.abc import Callable

import numpy as np
import torch

from harness.check.report import CheckReport, deterministic_result
from harness.check.sampler import (
    MIN_REACH,
    CasePlan,
    _coarsen,
    _plan_cases,
    _reproducibility,
    _select,
    add_case_results,
    chunk_rows,
    count_gating_tests,
    plan_rows,
    run_chunk,
)
from harness.stats import nucleus_mask_top_p, pit_from_masses
from harness.stats.sequential import (
    BernoulliAboveEProcess,
    CategoricalEProcess,
    EProcess,
    SerialEProcess,
    crossing_log_threshold,
    eprocess_result,
)

FIRST_FRACTION = 1e-3  # the first look comes after this fraction of every case's plan
GROWTH = 1.15  # looks at fractions FIRST_FRACTION·GROWTH^r: ≤ 15 % more rows than the crossing needed


def mass_above(p: np.ndarray) -> np.ndarray:
    """F(y−) in surprisal order for every token y of one law p (V,): the mass of likelier tokens (ties:
    lower ids first), the same order as harness.stats.mass_above_descending, computed once per law."""
    order = np.argsort(-p, kind="stable")
    out = np.empty_like(p)
    out[order] = np.cumsum(p[order]) - p[order]
    return out


@dataclasses.dataclass
class CaseMonitor:
    """The e-processes of one case and the rows drawn so far."""

    plan: CasePlan
    processes: dict[str, EProcess]
    pit_rng: np.random.Generator
    first_mass_above: np.ndarray  # [V] F(y−) of p_0
    outside: dict[int, np.ndarray]  # position -> [V] mask of the tokens outside p_j's 99 % nucleus
    outputs: list[np.ndarray] = dataclasses.field(default_factory=list)
    rows: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)  # format or support: fails at once

    def update(self, tokens: np.ndarray) -> None:
        """Feed one chunk of well-formed outputs [rows, γ+1] to every process."""
        plan, prefix = self.plan, self.plan.case.name
        self.outputs.append(tokens)
        self.rows += len(tokens)
        n_emitted = (tokens >= 0).sum(1)
        for j in plan.tested:
            counts = np.bincount(tokens[n_emitted >= j + 1, j], minlength=plan.case.vocab)
            off = int(counts[plan.p[j] == 0].sum())
            if off:
                self.problems.append(f"position {j}: {off} tokens where p = 0 (support)")
            self.processes[f"{prefix}/pos{j}/seq_categorical"].update(_coarsen(counts, plan.p[j])[0])
            tail = self.processes.get(f"{prefix}/pos{j}/seq_outside_nucleus")
            if tail is not None:
                outside = int(counts[self.outside[j]].sum())
                tail.update(np.array([counts.sum() - outside, outside]))
        for j in _accept_positions(plan):
            self.processes[f"{prefix}/accept{j}/seq_above_optimal"].update(
                (int((n_emitted >= j + 2).sum()), int((n_emitted >= j + 1).sum())))
        first = tokens[:, 0]
        u = pit_from_masses(self.first_mass_above[first], plan.p[0][first], self.pit_rng)
        self.processes[f"{prefix}/seq_rows_independent"].update(u)

    def tokens(self) -> np.ndarray:
        return np.concatenate(self.outputs)


def _accept_positions(plan: CasePlan) -> list[int]:
    return [j for j in range(plan.case.gamma) if plan.reach[j] >= MIN_REACH]


def case_processes(plan: CasePlan) -> dict[str, EProcess]:
    """The sequential battery of one case, by test name (see the module docstring)."""
    prefix = plan.case.name
    out: dict[str, EProcess] = {}
    for j in plan.tested:
        pj = plan.p[j]
        out[f"{prefix}/pos{j}/seq_categorical"] = CategoricalEProcess(_coarsen(np.zeros(len(pj)), pj)[1])
        outside = float(pj[~nucleus_mask_top_p(pj)].sum())
        if outside > 0:
            out[f"{prefix}/pos{j}/seq_outside_nucleus"] = CategoricalEProcess(np.array([1.0 - outside, outside]))
    for j in _accept_positions(plan):
        out[f"{prefix}/accept{j}/seq_above_optimal"] = BernoulliAboveEProcess(min(1.0, float(plan.alphas[j])))
    out[f"{prefix}/seq_rows_independent"] = SerialEProcess()
    return out


def count_sequential_tests(plans: list[CasePlan]) -> int:
    """How many e-processes `run_sampler_check_sequential` monitors for these plans."""
    return sum(len(case_processes(plan)) for plan in plans)


def family_size(cases: list | None, seed: int) -> int:
    """M: the e-processes plus the fixed-n gating tests that share the false-alarm rate."""
    plans = _plan_cases(_select(cases), seed)
    return count_sequential_tests(plans) + count_gating_tests(plans)


def _monitor(plan: CasePlan, seed: int) -> CaseMonitor:
    rng = np.random.default_rng([seed, zlib.crc32(plan.case.name.encode()), 7])  # the PIT's own randomness
    outside = {j: ~nucleus_mask_top_p(plan.p[j]) for j in plan.tested}
    return CaseMonitor(plan, case_processes(plan), rng, mass_above(plan.p[0]), outside)


def _schedule(rows: int, first_fraction: float, growth: float) -> list[int]:
    """Cumulative row counts of the looks for a case planned at `rows` (strictly increasing, ends at rows)."""
    looks, fraction = [], first_fraction
    while True:
        target = min(rows, max(1, math.ceil(rows * fraction)))
        if not looks or target > looks[-1]:
            looks.append(target)
        if target >= rows:
            return looks
        fraction *= growth


def _crossed(monitor: CaseMonitor, log_threshold: float) -> list[str]:
    return [name for name, proc in monitor.processes.items() if proc.max_log_e >= log_threshold]


def run_sampler_check_sequential(
    impl: Callable,
    *,
    impl_name: str = "impl",
    false_alarm_rate: float = 1e-3,
    tv: float = 0.02,
    power: float = 0.99,
    seed: int = 0,
    cases: list | None = None,
    max_rows: int = 400_000,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    progress: Callable[[int], None] | None = None,
    first_fraction: float = FIRST_FRACTION,
    growth: float = GROWTH,
) -> CheckReport:
    """Sampler-level check with anytime-valid early stopping; same arguments as `run_sampler_check`.

    Each case summary gets `planned_rows` and `rows` (drawn); `report.samples` is the total drawn.
    """
    started = time.perf_counter()
    plans = _plan_cases(_select(cases), seed)
    m_seq = count_sequential_tests(plans)
    family = count_gating_tests(plans) + m_seq
    plan_rows(plans, tv=tv, alpha=false_alarm_rate, power=power, max_rows=max_rows, extra_tests=m_seq)
    log_threshold = crossing_log_threshold(family, false_alarm_rate)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    monitors = [_monitor(plan, seed) for plan in plans]
    schedules = [_schedule(plan.rows, first_fraction, growth) for plan in plans]
    stop = None  # (case name, reasons)
    for look in range(max(len(s) for s in schedules)):
        for monitor, schedule in zip(monitors, schedules, strict=True):
            if look < len(schedule) and stop is None:
                stop = _advance(impl, monitor, schedule[look], generator, dtype, device, progress, log_threshold)
        if stop is not None:
            break
    report = CheckReport(impl_name, "sampler", false_alarm_rate, tv, power, seed, device=device, declared_tests=family)
    level = false_alarm_rate / family
    if stop is None:  # planned rows reached: the fixed-n battery decides, with the e-processes, by Holm
        for monitor in monitors:
            add_case_results(report, monitor.plan, monitor.tokens(), [], monitor.rows, level, power)
    else:
        for monitor in monitors:
            _add_stopped_case(report, monitor)
    _add_sequential(report, monitors, plans)
    report.advisories.append(_reproducibility(impl, plans[0], seed, dtype, device))
    report.notes.append(_note(stop, monitors, family, m_seq, false_alarm_rate, log_threshold))
    report.seconds = time.perf_counter() - started
    if stop is None:
        return report.decide()
    # Stopped early: the family still has M members (those not run count as p = 1), so a test is
    # rejected at the first Holm step's level α/M — what a crossing means.
    report.tests = [dataclasses.replace(t, reject=t.p_value <= level) for t in report.tests]
    return report


def _advance(impl, monitor: CaseMonitor, target: int, generator, dtype, device, progress,
             log_threshold: float) -> tuple[str, list[str]] | None:
    """Draw rows until the case has `target`; returns why to stop (or None) after every chunk."""
    while monitor.rows < target:
        n = min(target - monitor.rows, chunk_rows(monitor.plan))
        tokens, problems = run_chunk(impl, monitor.plan, n, generator, dtype, device)
        if problems:
            monitor.problems += problems
            monitor.rows += n
            return monitor.plan.case.name, problems
        monitor.update(tokens)
        if progress:
            progress(n)
        crossed = _crossed(monitor, log_threshold)
        if monitor.problems or crossed:
            return monitor.plan.case.name, monitor.problems + crossed
    return None


def _add_stopped_case(report: CheckReport, monitor: CaseMonitor) -> None:
    prefix = monitor.plan.case.name
    format_problems = [p for p in monitor.problems if "(support)" not in p]
    support = [p for p in monitor.problems if "(support)" in p]
    report.tests.append(deterministic_result(f"{prefix}/format", not format_problems, n=monitor.rows,
                                             message="; ".join(format_problems)))
    report.tests.append(deterministic_result(f"{prefix}/support", not support, n=monitor.rows,
                                             message="; ".join(support)))
    report.samples += monitor.rows
    report.cases.append({"name": prefix, "description": monitor.plan.case.description,
                         "gamma": monitor.plan.case.gamma, "vocab": monitor.plan.case.vocab, "rows": monitor.rows,
                         "format_problems": format_problems})


def _add_sequential(report: CheckReport, monitors: list[CaseMonitor], plans: list[CasePlan]) -> None:
    for monitor, summary in zip(monitors, report.cases, strict=True):
        report.tests += [eprocess_result(proc, name) for name, proc in monitor.processes.items()]
        summary["planned_rows"] = monitor.plan.rows
        summary["rows_fraction_of_plan"] = monitor.rows / monitor.plan.rows


def _note(stop, monitors, family: int, m_seq: int, false_alarm_rate: float, log_threshold: float) -> str:
    used = sum(m.rows for m in monitors)
    planned = sum(m.plan.rows for m in monitors)
    head = (f"sequential: {m_seq} e-processes + {family - m_seq} fixed-n tests, one family at {false_alarm_rate:g}; "
            f"crossing at log e >= {log_threshold:.2f}; ")
    if stop is None:
        return head + f"no crossing: all {planned} planned rows drawn, Holm over all {family} tests decided"
    case, reasons = stop
    return head + (f"stopped in case {case} after {used} of {planned} planned rows ({used / planned:.2%}): "
                   + "; ".join(reasons))


def sequential_summary(report: CheckReport) -> dict:
    """Compact, picklable facts of one run: verdict, rows used and planned, smallest anytime p-value."""
    seq = [t for t in report.tests if t.details.get("anytime_valid")]
    return {"fail": report.verdict == "fail", "samples": report.samples,
            "planned": sum(c.get("planned_rows", 0) for c in report.cases),
            "min_anytime_p": min((t.p_value for t in seq), default=1.0),
            "seconds": report.seconds,
            "rejected": [t.name for t in report.tests if t.reject]}


if __name__ == "__main__":  # python -m harness.check.sequential --calibrate --power --out results/sequential
    from harness.check.sequential_study import main

    raise SystemExit(main())
