"""Draft-step losslessness check: the implementation draws its own drafts from q, then verifies them.

Contract (specdec_ref/draft_step.py): `draft_and_verify(target_probs [B, γ+1, V], draft_probs [B, γ, V],
generator) -> (draft_tokens [B, γ] int64, tokens [B, γ+1] int64, -1 padded)`. The sampler check cannot
see drafting bugs, because there the harness draws x ~ q itself: greedy drafts verified with a softmax
q (transformers #32867), drafting noise reused by the acceptance test or the recovery draw (vLLM #47386 /
PR #54282). Here, on the sampler check's cases and planner, per case:

- format: both tensors well formed, and the accepted positions equal the returned drafts;
- the returned drafts follow q at every position (`draft_law_tests`: support, pooled Pearson and G);
- the emitted law is p at every reached position (the sampler check's position tests, imported);
- acceptance within the universal bound, advisory against the token-level optimum (imported);
- independence across rows (imported).

`python -m harness.check.draft_step --calibrate` measures detection of the draft-step mutants and the
false alarms of the controls (see `calibrate`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from harness.check.report import CheckReport, deterministic_result
from harness.check.sampler import (
    GATE_MIN_EXPECTED,
    CasePlan,
    _acceptance_tests,
    _coarsen,
    _format_problems,
    _plan_cases,
    _position_tests,
    _row_independence,
    _select,
    call_impl,
    count_acceptance_tests,
    plan_rows,
)
from harness.stats import TestResult, pooled_gtest, pooled_pearson, support_check

DRAFT_TESTS_PER_POSITION = 3  # support, pooled Pearson, pooled G
CHUNK_FLOATS = 3e7  # (2γ+1)·V·rows per implementation call, as the sampler check


def draft_law_tests(
    drafts: np.ndarray,  # [rows, γ] int64 drafts returned by the implementation
    q: np.ndarray,  # [γ, V] the draft laws they must follow
    level: float,
    power: float,
    prefix: str,
) -> list[TestResult]:
    """Per draft position i: the returned drafts x_i ~ q_i (support check, pooled Pearson and G on the
    likeliest tokens + the rest, as the sampler's position tests)."""
    out = []
    for i in range(q.shape[0]):
        col = drafts[:, i]
        counts = np.bincount(col[(col >= 0) & (col < q.shape[1])], minlength=q.shape[1])
        name = f"{prefix}/draft{i}"
        out.append(support_check(counts, q[i], f"{name}/support", power=power))
        coarse_counts, coarse_q = _coarsen(counts, q[i])
        kw = {"alpha": level, "power": power, "min_expected": GATE_MIN_EXPECTED}
        out.append(pooled_pearson(coarse_counts, coarse_q, f"{name}/pooled_pearson", **kw))
        out.append(pooled_gtest(coarse_counts, coarse_q, f"{name}/pooled_g", **kw))
    return out


def count_draft_law_tests(q: np.ndarray) -> int:
    """Number of tests `draft_law_tests` emits for draft laws q [γ, V]."""
    return DRAFT_TESTS_PER_POSITION * q.shape[0]


def _draft_format(out, B: int, gamma: int, V: int) -> tuple[list[str], torch.Tensor | None, object]:
    """Split the (drafts, tokens) pair; returns (problems, drafts or None, tokens object)."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return [f"returned {type(out).__name__}, expected a pair (draft_tokens [B, γ], tokens [B, γ+1])"], None, None
    drafts, tokens = out
    if not isinstance(drafts, torch.Tensor) or tuple(drafts.shape) != (B, gamma) or drafts.is_floating_point():
        shape = tuple(drafts.shape) if isinstance(drafts, torch.Tensor) else type(drafts).__name__
        return [f"draft_tokens: got {shape}, expected int64 [B, γ] = [{B}, {gamma}]"], None, None
    drafts = drafts.detach().to("cpu", torch.int64)
    if int(drafts.min()) < 0 or int(drafts.max()) >= V:
        return [f"draft_tokens outside [0, {V})"], None, None
    return [], drafts, tokens


def _laws_for_rows(plan: CasePlan, rows: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    target = torch.from_numpy(plan.p).to(dtype).unsqueeze(0).expand(rows, -1, -1).contiguous().to(device)
    draft = torch.from_numpy(plan.q).to(dtype).unsqueeze(0).expand(rows, -1, -1).contiguous().to(device)
    return target, draft  # [rows, γ+1, V], [rows, γ, V]


def _run_case(impl, plan: CasePlan, generator, dtype, device, progress):
    """(drafts [rows, γ], tokens [rows, γ+1]) as numpy, or (None, None) with the format problems."""
    gamma, V = plan.case.gamma, plan.case.vocab
    chunk = max(1, min(plan.rows, int(CHUNK_FLOATS // ((2 * gamma + 1) * V))))
    all_drafts, all_tokens = [], []
    for start in range(0, plan.rows, chunk):
        n = min(chunk, plan.rows - start)
        target, draft = _laws_for_rows(plan, n, dtype, device)
        out = call_impl(impl, target, draft, generator, what=f"case {plan.case.name}")
        problems, drafts, tokens = _draft_format(out, n, gamma, V)
        if drafts is None:
            return None, None, problems
        problems, tokens = _format_problems(tokens, drafts, V)  # accepted positions = returned drafts
        if tokens is None or problems:
            return (None if tokens is None else drafts.numpy()), tokens, problems
        all_drafts.append(drafts.numpy())
        all_tokens.append(tokens)
        if progress:
            progress(n)
    return np.concatenate(all_drafts), np.concatenate(all_tokens), []


def _plan(plans: list[CasePlan], *, false_alarm_rate: float, tv: float, power: float, max_rows: int) -> int:
    """Rows per case for the whole battery (sampler tests + draft-law tests); returns the number of gating tests."""
    m_sampler = plan_rows(plans, tv=tv, alpha=false_alarm_rate, power=power, max_rows=max_rows)
    m = m_sampler + sum(count_draft_law_tests(plan.q) for plan in plans)
    # plan_rows plans each test at false_alarm_rate / m_sampler: scale so that level = false_alarm_rate / m.
    plan_rows(plans, tv=tv, alpha=false_alarm_rate * m_sampler / m, power=power, max_rows=max_rows)
    return m


def count_draft_step_tests(plan: CasePlan) -> int:
    """Gating tests one case emits when its implementation returns well-formed output."""
    from harness.check.sampler import _tests_per_position

    return (2 + sum(_tests_per_position(plan.p[j]) for j in plan.tested) + count_acceptance_tests(plan)
            + count_draft_law_tests(plan.q))


def run_draft_step_check(
    impl: Callable,
    *,
    impl_name: str = "impl",
    false_alarm_rate: float = 1e-3,
    tv: float = 0.02,
    power: float = 0.99,
    seed: int = 0,
    cases: list | None = None,
    max_rows: int = 400_000,
    rows: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    progress: Callable[[int], None] | None = None,
    stop_on_fail: bool = False,
) -> CheckReport:
    """Run the draft-step battery against `impl` on the sampler check's cases; Holm at `false_alarm_rate`.

    `rows` fixes the trials per case (skipping the planner); `stop_on_fail` stops after the first case
    with a test at p ≤ false_alarm_rate / m (Holm then rejects whatever the rest says)."""
    started = time.perf_counter()
    plans = _plan_cases(_select(cases), seed)
    m = _plan(plans, false_alarm_rate=false_alarm_rate, tv=tv, power=power, max_rows=max_rows)
    if rows is not None:
        for plan in plans:
            plan.rows = int(rows)
    level = false_alarm_rate / m
    report = CheckReport(impl_name, "draft_step", false_alarm_rate, tv, power, seed, device=device)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    for index, plan in enumerate(plans):
        drafts, tokens, problems = _run_case(impl, plan, generator, dtype, device, progress)
        prefix = plan.case.name
        report.tests.append(deterministic_result(f"{prefix}/format", not problems, n=plan.rows,
                                                 message="; ".join(problems)))
        report.samples += plan.rows
        summary = {"name": prefix, "description": plan.case.description, "gamma": plan.case.gamma,
                   "vocab": plan.case.vocab, "rows": plan.rows, "tested_positions": plan.tested,
                   "format_problems": problems}
        if drafts is not None:
            report.tests += draft_law_tests(drafts, plan.q, level, power, prefix)
        if tokens is not None and not problems:
            report.tests += _position_tests(tokens, plan, level, power, prefix)
            gating, advisory, rates = _acceptance_tests(tokens, plan, level, power, prefix)
            report.tests += gating
            report.advisories += advisory
            report.tests.append(_row_independence(tokens, level, power, prefix))
            summary["acceptance"] = rates
            summary["wasteful"] = any(a.p_value < level for a in advisory)
        report.cases.append(summary)
        if stop_on_fail and any(t.p_value <= level for t in report.tests):
            skipped = [p.case.name for p in plans[index + 1:]]
            if skipped:
                report.notes.append(f"verdict decided (a test has p <= {level:.2g}); skipped cases: {', '.join(skipped)}")
            break
    report.notes.append(f"{m} gating tests, Holm at family-wise {false_alarm_rate:g} (per-test plan level "
                        f"{level:.2g}); drafts drawn by the implementation, checked against q per position")
    report.seconds = time.perf_counter() - started
    return report.decide()


# ---------------------------------------------------------------- calibration (python -m harness.check.draft_step)

CALIBRATION_CASES = ["anti-logits", "q-zero-where-p-positive", "binary-gamma8"]


def calibrate(names: list[str], seeds: int, *, cases=None, false_alarm_rate: float = 1e-3,
              rows: int | None = None, first_seed: int = 0) -> dict[str, dict]:
    """{name: {"runs", "failed", "rate", "seconds"}} over `seeds` seeds of the registered implementations
    `names` (draft-step or sampler level), each run on `cases` at `false_alarm_rate`."""
    from harness.check.sampler import run_sampler_check
    from harness.mutants.registry import get

    out = {}
    for name in names:
        impl = get(name)
        check = run_draft_step_check if impl.level == "draft_step" else run_sampler_check
        started, failed = time.perf_counter(), 0
        for s in range(first_seed, first_seed + seeds):
            report = check(impl.fn, impl_name=name, false_alarm_rate=false_alarm_rate, seed=s,
                           cases=cases or CALIBRATION_CASES, rows=rows, stop_on_fail=impl.kind == "mutant")
            failed += report.verdict == "fail"
        out[name] = {"kind": impl.kind, "level": impl.level, "runs": seeds, "failed": failed,
                     "rate": failed / seeds, "seconds": round(time.perf_counter() - started, 1)}
    return out


def _main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m harness.check.draft_step",
                                     description="detection of the family mutants / false alarms of the controls")
    parser.add_argument("--calibrate", action="store_true", required=True)
    parser.add_argument("--names", nargs="+", required=True, help="registered implementation names")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--rows", type=int, default=None, help="rows per case (default: the planner)")
    parser.add_argument("--cases", nargs="+", default=None)
    parser.add_argument("--false-alarm-rate", type=float, default=1e-3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    result = calibrate(args.names, args.seeds, cases=args.cases, false_alarm_rate=args.false_alarm_rate,
                       rows=args.rows, first_seed=args.first_seed)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
