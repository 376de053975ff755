"""The sampler level's cases (docs/CONTRACT.md §1a): what a case is, the catalogue and its selection, each case's
plan (its laws, the reach of every position, the tested positions) and the trials a cell holds, with the views by
law that the tests read (`law_rows`, `subplans`, `tokens_of`).

The catalogue itself is policy (suites/catalogues/sampler.py, loaded through harness.policy); the tests of a case are
in harness.check.sampler_tests and harness.check.sampler_tail, the trial source that draws its rows in
harness.check.sampler_source.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable

import numpy as np

from harness.check.config import MIN_REACH
from harness.check.driver import Cell, select
from harness.errors import HarnessError
from harness.policy import catalogue
from harness.stats import nucleus_mask_top_p


@dataclasses.dataclass
class SamplerTrials:
    """Trials of one sampler cell. `law[b]` is the law row b held, returned by the source with the row (a
    top-up draw continues the cycle; nothing re-derives the law from the row's index)."""

    tokens: np.ndarray  # [rows, γ+1] emitted, -1 padded
    law: np.ndarray  # [rows] law index
    drafts: np.ndarray | None = None  # [rows, γ] drafts the implementation drew (draft-and-verify step)

    def __len__(self) -> int:
        return len(self.tokens)

    @staticmethod
    def join(parts: list[SamplerTrials]) -> SamplerTrials:
        drafts = None if any(p.drafts is None for p in parts) else np.concatenate([p.drafts for p in parts])
        return SamplerTrials(np.concatenate([p.tokens for p in parts]), np.concatenate([p.law for p in parts]),
                             drafts)


MAX_CELLS = 32  # omnibus tests see the 31 likeliest tokens + "the rest": df ≤ 31 keeps n affordable


@dataclasses.dataclass(frozen=True)
class SamplerCase:
    name: str
    gamma: int
    vocab: int
    build: Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]  # -> p [γ+1, V], q [γ, V]
    description: str
    tv: float | None = None  # planned detectable TV for this case (None: the suite's)
    laws: int = 1  # > 1: build returns p [R, γ+1, V], q [R, γ, V] and row b holds law b mod R


def _norm(x: np.ndarray) -> np.ndarray:
    return x / x.sum(axis=-1, keepdims=True)


def default_cases() -> list[SamplerCase]:
    """The policy's sampler catalogue (suites/catalogues/sampler.py), in its run order."""
    return list(catalogue("sampler").CASES)


def opt_in_cases() -> list[SamplerCase]:
    """Cases selectable by name (`--cases`) that the default plan does not run (suites/catalogues/sampler.py
    `OPT_IN_CASES`: the deep-tail probes)."""
    return list(getattr(catalogue("sampler"), "OPT_IN_CASES", []))


def case_names() -> list[str]:
    return [c.name for c in default_cases()]


@dataclasses.dataclass
class CasePlan:
    case: SamplerCase
    p: np.ndarray  # [γ+1, V]
    q: np.ndarray  # [γ, V]
    alphas: np.ndarray  # [γ] Σ min(p_j, q_j)
    reach: np.ndarray  # [γ+1] P(reach j) for the optimal rule
    tested: list[int]  # positions with P(reach j) ≥ MIN_REACH
    rows: int = 0


def plan_cases(cases: list[SamplerCase], seed: int) -> list[CasePlan]:
    plans = []
    for case in cases:
        if case.laws > 1:  # rows holding different laws: their first law (the driver plans every law: plan_mixed)
            plans.append(plan_mixed(case, seed)[0])
            continue
        p, q = case.build(np.random.default_rng([seed, zlib.crc32(case.name.encode())]))  # stable per case
        alphas = np.minimum(p[:-1], q).sum(-1)
        reach = np.concatenate([[1.0], np.cumprod(alphas)])
        tested = [j for j in range(case.gamma + 1) if reach[j] >= MIN_REACH]
        plans.append(CasePlan(case, p, q, alphas, reach, tested))
    return plans


def plan_mixed(case: SamplerCase, seed: int) -> list[CasePlan]:
    """One CasePlan per law of a case whose rows hold different laws."""
    p, q = case.build(np.random.default_rng([seed, zlib.crc32(case.name.encode())]))
    return [plan_cases([SamplerCase(case.name, case.gamma, case.vocab, lambda rng, r=r: (p[r], q[r]),
                                     case.description, case.tv)], seed)[0] for r in range(case.laws)]


def tests_per_position(p_row: np.ndarray) -> int:
    return 4 + int(np.any(p_row[~nucleus_mask_top_p(p_row)] > 0))


def coarsen(counts: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts and p on MAX_CELLS cells: the MAX_CELLS − 1 likeliest tokens, then all others together."""
    if len(p) <= MAX_CELLS:
        return counts, p
    order = np.argsort(-p, kind="stable")
    head, tail = order[: MAX_CELLS - 1], order[MAX_CELLS - 1 :]
    return (np.append(counts[head], counts[tail].sum()), np.append(p[head], p[tail].sum()))


def select_cases(cases: list[str | SamplerCase] | None) -> list[SamplerCase]:
    """Case names (from the catalogue, opt-in cases included; "default" = the default plan's cases) or
    SamplerCase objects (e.g. `custom_case`); None: the default catalogue."""
    if not cases:
        return default_cases()
    if "default" in cases:  # expanded in place: the order given is the run order
        i = cases.index("default")
        cases = [*cases[:i], *case_names(), *[c for c in cases[i + 1:] if c != "default"]]
    return select(cases, default_cases() + opt_in_cases(), "sampler case")


def custom_case(name: str, p: np.ndarray, q: np.ndarray, description: str = "", tv: float | None = None) -> SamplerCase:
    """A configuration from explicit laws: p [γ+1, V] (target per position), q [γ, V] (draft)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.ndim != 2 or q.ndim != 2 or p.shape[0] != q.shape[0] + 1 or p.shape[1] != q.shape[1]:
        raise HarnessError(f"custom case {name!r}: need p [γ+1, V] and q [γ, V], got {p.shape} and {q.shape}")
    return SamplerCase(name, q.shape[0], q.shape[1], lambda rng: (_norm(p), _norm(q)), description or name, tv)


def tokens_of(trials) -> np.ndarray:
    """The emitted tokens [rows, γ+1] of a cell's trials (SamplerTrials, or a bare array of one-law rows)."""
    return trials.tokens if isinstance(trials, SamplerTrials) else trials


def laws_of(trials) -> np.ndarray:
    return trials.law if isinstance(trials, SamplerTrials) else np.zeros(len(trials), dtype=np.int64)


def law_rows(cell: Cell, trials) -> list[tuple[str, CasePlan, np.ndarray]]:
    """(test-name prefix, plan, row mask) per law of the cell, the rows chosen by the law label each row
    carries (returned by the source with the trials, never re-derived from a row index)."""
    plans = subplans(cell)
    if len(plans) == 1:  # every row holds the one law: a view of all rows, no copy
        return [(cell.name, plans[0], slice(None))]
    law = laws_of(trials)
    return [(f"{cell.name}/law{r}", plan, law == r) for r, plan in enumerate(plans)]


def subplans(cell: Cell) -> list[CasePlan]:
    """The laws of a cell: one plan for a case whose rows share laws; one per law of a mixed case."""
    return cell.data if isinstance(cell.data, list) else [cell.data]
