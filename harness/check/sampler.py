"""Sampler-level losslessness check (docs/CONTRACT.md §1a): one verification step, many trials.

For each configuration (p_j, q_j fixed per draft position j; the catalogue in suites/catalogues/sampler.py) the harness draws the
draft tokens x_j ~ q_j itself, calls `verify`, and tests what comes back:

- format: shape [B, γ+1], integer ids in [0, V), -1 padding only at the tail, n_b ≥ 1, and the
  first n_b − 1 emitted tokens are the drafts (accepted tokens are never altered);
- per position j, on the rows that reached j: the emitted token ~ p_j (support check; pooled
  Pearson and G on the likeliest tokens + the rest; top-1 and outside-the-99%-nucleus binomial
  tests) — Algorithm 1's emitted token at every position is distributed exactly as p_j;
- step lengths: P(first k drafts accepted) above the universal bound Σ min(Πp, Πq) is impossible for
  any lossless rule of any family (gating); below the token-level optimum Π Σ min(p_j, q_j) is
  lossless-but-wasteful (reported, not gating); the block-level optimum is reported beside both;
- independence across rows (rows are independent trials): rank correlation of consecutive rows'
  randomized PIT values of the first emitted token;
- reproducibility under the same seed (advisory).

Sample sizes come from the planner (harness.stats.power): every tested position gets enough rows
to detect TV ≥ ε at the requested power after Holm's correction over the whole suite.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Callable

import numpy as np
import torch

from harness.adapters.calling import ImplementationError, call_impl  # noqa: F401 - re-exported for callers
from harness.check.config import MIN_REACH
from harness.check.driver import (
    Cell,
    Check,
    CheckConfig,
    MalformedTrials,
    TrialSource,
    run_battery,
    select,
)
from harness.check.report import CheckReport, deterministic_result
from harness.check.streams import numpy_rng, seed_global, torch_generator
from harness.errors import HarnessError
from harness.policy import catalogue
from harness.progress import Step
from harness.stats import (
    TestResult,
    binomial_event_test,
    nucleus_mask_top_p,
    pit_from_masses,
    pooled_gtest,
    pooled_pearson,
    runs_test,
    samples_needed,
    samples_needed_binomial,
    support_check,
)
from harness.stats.bounds import acceptance_bound, block_acceptance, token_level_optimum


@dataclasses.dataclass(frozen=True)
class Streams:
    """The random streams of a sampler-level run (harness.check.streams): the harness draws the drafts on
    `drafts`, the implementation receives `impl`, and torch's global RNG is seeded on a third stream."""

    drafts: torch.Generator
    impl: torch.Generator

    @classmethod
    def of(cls, seed: int) -> Streams:
        seed_global(seed)
        return cls(torch_generator(seed, "drafts"), torch_generator(seed, "impl"))


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
# Cells expecting fewer draws are pooled before Pearson / G. The usual 5 keeps the χ² approximation
# honest at nominal rates, not at the ~1e-6 per-test rates a Holm family reaches: measured, one
# false alarm in 200 seeds of the reference (df 10, n = 389, p = 1.6e-6) with 5; 20 fixes the tail.
GATE_MIN_EXPECTED = 20.0
CHUNK_FLOATS = 4e6  # input floats per implementation call on CPU: (2γ+1)·V·rows ≤ this (see _run_case)
# The progress line's cost of one row (harness.progress.Step): its (2γ+1)·V input floats plus a fixed overhead,
# and for its tests (γ+1)·TEST_FLOATS. Fitted to the default plan's per-case times of the reference (draw and
# tests timed per case, this 2-core CPU under load, 2026-12-07): one row costs as much as about 240 input floats
# besides its inputs (the reference's per-row work, the format check); tests about 40 per position.
ROW_FLOATS = 240
TEST_FLOATS = 40


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
        if case.laws > 1:  # rows holding different laws: their first law (the driver plans every law: _plan_mixed)
            plans.append(_plan_mixed(case, seed)[0])
            continue
        p, q = case.build(np.random.default_rng([seed, zlib.crc32(case.name.encode())]))  # stable per case
        alphas = np.minimum(p[:-1], q).sum(-1)
        reach = np.concatenate([[1.0], np.cumprod(alphas)])
        tested = [j for j in range(case.gamma + 1) if reach[j] >= MIN_REACH]
        plans.append(CasePlan(case, p, q, alphas, reach, tested))
    return plans


def _plan_mixed(case: SamplerCase, seed: int) -> list[CasePlan]:
    """One CasePlan per law of a case whose rows hold different laws."""
    p, q = case.build(np.random.default_rng([seed, zlib.crc32(case.name.encode())]))
    return [plan_cases([SamplerCase(case.name, case.gamma, case.vocab, lambda rng, r=r: (p[r], q[r]),
                                     case.description, case.tv)], seed)[0] for r in range(case.laws)]


