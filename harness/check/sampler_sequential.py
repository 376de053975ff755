"""The sampler battery's anytime-valid tests (the driver's sequential mode, harness.check.sequential): the
e-processes of one law and the monitors that feed them a cell's rows, one per law."""

from __future__ import annotations

import numpy as np

from harness.check.driver import Cell
from harness.check.sampler_cases import CasePlan, coarsen, law_rows, laws_of, tokens_of
from harness.check.sampler_tests import acceptance_positions
from harness.check.streams import numpy_rng
from harness.stats import nucleus_mask_top_p, pit_from_masses


def mass_above(p: np.ndarray) -> np.ndarray:
    """F(y−) in surprisal order for every token y of one law p (V,): the mass of likelier tokens (ties:
    lower ids first), the same order as harness.stats.mass_above_descending, computed once per law."""
    order = np.argsort(-p, kind="stable")
    out = np.empty_like(p)
    out[order] = np.cumsum(p[order]) - p[order]
    return out


def law_processes(plan: CasePlan, prefix: str) -> dict:
    """The e-processes of one law (harness.stats.sequential), by test name:

    - per tested position j: a Dirichlet–multinomial e-process on the same ≤ 32-cell coarsening the
      omnibus tests use, and one on "inside / outside the 99 % nucleus" (the tail a coarsening hides);
    - per position reached with probability ≥ MIN_REACH: P(accept draft j | reach j) ≤ Σ min(p_j, q_j);
    - rows independent: the randomized PIT of each row's first token (exactly U(0, 1) and iid under H0
      for any lossless rule) bet on given the previous row's."""
    from harness.stats.sequential import BernoulliAboveEProcess, CategoricalEProcess, SerialEProcess

    out = {}
    for j in plan.tested:
        pj = plan.p[j]
        out[f"{prefix}/pos{j}/seq_categorical"] = CategoricalEProcess(coarsen(np.zeros(len(pj)), pj)[1])
        outside = float(pj[~nucleus_mask_top_p(pj)].sum())
        if outside > 0:
            out[f"{prefix}/pos{j}/seq_outside_nucleus"] = CategoricalEProcess(np.array([1.0 - outside, outside]))
    for j in acceptance_positions(plan):
        out[f"{prefix}/accept{j}/seq_above_optimal"] = BernoulliAboveEProcess(min(1.0, float(plan.alphas[j])))
    out[f"{prefix}/seq_rows_independent"] = SerialEProcess()
    return out


class LawMonitor:
    """The e-processes of one law of a cell, fed the rows that carry that law's label."""

    def __init__(self, plan: CasePlan, prefix: str, law: int, rng: np.random.Generator):
        self.plan, self.prefix, self.law, self.rng = plan, prefix, law, rng
        self.processes = law_processes(plan, prefix)
        self.first_mass_above = mass_above(plan.p[0])
        self.outside = {j: ~nucleus_mask_top_p(plan.p[j]) for j in plan.tested}

    def update(self, trials) -> list[str]:
        plan, prefix = self.plan, self.prefix
        tokens = tokens_of(trials)[laws_of(trials) == self.law]
        if not len(tokens):
            return []
        problems = []
        n_emitted = (tokens >= 0).sum(1)
        for j in plan.tested:
            counts = np.bincount(tokens[n_emitted >= j + 1, j], minlength=plan.case.vocab)
            off = int(counts[plan.p[j] == 0].sum())
            if off:
                problems.append(f"{prefix} position {j}: {off} tokens where p = 0 (support)")
            self.processes[f"{prefix}/pos{j}/seq_categorical"].update(coarsen(counts, plan.p[j])[0])
            tail = self.processes.get(f"{prefix}/pos{j}/seq_outside_nucleus")
            if tail is not None:
                outside = int(counts[self.outside[j]].sum())
                tail.update(np.array([counts.sum() - outside, outside]))
        for j in acceptance_positions(plan):
            self.processes[f"{prefix}/accept{j}/seq_above_optimal"].update(
                (int((n_emitted >= j + 2).sum()), int((n_emitted >= j + 1).sum())))
        first = tokens[:, 0]
        u = pit_from_masses(self.first_mass_above[first], plan.p[0][first], self.rng)
        self.processes[f"{prefix}/seq_rows_independent"].update(u)
        return problems


def cell_monitors(cell: Cell, seed: int) -> list[LawMonitor]:
    """One monitor per law of a sampler cell (multi-law cells keep every law)."""
    return [LawMonitor(plan, prefix, r, numpy_rng(seed, "pit", cell.name, r))
            for r, (prefix, plan, _) in enumerate(law_rows(cell, np.zeros((0, 1), dtype=np.int64)))]
