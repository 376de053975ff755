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

from collections.abc import Callable

import numpy as np
import torch

from harness.adapters.calling import call_impl
from harness.check.config import CheckConfig
from harness.check.driver import Cell, Check, MalformedTrials, run_battery
from harness.check.report import CheckReport
from harness.check.sampler_cases import MAX_CELLS, SamplerTrials, coarsen, law_rows, subplans
from harness.check.sampler_source import (
    CHUNK_FLOATS,
    SamplerSource,
    draw_mixed_inputs,
    format_problems,
    law_cycle,
)
from harness.check.sampler_tests import GATE_MIN_EXPECTED
from harness.stats import TestResult, pooled_gtest, pooled_pearson, support_check

DRAFT_TESTS_PER_POSITION = 3  # support, pooled Pearson, pooled G


def draft_law_tests(
    drafts: np.ndarray,  # [rows, γ] int64 drafts returned by the implementation
    q: np.ndarray,  # [γ, V] the draft laws they must follow
    rate: float,
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
        coarse_counts, coarse_q = coarsen(counts, q[i])
        kw = {"rate": rate, "power": power, "min_expected": GATE_MIN_EXPECTED}
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


def run_draft_step_check(impl: Callable, config: CheckConfig | None = None, *, impl_name: str = "impl",
                         dtype: torch.dtype = torch.float32, progress: Callable[[int], None] | None = None,
                         **fields) -> CheckReport:
    """Run the draft-step battery against `impl` on the sampler check's cases; Holm at the false-alarm rate
    (the check driver: the sampler battery plus the draft-law check); `fields` of CheckConfig as
    in `run_sampler_check`."""
    config = CheckConfig.build(config, **{"step": "draft_and_verify", **fields})
    report = run_battery(DraftStepSource(impl, dtype=dtype, device=config.device), config, impl_name=impl_name,
                         progress=progress)
    report.level = "draft_step"
    return report


def _draft_laws_run(cell: Cell, trials: SamplerTrials, rate: float, power: float) -> list[TestResult]:
    out = []
    for prefix, plan, rows in law_rows(cell, trials):
        out += draft_law_tests(trials.drafts[rows], plan.q, rate, power, prefix)
    return out


DRAFT_LAWS = Check("draft_laws", lambda cell: sum(count_draft_law_tests(p.q) for p in subplans(cell)),
                   _draft_laws_run)


class DraftStepSource(SamplerSource):
    """Trials of a draft-and-verify step: the harness gives p and q, the implementation drafts and verifies."""

    def cells(self, config):
        cells = super().cells(config)
        for cell in cells:
            cell.checks.append(DRAFT_LAWS)
        return cells

    def draw(self, cell: Cell, n: int, progress):
        plans = subplans(cell)
        case = plans[0].case
        offset = self.drawn.get(cell.name, 0)
        self.drawn[cell.name] = offset + n
        chunk = max(len(plans), min(n, int(CHUNK_FLOATS // ((2 * case.gamma + 1) * case.vocab)))
                    // len(plans) * len(plans))
        parts = []
        for start in range(0, n, chunk):
            size = min(chunk, n - start)
            law = law_cycle(size, len(plans), offset + start)
            target, draft, _ = draw_mixed_inputs(plans, law, self.streams.drafts, self.dtype, self.device)
            out = call_impl(self.impl, target, draft, self.streams.impl, what=f"case {case.name}")
            problems, drafts, tokens = _draft_format(out, size, case.gamma, case.vocab)
            if drafts is None:
                raise MalformedTrials("; ".join(problems))
            problems, tokens = format_problems(tokens, drafts, case.vocab)  # accepted positions = returned drafts
            if tokens is None or problems:
                raise MalformedTrials("; ".join(problems))
            parts.append(SamplerTrials(tokens, law.numpy(), drafts.numpy()))
            if progress:
                progress(size)
        return SamplerTrials.join(parts)

    def finish(self, report: CheckReport, config) -> None:
        report.notes.append("drafts drawn by the implementation, checked against q per position; "
                            f"omnibus tests use the {MAX_CELLS - 1} likeliest tokens + the rest")
