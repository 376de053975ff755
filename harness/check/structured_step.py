"""Sampler level under a constraint: one verification step that receives the allowed-token mask per position.

Contract of the step variant (the reference: `specdec_ref.adapters:verify_masked`):

    verify_masked(target_probs [B, γ+1, V], draft_probs [B, γ, V], draft_tokens [B, γ],
                  allowed [B, γ+1, V] bool, generator) -> tokens [B, γ+1] int64, −1 padded

p and q are the unconstrained laws; allowed[b, i] is the automaton's mask in the state after row b's first
i drafts (so the mask changes inside the block); the drafts were drawn from norm(q · allowed). A lossless
step masks p and q alike at every position and applies Algorithm 1: the token emitted at position j, given
j is reached, follows norm(p_j · allowed_j).

The harness draws the automaton: a random DFA over the V tokens (`random_dfa`: every state allows a random
non-empty subset, each allowed token moves to a random state), so no model and no grammar library are
involved. Checks, on the driver (harness.check.driver.run_battery): the format of the output, the
constraint format (every emitted token allowed in its state), and the randomized PIT of every emitted token
under its masked law (iid U(0, 1) under H0), pooled and per position.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import torch

from harness.adapters.calling import call_impl
from harness.check.driver import Cell, Check, CheckConfig, MalformedTrials, TrialSource, run_battery
from harness.check.report import CheckReport, deterministic_result
from harness.check.sampler_source import padded_rows_problems
from harness.check.sampler_tests import GATE_MIN_EXPECTED
from harness.policy import catalogue
from harness.stats import mass_above_descending, per_position_uniformity, pit_from_masses, uniformity_test

DEFAULT_ROWS = 20_000


@dataclasses.dataclass
class Dfa:
    """allowed [S, V] bool, step [S, V] int (next state; -1 where not allowed); start state 0."""

    allowed: np.ndarray
    step: np.ndarray

    def states(self, tokens: np.ndarray) -> np.ndarray:
        """tokens [N, L] (−1 padded) -> the state before each position [N, L] (−1 after a disallowed token)."""
        N, L = tokens.shape
        out = np.full((N, L), -1, dtype=np.int64)
        s = np.zeros(N, dtype=np.int64)
        for j in range(L):
            out[:, j] = s
            t = tokens[:, j]
            ok = (s >= 0) & (t >= 0)
            nxt = np.full(N, -1, dtype=np.int64)
            nxt[ok] = self.step[s[ok], t[ok]]
            s = nxt
        return out


def random_dfa(states: int, vocab: int, density: float, rng: np.random.Generator) -> Dfa:
    """Every state allows each token with probability `density` (at least one), moving to a random state."""
    allowed = rng.random((states, vocab)) < density
    allowed[np.arange(states), rng.integers(0, vocab, states)] = True
    step = np.where(allowed, rng.integers(0, states, (states, vocab)), -1)
    return Dfa(allowed, step)


@dataclasses.dataclass(frozen=True)
class ConstrainedCase:
    name: str
    gamma: int
    vocab: int
    states: int
    density: float
    description: str


def default_cases() -> tuple[ConstrainedCase, ...]:
    """The policy's masked-step catalogue (suites/catalogues/structured_step.py)."""
    return tuple(catalogue("structured_step").CASES)


@dataclasses.dataclass
class CasePlan:
    case: ConstrainedCase
    p: np.ndarray  # [γ+1, V] unconstrained target laws
    q: np.ndarray  # [γ, V] unconstrained draft laws (full support)
    dfa: Dfa


def _plan(case: ConstrainedCase, seed: int) -> CasePlan:
    rng = np.random.default_rng([seed, case.vocab, case.states])
    p = rng.dirichlet(np.full(case.vocab, 0.5), case.gamma + 1)
    q = 0.5 * rng.dirichlet(np.full(case.vocab, 0.5), case.gamma) + 0.5 * p[:-1]
    return CasePlan(case, p, q, random_dfa(case.states, case.vocab, case.density, rng))