def tests_per_position(p_row: np.ndarray) -> int:
    return 4 + int(np.any(p_row[~nucleus_mask_top_p(p_row)] > 0))


def count_gating_tests(plans: list[CasePlan]) -> int:
    """Gating tests the fixed-n battery emits for these plans (exactly what `run_sampler_check` reports)."""
    m = 0
    for plan in plans:
        m += 2  # format + row independence
        m += sum(tests_per_position(plan.p[j]) for j in plan.tested)
        m += sum(1 for j in range(plan.case.gamma) if plan.reach[j] >= MIN_REACH)  # acceptance tests
        m += len(tail_positions(plan))  # deep-tail tests
    return m


def plan_rows(plans: list[CasePlan], *, tv: float, false_alarm_rate: float, power: float, max_rows: int,
              extra_tests: int = 0) -> int:
    """Set each plan's row count; returns the number of gating tests m used for the plan.

    `extra_tests`: gating tests another stage adds to the same Holm family (the sequential mode's
    e-processes); the plan is then made at the per-test rate false_alarm_rate / (m + extra_tests)."""
    m = count_gating_tests(plans)
    rate = false_alarm_rate / (m + extra_tests)
    for plan in plans:
        eps = plan.case.tv or tv
        # A one-token law (e.g. top-p 0.5 on V = 2) has df 0: nothing to test but its support; plan it as df 1.
        need = [samples_needed(eps, max(1, min(MAX_CELLS, int((plan.p[j] > 0).sum())) - 1), rate, power)
                / plan.reach[j] for j in plan.tested]
        # 5 % headroom: the number of rows that reach a position fluctuates around rows · P(reach)
        plan.rows = int(min(max_rows, math.ceil(1.05 * max(need))))
    return m


