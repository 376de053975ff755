"""Sampler-level losslessness check (shared/CONTRACT.md §1a): one verification step, many trials.

For each configuration (p_j, q_j fixed per draft position j; see `CASES`) the harness draws the
draft tokens x_j ~ q_j itself, calls `verify`, and tests what comes back:

- format: shape [B, γ+1], integer ids in [0, V), -1 padding only at the tail, n_b ≥ 1, and the
  first n_b − 1 emitted tokens are the drafts (accepted tokens are never altered);
- per position j, on the rows that reached j: the emitted token ~ p_j (support check; pooled
  Pearson and G on the likeliest tokens + the rest; top-1 and outside-the-99%-nucleus binomial
  tests) — Algorithm 1's emitted token at every position is distributed exactly as p_j;
- step lengths: P(reach j+1 | reach j) vs α_j = Σ min(p_j, q_j) — above is impossible for any
  lossless rule (gating); below is lossless-but-wasteful (reported, not gating);
- independence across rows (rows are independent trials): rank correlation of consecutive rows'
  randomized PIT values of the first emitted token;
- reproducibility under the same seed (advisory).

Sample sizes come from the planner (harness.stats.power): every tested position gets enough rows
to detect TV ≥ ε at the requested power after Holm's correction over the whole suite.
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
from harness.errors import HarnessError
from harness.stats import (
    TestResult,
    binomial_event_test,
    nucleus_mask_top_p,
    pooled_gtest,
    pooled_pearson,
    runs_test,
    samples_needed,
    support_check,
)

MAX_CELLS = 32  # omnibus tests see the 31 likeliest tokens + "the rest": df ≤ 31 keeps n affordable
# Cells expecting fewer draws are pooled before Pearson / G. The usual 5 keeps the χ² approximation
# honest at nominal levels, not at the ~1e-6 per-test levels a Holm family reaches: measured, one
# false alarm in 200 seeds of the reference (df 10, n = 389, p = 1.6e-6) with 5; 20 fixes the tail.
GATE_MIN_EXPECTED = 20.0
MIN_REACH = 0.1  # positions reached with lower probability are reported, not tested
CHUNK_FLOATS = 4e6  # input floats per implementation call on CPU: (2γ+1)·V·rows ≤ this (see _run_case)


@dataclasses.dataclass(frozen=True)
class SamplerCase:
    name: str
    gamma: int
    vocab: int
    build: Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]  # -> p [γ+1, V], q [γ, V]
    description: str
    tv: float | None = None  # planned detectable TV for this case (None: the suite's)


def _norm(x: np.ndarray) -> np.ndarray:
    return x / x.sum(axis=-1, keepdims=True)


def _softmax(z: np.ndarray) -> np.ndarray:
    return _norm(np.exp(z - z.max(axis=-1, keepdims=True)))


def _zipf(rows: int, V: int, s: float, rng) -> np.ndarray:
    w = np.arange(1, V + 1, dtype=np.float64) ** -s
    return _norm(np.stack([rng.permutation(w) for _ in range(rows)]))


def _tempered(p: np.ndarray, t: float) -> np.ndarray:
    return _norm(np.where(p > 0, p, 0.0) ** t)


def _top_p(p: np.ndarray, top_p: float) -> np.ndarray:
    order = np.argsort(-p, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(p, order, -1)
    keep_sorted = (np.cumsum(sorted_p, -1) - sorted_p) < top_p
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, -1)
    return _norm(np.where(keep, p, 0.0))


def _top_k(p: np.ndarray, k: int) -> np.ndarray:
    kth = -np.sort(-p, axis=-1)[..., k - 1 : k]
    return _norm(np.where(p >= kth, p, 0.0))


def _case_zipf_high(rng):
    p = _zipf(4, 1000, 1.1, rng)
    return p, _norm(0.97 * _tempered(p[:3], 0.87) + 0.03 / 1000)


def _case_anti(rng):
    z = rng.normal(0, 2.0, size=(4, 64))
    return _softmax(z), _softmax(-z[:3])


def _case_disjoint(rng):
    p = np.zeros((3, 20))
    p[:, :10] = rng.random((3, 10)) + 0.1
    q = np.zeros((2, 20))
    q[:, 10:] = rng.random((2, 10)) + 0.1
    return _norm(p), _norm(q)


def _case_q_zero(rng):
    z = rng.normal(0, 1.5, size=(4, 32))
    p = _softmax(z)
    q = _softmax(z[:3] + rng.normal(0, 0.3, size=(3, 32)))
    q[:, rng.permutation(32)[:11]] = 0.0  # q = 0 on a third of the tokens, p > 0 there
    return p, _norm(q)


def _case_sparse(rng):
    base = _zipf(4, 512, 1.2, rng)
    return _top_p(base, 0.9), _top_k(_tempered(base[:3], 0.9), 50)


def _case_binary(rng):
    a = rng.uniform(0.1, 0.9, size=9)
    p = np.stack([a, 1 - a], axis=1)
    b = np.clip(a[:8] + rng.normal(0, 0.08, size=8), 0.02, 0.98)
    return p, np.stack([b, 1 - b], axis=1)


def _case_llm_width(rng):
    p = _zipf(2, 32000, 1.05, rng)
    return p, _tempered(p[:1], 0.85)


def _case_gamma8(rng):
    z = rng.normal(0, 2.0, size=(9, 100))
    return _softmax(z), _softmax(z[:8] + rng.normal(0, 0.3, size=(8, 100)))


CASES: list[SamplerCase] = [  # cheapest first, so a failing implementation is usually caught in seconds
    SamplerCase("anti-logits", 3, 64, _case_anti, "draft logits = −target logits: low α, residual path dominates"),
    SamplerCase("disjoint-support", 2, 20, _case_disjoint, "p and q on disjoint halves: α = 0, every draft rejected"),
    SamplerCase("q-zero-where-p-positive", 3, 32, _case_q_zero, "q = 0 on a third of the tokens p can emit"),
    SamplerCase("binary-gamma8", 8, 2, _case_binary, "V = 2, γ = 8: the smallest vocabulary, the longest block"),
    SamplerCase("gamma8-v100", 8, 100, _case_gamma8, "V = 100, γ = 8, q = noisy p (α ≈ 0.87)"),
    SamplerCase("sparse-top-p-top-k", 3, 512, _case_sparse, "p = top-p 0.9 rows, q = top-k 50 rows (many zeros)"),
    SamplerCase("zipf1000-high-alpha", 3, 1000, _case_zipf_high, "Zipf(1.1) p over 1000 tokens, q = tempered p (α ≈ 0.87)"),
    SamplerCase("llm-width-32000", 1, 32000, _case_llm_width, "V = 32,000 (a real LLM width), Zipf(1.05)", tv=0.05),
]


def case_names() -> list[str]:
    return [c.name for c in CASES]


@dataclasses.dataclass
class CasePlan:
    case: SamplerCase
    p: np.ndarray  # [γ+1, V]
    q: np.ndarray  # [γ, V]
    alphas: np.ndarray  # [γ] Σ min(p_j, q_j)
    reach: np.ndarray  # [γ+1] P(reach j) for the optimal rule
    tested: list[int]  # positions with P(reach j) ≥ MIN_REACH
    rows: int = 0


def _plan_cases(cases: list[SamplerCase], seed: int) -> list[CasePlan]:
    plans = []
    for case in cases:
        p, q = case.build(np.random.default_rng([seed, zlib.crc32(case.name.encode())]))  # stable per case
        alphas = np.minimum(p[:-1], q).sum(-1)
        reach = np.concatenate([[1.0], np.cumprod(alphas)])
        tested = [j for j in range(case.gamma + 1) if reach[j] >= MIN_REACH]
        plans.append(CasePlan(case, p, q, alphas, reach, tested))
    return plans


def _tests_per_position(p_row: np.ndarray) -> int:
    return 4 + int(np.any(p_row[~nucleus_mask_top_p(p_row)] > 0))


def plan_rows(plans: list[CasePlan], *, tv: float, alpha: float, power: float, max_rows: int) -> int:
    """Set each plan's row count; returns the number of gating tests m used for the plan."""
    m = 0
    for plan in plans:
        m += 2  # format + row independence
        m += sum(_tests_per_position(plan.p[j]) for j in plan.tested)
        m += sum(1 for j in range(plan.case.gamma) if plan.reach[j] >= MIN_REACH)  # acceptance tests
    level = alpha / m
    for plan in plans:
        eps = plan.case.tv or tv
        # A one-token law (e.g. top-p 0.5 on V = 2) has df 0: nothing to test but its support; plan it as df 1.
        need = [samples_needed(eps, max(1, min(MAX_CELLS, int((plan.p[j] > 0).sum())) - 1), level, power)
                / plan.reach[j] for j in plan.tested]
        # 5 % headroom: the number of rows that reach a position fluctuates around rows · P(reach)
        plan.rows = int(min(max_rows, math.ceil(1.05 * max(need))))
    return m