def masked(law: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    m = law * allowed
    return m / m.sum(-1, keepdims=True)


def draw_inputs(plan: CasePlan, rows: int, generator: torch.Generator):
    """(p [B, γ+1, V], q [B, γ, V], drafts [B, γ], allowed [B, γ+1, V]) with drafts ~ norm(q · allowed)."""
    g, V = plan.case.gamma, plan.case.vocab
    state = np.zeros(rows, dtype=np.int64)
    drafts = np.zeros((rows, g), dtype=np.int64)
    allowed = np.zeros((rows, g + 1, V), dtype=bool)
    u = torch.rand(rows, g, generator=generator, dtype=torch.float64).numpy()
    for i in range(g):
        allowed[:, i] = plan.dfa.allowed[state]
        law = masked(plan.q[i][None, :], allowed[:, i])
        drafts[:, i] = np.minimum((law.cumsum(-1) < u[:, i : i + 1]).sum(-1), V - 1)
        state = plan.dfa.step[state, drafts[:, i]]
    allowed[:, g] = plan.dfa.allowed[state]
    p = torch.from_numpy(np.broadcast_to(plan.p, (rows, g + 1, V)).copy()).float()
    q = torch.from_numpy(np.broadcast_to(plan.q, (rows, g, V)).copy()).float()
    return p, q, torch.from_numpy(drafts), torch.from_numpy(allowed)


def _format_run(cell: Cell, trials, rate: float, power: float):
    plan, tokens = cell.data, trials
    states = plan.dfa.states(tokens)
    valid = tokens >= 0
    ok = np.ones_like(valid)
    ok[valid] = (states[valid] >= 0) & plan.dfa.allowed[np.maximum(states[valid], 0), tokens[valid]]
    bad = np.argwhere(~ok)
    message = ""
    if len(bad):
        r, j = bad[0]
        message = (f"{len(np.unique(bad[:, 0]))} rows emit a token the automaton does not allow; first: row {r}, "
                   f"position {j}, token {tokens[r, j]} (state {states[r, j]})")
    return [deterministic_result(f"{cell.name}/constraint_format", not len(bad), n=len(tokens), message=message)]


def _pit_run(cell: Cell, trials, rate: float, power: float):
    plan, tokens = cell.data, trials
    states = plan.dfa.states(tokens)
    rows, pos = np.nonzero((tokens >= 0) & (states >= 0))
    laws = masked(plan.p[pos], plan.dfa.allowed[states[rows, pos]])
    y = tokens[rows, pos]
    p_y = laws[np.arange(len(y)), y]
    u = pit_from_masses(mass_above_descending(laws, y), p_y, np.random.default_rng(cell.summary["seed"]))
    out = [uniformity_test(u, f"{cell.name}/masked_pit_uniform", rate=rate, power=power,
                           min_expected=GATE_MIN_EXPECTED)]
    per = per_position_uniformity(u, pos, prefix=f"{cell.name}/masked_pit_uniform", rate=rate, power=power)
    out += per + [deterministic_result(f"{cell.name}/masked_pit_uniform/pos{j}", True, n=0)
                  for j in range(plan.case.gamma + 1) if j not in set(pos.tolist())]
    return out


def _rows_for(cell: Cell, tv: float, rate: float, power: float) -> int:
    """Rows for a detectable TV (pooled PIT, 20 bins); DEFAULT_ROWS when no TV is asked."""
    if not math.isfinite(tv):
        return DEFAULT_ROWS
    from harness.stats.power import samples_needed

    return max(DEFAULT_ROWS, samples_needed(tv, 19, rate, power))


CONSTRAINT_FORMAT = Check("constraint_format", lambda cell: 1, _format_run)
MASKED_PIT = Check("masked_pit", lambda cell: 2 + cell.data.case.gamma, _pit_run, _rows_for)


class ConstrainedStepSource(TrialSource):
    """Trials of one masked verification step on harness-drawn automata."""

    level = "sampler"

    def __init__(self, impl: Callable, cases=None):
        self.impl, self.cases = impl, default_cases() if cases is None else cases

    def cells(self, config: CheckConfig) -> list[Cell]:
        self.generator = torch.Generator().manual_seed(config.seed)
        return [Cell(case.name, [CONSTRAINT_FORMAT, MASKED_PIT], _plan(case, config.seed), config.tv,
                     {"description": case.description, "gamma": case.gamma, "vocab": case.vocab,
                      "states": case.states, "seed": config.seed})
                for case in self.cases]

    def draw(self, cell: Cell, n: int, progress):
        plan = cell.data
        p, q, x, allowed = draw_inputs(plan, n, self.generator)
        out = call_impl(self.impl, p, q, x, allowed, self.generator, what=f"case {cell.name}")
        problems, tokens = padded_rows_problems(out, n, plan.case.gamma + 1, plan.case.vocab, "[B, γ+1]")
        if tokens is not None and not problems:
            n_out = (tokens >= 0).sum(1)
            kept = np.arange(plan.case.gamma)[None, :] < (n_out - 1)[:, None]
            if (kept & (tokens[:, :-1] != x.numpy())).any():
                problems.append("accepted tokens differ from the drafts (the first n − 1 emitted must be drafts)")
        if problems:
            exc = MalformedTrials("; ".join(problems))
            exc.trials = tokens
            raise exc
        if progress:
            progress(n)
        return tokens

    def finish(self, report: CheckReport, config: CheckConfig) -> None:
        report.notes.append("masked step: drafts ~ norm(q · allowed); ground truth norm(p · allowed) per position "
                            "in the automaton's state after the emitted prefix (random DFAs drawn by the harness)")


def run_constrained_step_check(impl: Callable, config: CheckConfig | None = None, *, impl_name: str = "impl",
                               cases=None, **fields) -> CheckReport:
    """The masked verify step against the harness's random automata (`cases`: automaton cases, default the
    catalogue's). `config` (or `fields` of CheckConfig) says how; without a config every default is
    CheckConfig's except the plan: DEFAULT_ROWS rows per case (no TV is planned: the automata's laws differ
    case by case)."""
    base = {"level": "sampler", "step": "masked", "samples": DEFAULT_ROWS, "tv": math.nan}
    config = CheckConfig.build(config, **fields) if config is not None else CheckConfig(**{**base, **fields})
    return run_battery(ConstrainedStepSource(impl, cases), config, impl_name=impl_name)
