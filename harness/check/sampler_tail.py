"""The sampler battery's deep-tail probe (issue 46): errors of the random-number resolution, invisible to a TV plan.

Per tested position whose deep tail (tokens at most 2^-20 of the top probability) holds enough mass, an exact
binomial test of the number of deep-tail tokens emitted; the check `TAIL_PROBE` of the battery
(harness.check.sampler_tests.SAMPLER_BATTERY) and the rows it plans (a deficit of TAIL_PLAN_DEFICIT of the
deep-tail mass detected at --power).
"""

from __future__ import annotations

import math

import numpy as np

from harness.check.driver import Cell, Check
from harness.check.sampler_cases import CasePlan, law_rows, subplans, tokens_of
from harness.stats import TestResult, binomial_event_test, samples_needed_binomial

# A token whose probability is at most TAIL_RATIO of the position's top probability is in the deep tail: a
# sampler whose uniforms, exponentials or running sums resolve ~24 bits (fp32 uniforms, an exponential race
# floored at 2^-24, a float32 cumsum) loses or inflates it; float64 resolves 2^-53.
TAIL_RATIO = 2.0 ** -20
TAIL_MIN_MASS = 1e-5  # positions whose deep tail holds less than this get no tail test (no power anyway)
# The plan: rows so that a deficit of this fraction of the deep-tail mass is detected at --power (normal
# approximation of the exact binomial test; the exact power is in results/tail/README.md).
TAIL_PLAN_DEFICIT = 0.9


def deep_tail(p_row: np.ndarray) -> np.ndarray:
    """Boolean mask of the deep tail of one law: 0 < p(y) ≤ TAIL_RATIO · max p."""
    return (p_row > 0) & (p_row <= TAIL_RATIO * p_row.max())


def tail_positions(plan: CasePlan) -> list[int]:
    return [j for j in plan.tested if plan.p[j][deep_tail(plan.p[j])].sum() >= TAIL_MIN_MASS]


def _tail_tests(tokens: np.ndarray, plan: CasePlan, rate: float, power: float, prefix: str) -> list[TestResult]:
    """Exact two-sided binomial test per position: the count of deep-tail tokens among the rows that reached j
    ~ Bin(reached, p_j(deep tail)) for any lossless rule (residual and bonus draws alike)."""
    n_emitted = (tokens >= 0).sum(1)
    out = []
    for j in tail_positions(plan):
        col = tokens[n_emitted >= j + 1, j]
        mask = deep_tail(plan.p[j])
        hits = int(mask[col[(col >= 0) & (col < plan.case.vocab)]].sum())
        mass = float(plan.p[j][mask].sum())
        t = binomial_event_test(hits, len(col), mass, f"{prefix}/pos{j}/deep_tail", rate=rate, power=power)
        t.details.update({"expected": mass * len(col), "tail_tokens": int(mask.sum()), "tail_ratio": TAIL_RATIO,
                          "detectable_deficit": (t.detectable_tv or math.inf) / mass,
                          "message": f"{hits} deep-tail tokens where {mass * len(col):.1f} were expected "
                                     f"({int(mask.sum())} tokens each ≤ 2^-20 of the top probability)"})
        out.append(t)
    return out


def _tail_need(plan: CasePlan, j: int, rate: float, power: float) -> int:
    mass = float(plan.p[j][deep_tail(plan.p[j])].sum())
    return samples_needed_binomial(mass, mass * (1 - TAIL_PLAN_DEFICIT), rate, power)


def _tail_samples(cell: Cell, tv: float, rate: float, power: float) -> int:
    plans = subplans(cell)
    need = [_tail_need(plan, j, rate, power) / plan.reach[j] for plan in plans for j in tail_positions(plan)]
    return int(math.ceil(1.05 * max(need) * len(plans))) if need else 0


def _tail_run(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    return [t for prefix, plan, rows in law_rows(cell, trials)
            for t in _tail_tests(tokens_of(trials)[rows], plan, rate, power, prefix)]


TAIL_PROBE = Check("deep_tail", lambda cell: sum(len(tail_positions(p)) for p in subplans(cell)), _tail_run,
                   _tail_samples)