def coarsen(counts: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts and p on MAX_CELLS cells: the MAX_CELLS − 1 likeliest tokens, then all others together."""
    if len(p) <= MAX_CELLS:
        return counts, p
    order = np.argsort(-p, kind="stable")
    head, tail = order[: MAX_CELLS - 1], order[MAX_CELLS - 1 :]
    return (np.append(counts[head], counts[tail].sum()), np.append(p[head], p[tail].sum()))


def _draw_inputs(plan: CasePlan, rows: int, generator: torch.Generator, dtype: torch.dtype, device, *,
                 laws: tuple[torch.Tensor, torch.Tensor] | None = None, tokens: torch.Tensor | None = None,
                 out: tuple[torch.Tensor, torch.Tensor] | None = None):
    """One call's inputs: p [rows, γ+1, V], q [rows, γ, V] (every row the case's laws) and x [rows, γ].

    `laws` (p, q already in `dtype` on `device`), `tokens` (x drawn beforehand) and `out` (buffers of
    ≥ rows rows to refill) let a caller that makes many calls convert the laws once, draw all tokens in
    one go and reuse one allocation; without them everything is made here.
    """
    if laws is None:
        laws = (torch.from_numpy(plan.p).to(device, dtype), torch.from_numpy(plan.q).to(device, dtype))
    p, q = laws
    if tokens is None:
        tokens = _draw_tokens(q, rows, generator)
    # Built on the device (a copy of two small laws there, not of [rows, γ+1, V] across the bus), contiguous
    # and rewritten for every call: implementations may view their inputs, or write into them.
    if out is None:
        out = (p.new_empty((rows, *p.shape)), q.new_empty((rows, *q.shape)))
    target = out[0][:rows].copy_(p)  # [rows, γ+1, V]
    draft = out[1][:rows].copy_(q)  # [rows, γ, V]
    return target, draft, tokens.to(device)


def _draw_tokens(q: torch.Tensor, rows: int, generator: torch.Generator) -> torch.Tensor:  # q [γ, V] -> [rows, γ]
    """x_j ~ q_j (q as the implementation sees it, in its dtype), drawn by the harness itself on the CPU
    generator: rows independent, positions independent."""
    q = q.detach().to("cpu", torch.float64)
    return torch.stack([torch.multinomial(q[j], rows, replacement=True, generator=generator)
                        for j in range(q.shape[0])], dim=1)


def draw_mixed_inputs(plans: list[CasePlan], law: torch.Tensor, generator: torch.Generator,
                       dtype: torch.dtype, device):
    """Row b holds law `law[b]`: target [rows, γ+1, V], draft [rows, γ, V], x [rows, γ] (x drawn on `generator`)."""
    rows = len(law)
    p = torch.from_numpy(np.stack([plan.p for plan in plans])).to(dtype)[law]
    q = torch.from_numpy(np.stack([plan.q for plan in plans])).to(dtype)[law]
    u = torch.rand(rows, q.shape[1], 1, generator=generator, dtype=torch.float64)  # inverse-CDF draws of x ~ q
    x = (q.double().cumsum(-1) < u).sum(-1).clamp_max(q.shape[-1] - 1)
    return p.to(device), q.to(device), x.to(device)


def law_cycle(n: int, laws: int, offset: int) -> torch.Tensor:
    """Law index of n new rows of a case with `laws` laws, continuing the cycle after `offset` earlier rows."""
    return (torch.arange(n) + offset) % laws


def _run_mixed_case(impl, plans: list[CasePlan], n: int, offset: int, streams: Streams, dtype, device, progress):
    """Rows cycle over the laws of `plans` (continuing after `offset` rows drawn before); returns
    (SamplerTrials or None, format problems). Each row's law travels with its tokens."""
    case = plans[0].case
    chunk = max(len(plans), min(n, int(CHUNK_FLOATS // ((2 * case.gamma + 1) * case.vocab))) // len(plans) * len(plans))
    outputs = []
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        law = law_cycle(size, len(plans), offset + start)
        target, draft, x = draw_mixed_inputs(plans, law, streams.drafts, dtype, device)
        out = call_impl(impl, target, draft, x, streams.impl, what=f"case {case.name}")
        problems, tokens = format_problems(out, x, case.vocab)
        if tokens is not None:
            outputs.append(SamplerTrials(tokens, law.numpy()))
        if tokens is None or problems:
            return (SamplerTrials.join(outputs) if outputs else None), problems
        if progress:
            progress(size)
    return SamplerTrials.join(outputs), []


def padded_rows_problems(out, B: int, width: int, V: int, shape_name: str) -> tuple[list[str], np.ndarray | None]:
    """Checks every step contract shares for an output [B, width] of token ids, −1 padded at the tail:
    tensor, shape, integer dtype, ids in [0, V), at least one token per row, padding only at the tail."""
    if not isinstance(out, torch.Tensor):
        return [f"returned {type(out).__name__}, expected a torch.Tensor {shape_name}"], None
    if tuple(out.shape) != (B, width):
        return [f"returned shape {tuple(out.shape)}, expected {shape_name} = [{B}, {width}]"], None
    if out.is_floating_point() or out.is_complex() or out.dtype == torch.bool:
        nan = " (contains NaN)" if out.is_floating_point() and bool(torch.isnan(out).any()) else ""
        return [f"returned dtype {out.dtype}{nan}, expected integer token ids (int64)"], None
    tokens = out.detach().to("cpu", torch.int64).numpy()
    problems = []
    if tokens.max() >= V or tokens.min() < -1:
        problems.append(f"token ids outside [0, {V}) (min {tokens.min()}, max {tokens.max()})")
    valid = tokens >= 0
    n = valid.sum(1)
    if (n < 1).any():
        problems.append(f"{int((n < 1).sum())} rows emitted no token (every row emits at least one)")
    tail_ok = valid == (np.arange(width)[None, :] < n[:, None])
    if not tail_ok.all():
        problems.append(f"{int((~tail_ok.all(1)).sum())} rows have -1 padding before a token")
    return problems, tokens


def format_problems(out, draft_tokens: torch.Tensor, V: int) -> tuple[list[str], np.ndarray | None]:
    """Structural checks of one output batch; returns (problems, tokens as int64 numpy or None)."""
    B, gamma = draft_tokens.shape
    problems, tokens = padded_rows_problems(out, B, gamma + 1, V, "[B, γ+1]")
    if tokens is None:
        return problems, None
    n = (tokens >= 0).sum(1)
    prefix = np.arange(gamma)[None, :] < (n - 1)[:, None]
    altered = prefix & (tokens[:, :gamma] != draft_tokens.cpu().numpy())
    if altered.any():
        problems.append(f"{int(altered.any(1).sum())} rows emit an accepted-draft position that is not the draft token")
    return problems, tokens


def position_tests(tokens: np.ndarray, plan: CasePlan, rate: float, power: float, prefix: str) -> list[TestResult]:
    """Per tested position: the emitted token's law among the rows that reached it."""
    V = plan.case.vocab
    n_emitted = (tokens >= 0).sum(1)
    out = []
    for j in plan.tested:
        col = tokens[n_emitted >= j + 1, j]
        col = col[(col >= 0) & (col < V)]  # out-of-range ids already failed the format test
        counts = np.bincount(col, minlength=V)
        pj = plan.p[j]
        name = f"{prefix}/pos{j}"
        out.append(support_check(counts, pj, f"{name}/support", power=power))
        coarse_counts, coarse_p = coarsen(counts, pj)
        plan_kw = {"rate": rate, "power": power}
        pooled_kw = {**plan_kw, "min_expected": GATE_MIN_EXPECTED}
        out.append(pooled_pearson(coarse_counts, coarse_p, f"{name}/pooled_pearson", **pooled_kw))
        out.append(pooled_gtest(coarse_counts, coarse_p, f"{name}/pooled_g", **pooled_kw))
        top = int(np.argmax(pj))
        out.append(binomial_event_test(int(counts[top]), len(col), float(pj[top]), f"{name}/top1", **plan_kw))
        outside = ~nucleus_mask_top_p(pj)
        if np.any(pj[outside] > 0):
            out.append(binomial_event_test(int(counts[outside].sum()), len(col), float(pj[outside].sum()),
                                           f"{name}/outside_nucleus", **plan_kw))
    return out



# --- the deep-tail probe (issue 46): errors of the random-number resolution, invisible to a TV plan ---------

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
            for t in _tail_tests(_tok(trials)[rows], plan, rate, power, prefix)]


def _acceptance_tests(tokens: np.ndarray, plan: CasePlan, rate: float, power: float, prefix: str):
    """Gating: P(first k drafts accepted) above the universal bound (impossible for any lossless rule, any
    family). Advisory: below the token-level optimum (wasteful); `rates` places the measured acceptance
    against the token-level and the block-level optimum (see `acceptance_outcome`)."""
    n_emitted = (tokens >= 0).sum(1)  # [rows]
    return acceptance_tests(n_emitted, plan.p, plan.q, acceptance_drafts(plan), rate, power, prefix)


def acceptance_drafts(plan: CasePlan) -> list[int]:
    """The k (number of leading drafts) tested for a plan: k = j + 1 for every position j < γ that the
    token-level rule reaches with probability ≥ MIN_REACH (the set `plan_rows` counts)."""
    return [j + 1 for j in range(plan.case.gamma) if plan.reach[j] >= MIN_REACH]


def count_acceptance_tests(plan: CasePlan) -> int:
    """Number of gating tests `acceptance_tests` emits for `plan`."""
    return len(acceptance_drafts(plan))


def acceptance_tests(
    n_emitted: np.ndarray,  # [rows] tokens emitted per row (accepted drafts + 1)
    p: np.ndarray,  # [γ+1, V]
    q: np.ndarray,  # [γ, V]
    drafts: list[int],  # the k to test
    rate: float,
    power: float,
    prefix: str,
) -> tuple[list[TestResult], list[TestResult], list[dict]]:
    """(gating, advisory, rates) for the acceptance of one case; rows are independent trials.

    Gating, one per k: one-sided binomial test that P(first k drafts accepted), over all rows, is not
    above the universal bound U_k = Σ min(Πp, Πq) (exact, or its upper confidence bound at δ = 1e-9).
    Advisory, one per k: one-sided test that it is not below the token-level optimum T_k."""
    universal = acceptance_bound(p, q)
    token = token_level_optimum(p, q)
    block = block_acceptance(p, q)
    rows = len(n_emitted)
    gating, advisory, rates = [], [], []
    for k in drafts:
        j = k - 1
        hits = int((n_emitted >= k + 1).sum())
        name = f"{prefix}/accept{j}"
        gating.append(_one_sided(hits, rows, float(universal.value[j]), f"{name}/above_universal_bound",
                                 "greater", rate, power))
        below_token = _one_sided(hits, rows, float(token[j]), f"{name}/below_token_optimal", "less", rate, power)
        advisory.append(below_token)
        reached = int((n_emitted >= k).sum())
        rates.append({
            "position": j, "drafts": k, "reached": reached,
            "measured": (hits / reached) if reached else math.nan,  # P(accept draft j | j reached)
            "optimal": float(min(1.0, np.minimum(p[j], q[j]).sum())),  # token-level α_j, same condition
            "accepted_first_k": hits / rows if rows else math.nan,
            "token_level_optimum": float(token[j]), "block_optimum": float(block[j]),
            "universal_bound": float(universal.estimate[j]), "universal_bound_gate": float(universal.value[j]),
            "universal_bound_exact": bool(universal.exact[j]),
            "outcome": acceptance_outcome(hits, rows, float(token[j]), float(block[j]), rate, power),
        })
    return gating, advisory, rates


def acceptance_outcome(hits: int, rows: int, token: float, block: float, rate: float, power: float) -> str:
    """Readable verdict on a measured P(first k accepted) = hits / rows against the token-level optimum
    T_k and block verification's B_k (T_k ≤ B_k): "wasteful" (significantly below T_k), "token-level
    optimal" (consistent with T_k, below B_k), "block optimal" (consistent with B_k), "optimal" where
    T_k = B_k (k = 1), "above block level" (significantly above B_k, yet within the universal bound)."""
    def below(p0):
        return _one_sided(hits, rows, p0, "", "less", rate, power).p_value < rate

    if below(token):
        return "wasteful"
    if block - token < 1e-9:
        return "optimal"
    if _one_sided(hits, rows, block, "", "greater", rate, power).p_value < rate:
        return "above block level"
    return "token-level optimal" if below(block) else "block optimal"


def _one_sided(hits: int, n: int, p0: float, name: str, alternative: str, rate: float, power: float) -> TestResult:
    """Binomial test of hits/n against p0; a bound that cannot be crossed in the tested direction
    (p0 ≥ 1 for "greater", p0 ≤ 0 for "less") passes with p = 1 (the plain test treats p0 ∈ {0, 1} as a
    point null and would reject any deviation, in either direction)."""
    p0 = min(1.0, max(0.0, p0))
    if (alternative == "greater" and p0 >= 1.0) or (alternative == "less" and p0 <= 0.0):
        return TestResult(name, float(hits), 1.0, n=n, details={"p_event": p0, "alternative": alternative})
    return binomial_event_test(hits, n, p0, name, alternative, rate=rate, power=power)


def row_independence(tokens: np.ndarray, rate: float, power: float, prefix: str):
    """Exact runs test on consecutive rows' emitted lengths: random numbers shared across rows make their
    accept/reject patterns, hence their lengths, move together (planted bug in tests/check/test_check.py).
    Lengths are heavily tied (γ + 1 values, often one dominant), where a rank correlation's normal
    approximation is not valid in the far tail; the runs test is exact at any sparsity."""
    lengths = (tokens >= 0).sum(1)
    return runs_test(lengths, f"{prefix}/rows_independent", rate=rate, power=power)


def run_sampler_check(impl: Callable, config: CheckConfig | None = None, *, impl_name: str = "impl",
                      dtype: torch.dtype = torch.float32, progress: Callable[[int], None] | None = None,
                      max_rows_per_case_floats: float | None = None, **fields) -> CheckReport:
    """Run every configuration against `impl` (a §1a verify) and decide with Holm at the false-alarm rate.

    `config` (or `fields` of CheckConfig, e.g. `cases=`, `seed=`, `samples=` or `family=`)
    says what to run; every default is CheckConfig's. `progress(n)` is called with the number of
    rows just processed."""
    config = CheckConfig.build(config, **fields)
    source = SamplerSource(impl, dtype=dtype, device=config.device, rows_cap_floats=max_rows_per_case_floats)
    return run_battery(source, config, impl_name=impl_name, progress=progress)


# --- the sampler level as a trial source of the check driver (harness.check.driver) ----------------------


def _tok(trials) -> np.ndarray:
    """The emitted tokens [rows, γ+1] of a cell's trials (SamplerTrials, or a bare array of one-law rows)."""
    return trials.tokens if isinstance(trials, SamplerTrials) else trials


def _laws(trials) -> np.ndarray:
    return trials.law if isinstance(trials, SamplerTrials) else np.zeros(len(trials), dtype=np.int64)


def law_rows(cell: Cell, trials) -> list[tuple[str, CasePlan, np.ndarray]]:
    """(test-name prefix, plan, row mask) per law of the cell, the rows chosen by the law label each row
    carries (returned by the source with the trials, never re-derived from a row index)."""
    plans = subplans(cell)
    if len(plans) == 1:  # every row holds the one law: a view of all rows, no copy
        return [(cell.name, plans[0], slice(None))]
    law = _laws(trials)
    return [(f"{cell.name}/law{r}", plan, law == r) for r, plan in enumerate(plans)]


def _reached(tokens: np.ndarray, j: int) -> int:
    return int(((tokens >= 0).sum(1) >= j + 1).sum())


def _position_need(plan: CasePlan, j: int, tv: float, rate: float, power: float) -> int:
    """Rows that must reach position j to detect `tv` there (df on the ≤ MAX_CELLS coarsening)."""
    return samples_needed(tv, max(1, min(MAX_CELLS, int((plan.p[j] > 0).sum())) - 1), rate, power)


def subplans(cell: Cell) -> list[CasePlan]:
    """The laws of a cell: one plan for a case whose rows share laws; one per law of a mixed case."""
    return cell.data if isinstance(cell.data, list) else [cell.data]


def _observed_ok(tokens: np.ndarray, j: int) -> bool:
    """Position j is tested only if this implementation reaches it often enough (MIN_REACH of the rows)."""
    return j == 0 or _reached(tokens, j) >= MIN_REACH * len(tokens)


def _flag_rarely_reached(results: list[TestResult], tokens: np.ndarray) -> list[TestResult]:
    """Mark the position tests of positions this implementation reaches rarely: reported, not the headline TV."""
    for t in results:
        j = int(t.name.split("/pos")[1].split("/")[0])
        if not _observed_ok(tokens, j):
            t.details["rarely_reached"] = _reached(tokens, j) / max(1, len(tokens))
    return results


def _positions_tests(cell: Cell) -> int:
    return sum(tests_per_position(plan.p[j]) for plan in subplans(cell) for j in plan.tested)


def _positions_samples(cell: Cell, tv: float, rate: float, power: float) -> int:
    plans = subplans(cell)
    need = [_position_need(plan, j, tv, rate, power) / plan.reach[j] for plan in plans for j in plan.tested]
    # 5 % headroom: the number of rows that reach a position fluctuates around rows · P(reach)
    return int(math.ceil(1.05 * max(need) * len(plans)))


def _positions_shortfall(cell: Cell, tokens: np.ndarray, tv: float, rate: float, power: float) -> int:
    """More rows for positions this implementation reaches less often than the optimal rule (wasteful rules):
    they keep sampling until they have their planned rows (or the run's cap)."""
    trials, more = tokens, 0
    for _, plan, rows in law_rows(cell, trials):
        sub = _tok(trials)[rows]
        if not len(sub):
            continue
        for j in plan.tested:
            reached = _reached(sub, j)
            if not _observed_ok(sub, j):
                continue
            need = _position_need(plan, j, tv, rate, power)
            if reached < need:
                more = max(more, math.ceil(1.05 * (need - reached) * len(sub) / reached) * len(subplans(cell)))
    return more


def _positions_run(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    out = []
    for prefix, plan, rows in law_rows(cell, trials):
        sub = _tok(trials)[rows]
        out += _flag_rarely_reached(position_tests(sub, plan, rate, power, prefix), sub)
    return out


def _acceptance_positions(plan: CasePlan) -> list[int]:
    return [j for j in range(plan.case.gamma) if plan.reach[j] >= MIN_REACH]


def _acceptance_run(cell: Cell, tokens: np.ndarray, rate: float, power: float, *, gating: bool):
    gates, advice, rates = [], [], []
    for prefix, plan, rows in law_rows(cell, tokens):
        g, a, acceptance = _acceptance_tests(_tok(tokens)[rows], plan, rate, power, prefix)
        gates, advice, rates = gates + g, advice + a, rates + acceptance
    if gating:
        return gates
    cell.summary["acceptance"] = rates
    cell.summary["wasteful"] = any(a.p_value < rate for a in advice)
    return advice


def _independence_run(cell: Cell, tokens: np.ndarray, rate: float, power: float) -> list[TestResult]:
    """Runs test per law: rows holding the same law are iid trials (rows of different laws differ by design)."""
    return [row_independence(_tok(tokens)[rows], rate, power, prefix)
            for prefix, _, rows in law_rows(cell, tokens)]


POSITION_LAWS = Check("position_laws", _positions_tests, _positions_run, _positions_samples, _positions_shortfall)
ACCEPTANCE_BOUND = Check("acceptance_bound",
                         lambda cell: sum(len(_acceptance_positions(p)) for p in subplans(cell)),
                         lambda cell, t, lv, pw: _acceptance_run(cell, t, lv, pw, gating=True))
ACCEPTANCE_OPTIMUM = Check("acceptance_vs_optimum", lambda cell: 0,
                           lambda cell, t, lv, pw: _acceptance_run(cell, t, lv, pw, gating=False), gating=False)
ROW_INDEPENDENCE = Check("rows_independent", lambda cell: len(subplans(cell)), _independence_run)
TAIL_PROBE = Check("deep_tail", lambda cell: sum(len(tail_positions(p)) for p in subplans(cell)), _tail_run,
                   _tail_samples)
SAMPLER_BATTERY = [POSITION_LAWS, ACCEPTANCE_BOUND, ACCEPTANCE_OPTIMUM, ROW_INDEPENDENCE, TAIL_PROBE]


def _estimate_run(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    """`--estimate`: a bias-corrected TV estimate with a 95 % interval per law and tested position
    (harness.stats.estimate), into the cell's summary ("tv_estimates"); with the exact TV on the same partition
    and on the full vocabulary where the implementation has an exact law (a zoo entry). Reports, never gates."""
    import torch

    from harness.stats.estimate import exact_partition_tv, kl_entry, partition, tv_estimate

    if not cell.summary.get("_estimate_all", True) and not cell.decided(rate):
        return []  # a FAIL report's default: estimates in the failing cells only
    seed, exact_laws = cell.summary.get("_estimate_seed", 0), cell.summary.get("_exact_laws")
    rng = numpy_rng(seed, "estimate", cell.name)
    out = []
    for prefix, plan, rows in law_rows(cell, trials):
        sub = _tok(trials)[rows]
        n_emitted = (sub >= 0).sum(1)
        laws = None
        if exact_laws is not None:
            try:
                laws = exact_laws(torch.from_numpy(plan.p), torch.from_numpy(plan.q)).double().numpy()
            except Exception:  # noqa: BLE001 - a law that does not apply to this case: no exact value beside it
                laws = None
        for j in plan.tested:
            col = sub[n_emitted >= j + 1, j]
            inside = col[(col >= 0) & (col < plan.case.vocab)]
            counts = np.bincount(inside, minlength=plan.case.vocab)
            est = tv_estimate(counts, plan.p[j], rng=rng, outside=len(col) - len(inside))
            kl = kl_entry(counts, plan.p[j], outside=len(col) - len(inside), rng=rng,
                          law=None if laws is None else laws[j])  # KL(emitted ‖ p): None where infinite
            entry = {"law": prefix, "position": j, "bonus": j == plan.case.gamma, **est, "kl": kl}
            if laws is not None:
                law = laws[j]
                entry["exact_tv"] = exact_partition_tv(law, plan.p[j], partition(plan.p[j], est["n"]))
                entry["exact_tv_full"] = 0.5 * (float(np.abs(law - plan.p[j]).sum()) + abs(1 - float(law.sum())))
            out.append(entry)
    cell.summary["tv_estimates"] = out
    return []


ESTIMATE = Check("tv_estimate", lambda cell: 0, _estimate_run, gating=False)


# --- the sampler battery's anytime-valid tests (the driver's sequential mode) ------------------------------


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
    for j in _acceptance_positions(plan):
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
        tokens = _tok(trials)[_laws(trials) == self.law]
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
        for j in _acceptance_positions(plan):
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


class SamplerSource(TrialSource):
    """Trials of one verification step: the harness builds (p, q), draws x ~ q, calls `verify`."""

    level = "sampler"
    progress_unit = "rows"

    def __init__(self, impl: Callable, *, dtype=torch.float32, device="cpu", rows_cap_floats: float | None = None):
        self.impl, self.dtype, self.device, self.rows_cap_floats = impl, dtype, device, rows_cap_floats
        self.streams: Streams | None = None
        self.drawn: dict[str, int] = {}  # rows drawn so far per cell (a mixed case continues its law cycle)

    def cells(self, config: CheckConfig) -> list[Cell]:
        self.streams = Streams.of(config.seed)
        self.seed = config.seed
        cells = []
        for case in select_cases(config.cases):
            plans = _plan_mixed(case, config.seed) if case.laws > 1 else plan_cases([case], config.seed)[0]
            first = plans[0] if isinstance(plans, list) else plans
            tested = sorted({j for p in (plans if isinstance(plans, list) else [plans]) for j in p.tested})
            summary = {"description": case.description, "gamma": case.gamma, "vocab": case.vocab,
                       "laws_per_row": case.laws, "tested_positions": tested,
                       "untested_positions": [j for j in range(case.gamma + 1) if j not in tested],
                       "reach_probability": first.reach.tolist()}
            checks = list(SAMPLER_BATTERY)
            if getattr(config, "estimate", False) or getattr(config, "fail_estimate", False):
                checks.append(ESTIMATE)  # every cell with --estimate, else the cells that fail (decided) only
                entry = getattr(self.impl, "specdec_implementation", None)  # a zoo entry: its exact law
                summary.update({"_estimate_seed": config.seed, "_estimate_all": getattr(config, "estimate", False),
                                "_exact_laws": getattr(entry, "position_laws", None)})
            cells.append(Cell(case.name, checks, plans, case.tv or config.tv, summary))
        if config.samples is not None:
            for cell in cells:
                cell.summary["planned"] = self._capped(cell, config.samples)
        return cells

    def _capped(self, cell: Cell, rows: int) -> int:
        if not self.rows_cap_floats:
            return rows
        case = subplans(cell)[0].case
        return int(max(1, min(rows, self.rows_cap_floats // ((2 * case.gamma + 1) * case.vocab))))

    def draw(self, cell: Cell, n: int, progress):
        n = self._capped(cell, n)
        plans = subplans(cell)
        offset = self.drawn.get(cell.name, 0)
        self.drawn[cell.name] = offset + n
        if len(plans) == 1:
            plans[0].rows = n
            tokens, problems = _run_case(self.impl, plans[0], self.streams, self.dtype, self.device, progress)
            tokens = None if tokens is None else SamplerTrials(tokens, np.zeros(len(tokens), dtype=np.int64))
        else:
            tokens, problems = _run_mixed_case(self.impl, plans, n, offset, self.streams, self.dtype, self.device,
                                               progress)
        if problems:
            exc = MalformedTrials("; ".join(problems))
            exc.trials = tokens
            raise exc
        return tokens

    def extend(self, trials, more):
        return SamplerTrials.join([trials, more])

    def progress_step(self, cell: Cell, n: int) -> Step:
        """Rows cost their input floats (2γ+1)·V plus ROW_FLOATS: the V = 32,000 case is most of the default
        plan's time with 1.4 % of its rows."""
        case = subplans(cell)[0].case
        rows = self._capped(cell, n)
        return Step(cell.name, "case", rows, (2 * case.gamma + 1) * case.vocab + ROW_FLOATS,
                    test_cost=rows * (case.gamma + 1) * TEST_FLOATS)

    def chunk(self, cell: Cell) -> int:
        return chunk_rows(subplans(cell)[0])

    def monitors(self, cell: Cell, config: CheckConfig) -> list[LawMonitor]:
        return cell_monitors(cell, config.seed)

    def count(self, trials) -> int:
        return len(_tok(trials))

    def finish(self, report: CheckReport, config: CheckConfig) -> None:
        cells = select_cases(config.cases)
        first = plan_cases([cells[0]], config.seed)[0] if cells[0].laws == 1 else _plan_mixed(cells[0], config.seed)[0]
        report.advisories.append(_reproducibility(self.impl, first, config.seed, self.dtype, self.device))
        report.notes.append(f"omnibus tests use the {MAX_CELLS - 1} likeliest tokens + the rest (detectable TV is "
                            f"on that coarsening); positions reached with probability < {MIN_REACH} (under the "
                            "optimal rule, or by this implementation) are not in the headline TV")
        rare = sorted({t.name.rsplit("/", 1)[0] for t in report.tests if t.details.get("rarely_reached") is not None})
        if rare:
            report.notes.append(f"positions this implementation reaches with frequency < {MIN_REACH} (wasteful "
                                f"acceptance), tested on the rows that reached them: {', '.join(rare)}")
        wider = sorted({c.name for c in cells if c.tv and c.tv != config.tv})
        if wider:
            report.notes.append(f"planned at a wider TV than --tv {config.tv:g}: " +
                                ", ".join(f"{c.name} ({c.tv:g})" for c in cells if c.name in wider))


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


def _run_case(impl, plan: CasePlan, streams: Streams, dtype, device, progress):
    # ~16 MB of inputs per call on CPU (mostly cache-resident for the implementation); an accelerator
    # wants larger batches. The input buffers are allocated once per case: fresh 120 MB tensors per
    # call cost page faults that were most of the V = 32,000 case's time.
    floats = CHUNK_FLOATS if torch.device(device).type == "cpu" else 8 * CHUNK_FLOATS
    per_row = (2 * plan.case.gamma + 1) * plan.case.vocab
    chunk = max(1, min(plan.rows, int(floats // per_row)))
    laws = (torch.from_numpy(plan.p).to(device, dtype), torch.from_numpy(plan.q).to(device, dtype))
    # Every drafted token first, one draw per position: the inputs do not depend on the chunk size.
    tokens = _draw_tokens(laws[1], plan.rows, streams.drafts)  # [rows, γ]
    # One allocation per case, refilled per call: fresh multi-MB tensors each call cost page faults.
    buffers = (laws[0].new_empty((chunk, *laws[0].shape)), laws[1].new_empty((chunk, *laws[1].shape)))
    outputs = []
    for start in range(0, plan.rows, chunk):
        n = min(chunk, plan.rows - start)
        target, draft, x = _draw_inputs(plan, n, streams.drafts, dtype, device, laws=laws, out=buffers,
                                        tokens=tokens[start : start + n])
        out = call_impl(impl, target, draft, x, streams.impl, what=f"case {plan.case.name}")
        problems, out_tokens = format_problems(out, x, plan.case.vocab)
        if out_tokens is None:
            return None, problems
        if problems:
            return out_tokens, problems
        outputs.append(out_tokens)
        if progress:
            progress(n)
    return np.concatenate(outputs), []


def chunk_rows(plan: CasePlan) -> int:
    """Rows per implementation call for this case, so that one call's inputs stay ≤ CHUNK_FLOATS."""
    return max(1, int(CHUNK_FLOATS // ((2 * plan.case.gamma + 1) * plan.case.vocab)))


def _reproducibility(impl, plan: CasePlan, seed: int, dtype, device) -> TestResult:
    """Same inputs, same seed (generator and global RNG) twice: the outputs should be identical."""
    results = []
    for _ in range(2):
        target, draft, x = _draw_inputs(plan, 256, torch_generator(seed, "probe", "inputs"), dtype, device)
        seed_global(seed, "probe")
        results.append(call_impl(impl, target, draft, x, torch_generator(seed, "probe", "impl"),
                                 what="the reproducibility check"))
    same = isinstance(results[0], torch.Tensor) and isinstance(results[1], torch.Tensor) and \
        results[0].shape == results[1].shape and bool(torch.equal(results[0].cpu(), results[1].cpu()))
    return deterministic_result("reproducible_under_same_seed", same, n=256,
                                message="" if same else "two runs with the same seed differ (hidden randomness)")