def _coarsen(counts: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


class ImplementationError(HarnessError):
    """The implementation raised instead of returning tokens."""


def call_impl(impl: Callable, *args, what: str, **kwargs):
    try:
        return impl(*args, **kwargs)
    except HarnessError:
        raise
    except Exception as exc:  # a user implementation may raise anything: report it in one line
        raise ImplementationError(f"the implementation raised {type(exc).__name__} during {what}: {exc}") from exc


def _format_problems(out, draft_tokens: torch.Tensor, V: int) -> tuple[list[str], np.ndarray | None]:
    """Structural checks of one output batch; returns (problems, tokens as int64 numpy or None)."""
    B, gamma = draft_tokens.shape
    if not isinstance(out, torch.Tensor):
        return [f"returned {type(out).__name__}, expected a torch.Tensor [B, γ+1]"], None
    if tuple(out.shape) != (B, gamma + 1):
        return [f"returned shape {tuple(out.shape)}, expected [B, γ+1] = [{B}, {gamma + 1}]"], None
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
        problems.append(f"{int((n < 1).sum())} rows emitted no token (every row emits 1..γ+1)")
    tail_ok = valid == (np.arange(gamma + 1)[None, :] < n[:, None])
    if not tail_ok.all():
        problems.append(f"{int((~tail_ok.all(1)).sum())} rows have -1 padding before a token")
    drafts = draft_tokens.cpu().numpy()
    prefix = np.arange(gamma)[None, :] < (n - 1)[:, None]
    altered = prefix & (tokens[:, :gamma] != drafts)
    if altered.any():
        problems.append(f"{int(altered.any(1).sum())} rows emit an accepted-draft position that is not the draft token")
    return problems, tokens


def _position_tests(tokens: np.ndarray, plan: CasePlan, level: float, power: float, prefix: str) -> list[TestResult]:
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
        coarse_counts, coarse_p = _coarsen(counts, pj)
        plan_kw = {"alpha": level, "power": power}
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


def _acceptance_tests(tokens: np.ndarray, plan: CasePlan, level: float, power: float, prefix: str):
    """Gating: acceptance above Σ min(p, q) (impossible for a lossless rule). Advisory: below it (wasteful)."""
    n_emitted = (tokens >= 0).sum(1)
    gating, advisory, rates = [], [], []
    for j in range(plan.case.gamma):
        if plan.reach[j] < MIN_REACH:
            continue
        reached = int((n_emitted >= j + 1).sum())
        hits = int((n_emitted >= j + 2).sum())
        a = float(min(1.0, plan.alphas[j]))
        name = f"{prefix}/accept{j}"
        gating.append(binomial_event_test(hits, reached, a, f"{name}/above_optimal", "greater", alpha=level, power=power))
        advisory.append(binomial_event_test(hits, reached, a, f"{name}/below_optimal", "less", alpha=level, power=power))
        rates.append({"position": j, "measured": hits / reached if reached else math.nan, "optimal": a,
                      "reached": reached})
    return gating, advisory, rates


def _row_independence(tokens: np.ndarray, level: float, power: float, prefix: str):
    """Exact runs test on consecutive rows' emitted lengths: random numbers shared across rows make their
    accept/reject patterns, hence their lengths, move together (planted bug in tests/test_check.py).
    Lengths are heavily tied (γ + 1 values, often one dominant), where a rank correlation's normal
    approximation is not valid in the far tail; the runs test is exact at any sparsity."""
    lengths = (tokens >= 0).sum(1)
    return runs_test(lengths, f"{prefix}/rows_independent", alpha=level, power=power)


def run_sampler_check(
    impl: Callable,
    *,
    impl_name: str = "impl",
    false_alarm_rate: float = 1e-3,
    tv: float = 0.02,
    power: float = 0.99,
    seed: int = 0,
    cases: list[str | SamplerCase] | None = None,
    max_rows: int = 400_000,
    rows: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    progress: Callable[[int], None] | None = None,
    stop_on_fail: bool = False,
    max_rows_per_case_floats: float | None = None,
) -> CheckReport:
    """Run every configuration against `impl` (a §1a verify) and decide with Holm at `false_alarm_rate`.

    `rows` fixes the trials per case (skipping the planner: the stated detectable TVs then follow
    from it); `progress(n)` is called with the number of rows just processed. With `stop_on_fail`,
    cases stop as soon as one test has p ≤ false_alarm_rate / m: Holm's first step then rejects
    whatever the remaining tests say, so the verdict is the same as running everything.
    """
    started = time.perf_counter()
    selected = _select(cases)
    plans = _plan_cases(selected, seed)
    m = plan_rows(plans, tv=tv, alpha=false_alarm_rate, power=power, max_rows=max_rows)
    if rows is not None:
        for plan in plans:
            per_row = (2 * plan.case.gamma + 1) * plan.case.vocab
            cap = int(max_rows_per_case_floats // per_row) if max_rows_per_case_floats else rows
            plan.rows = int(max(1, min(rows, cap)))
    level = false_alarm_rate / m
    report = CheckReport(impl_name, "sampler", false_alarm_rate, tv, power, seed, device=device)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    for plan in plans:
        tokens, problems = _run_case(impl, plan, generator, dtype, device, progress)
        prefix = plan.case.name
        report.tests.append(deterministic_result(f"{prefix}/format", not problems, n=plan.rows,
                                                 message="; ".join(problems)))
        report.samples += plan.rows
        summary = {"name": prefix, "description": plan.case.description, "gamma": plan.case.gamma,
                   "vocab": plan.case.vocab, "rows": plan.rows, "tested_positions": plan.tested,
                   "untested_positions": [j for j in range(plan.case.gamma + 1) if j not in plan.tested],
                   "reach_probability": plan.reach.tolist(), "format_problems": problems}
        if tokens is not None:
            report.tests += _position_tests(tokens, plan, level, power, prefix)
            gating, advisory, rates = _acceptance_tests(tokens, plan, level, power, prefix)
            report.tests += gating
            report.advisories += advisory
            report.tests.append(_row_independence(tokens, level, power, prefix))
            summary["acceptance"] = rates
            summary["wasteful"] = any(a.p_value < level for a in advisory)
        report.cases.append(summary)
        if stop_on_fail and any(t.p_value <= level for t in report.tests):
            skipped = [p.case.name for p in plans[plans.index(plan) + 1 :]]
            if skipped:
                report.notes.append(f"verdict decided (a test has p <= {level:.2g}); skipped cases: {', '.join(skipped)}")
            break
    report.advisories.append(_reproducibility(impl, plans[0], seed, dtype, device))
    report.notes.append(f"{m} gating tests, Holm at family-wise {false_alarm_rate:g} (per-test plan level {level:.2g}); "
                        f"omnibus tests use the {MAX_CELLS - 1} likeliest tokens + the rest (detectable TV is on that "
                        "coarsening); positions reached with probability < "
                        f"{MIN_REACH} under the optimal rule are not tested")
    report.seconds = time.perf_counter() - started
    return report.decide()


def _select(cases: list[str | SamplerCase] | None) -> list[SamplerCase]:
    """Case names (from CASES) or SamplerCase objects (e.g. `custom_case`); None: all of CASES."""
    if not cases:
        return list(CASES)
    by_name = {c.name: c for c in CASES}
    unknown = [c for c in cases if isinstance(c, str) and c not in by_name]
    if unknown:
        from harness.errors import UnknownNameError

        raise UnknownNameError("sampler case", unknown[0], list(by_name))
    return [by_name[c] if isinstance(c, str) else c for c in cases]


def custom_case(name: str, p: np.ndarray, q: np.ndarray, description: str = "", tv: float | None = None) -> SamplerCase:
    """A configuration from explicit laws: p [γ+1, V] (target per position), q [γ, V] (draft)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.ndim != 2 or q.ndim != 2 or p.shape[0] != q.shape[0] + 1 or p.shape[1] != q.shape[1]:
        raise HarnessError(f"custom case {name!r}: need p [γ+1, V] and q [γ, V], got {p.shape} and {q.shape}")
    return SamplerCase(name, q.shape[0], q.shape[1], lambda rng: (_norm(p), _norm(q)), description or name, tv)


def _run_case(impl, plan: CasePlan, generator, dtype, device, progress):
    # ~16 MB of inputs per call on CPU (mostly cache-resident for the implementation); an accelerator
    # wants larger batches. The input buffers are allocated once per case: fresh 120 MB tensors per
    # call cost page faults that were most of the V = 32,000 case's time.
    floats = CHUNK_FLOATS if torch.device(device).type == "cpu" else 8 * CHUNK_FLOATS
    per_row = (2 * plan.case.gamma + 1) * plan.case.vocab
    chunk = max(1, min(plan.rows, int(floats // per_row)))
    laws = (torch.from_numpy(plan.p).to(device, dtype), torch.from_numpy(plan.q).to(device, dtype))
    # Every drafted token first, one draw per position: the inputs do not depend on the chunk size.
    tokens = _draw_tokens(laws[1], plan.rows, generator)  # [rows, γ]
    # One allocation per case, refilled per call: fresh multi-MB tensors each call cost page faults.
    buffers = (laws[0].new_empty((chunk, *laws[0].shape)), laws[1].new_empty((chunk, *laws[1].shape)))
    outputs = []
    for start in range(0, plan.rows, chunk):
        n = min(chunk, plan.rows - start)
        target, draft, x = _draw_inputs(plan, n, generator, dtype, device, laws=laws, out=buffers,
                                        tokens=tokens[start : start + n])
        out = call_impl(impl, target, draft, x, generator, what=f"case {plan.case.name}")
        problems, out_tokens = _format_problems(out, x, plan.case.vocab)
        if out_tokens is None:
            return None, problems
        if problems:
            return out_tokens, problems
        outputs.append(out_tokens)
        if progress:
            progress(n)
    return np.concatenate(outputs), []


def _reproducibility(impl, plan: CasePlan, seed: int, dtype, device) -> TestResult:
    """Same inputs, same seed (generator and global RNG) twice: the outputs should be identical."""
    results = []
    for _ in range(2):
        g = torch.Generator().manual_seed(seed + 1)
        target, draft, x = _draw_inputs(plan, 256, g, dtype, device)
        torch.manual_seed(seed + 1)
        g.manual_seed(seed + 2)
        results.append(call_impl(impl, target, draft, x, g, what="the reproducibility check"))
    same = isinstance(results[0], torch.Tensor) and isinstance(results[1], torch.Tensor) and \
        results[0].shape == results[1].shape and bool(torch.equal(results[0].cpu(), results[1].cpu()))
    return deterministic_result("reproducible_under_same_seed", same, n=256,
                                message="" if same else "two runs with the same seed differ (hidden randomness)")
