"""The sampler level as a trial source of the check driver (harness.check.driver): for each case the harness builds
(p, q), draws the drafts x ~ q itself, calls `verify` in chunks and validates every output batch (format: shape
[B, γ+1], integer ids in [0, V), -1 padding only at the tail, accepted drafts unaltered); the reproducibility
advisory after the run.

A name used here is looked up here: patch `harness.check.sampler_source.CHUNK_FLOATS`, not a re-export of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from harness.adapters.calling import call_impl
from harness.check.config import MIN_REACH
from harness.check.driver import Cell, CheckConfig, MalformedTrials, TrialSource
from harness.check.report import CheckReport, deterministic_result
from harness.check.sampler_cases import (
    MAX_CELLS,
    CasePlan,
    SamplerTrials,
    plan_cases,
    plan_mixed,
    select_cases,
    subplans,
    tokens_of,
)
from harness.check.sampler_sequential import LawMonitor, cell_monitors
from harness.check.sampler_tests import ESTIMATE, SAMPLER_BATTERY
from harness.check.streams import seed_global, torch_generator
from harness.progress import Step
from harness.stats import TestResult


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


CHUNK_FLOATS = 4e6  # input floats per implementation call on CPU: (2γ+1)·V·rows ≤ this (see _run_case)
# The progress line's cost of one row (harness.progress.Step): its (2γ+1)·V input floats plus a fixed overhead,
# and for its tests (γ+1)·TEST_FLOATS. Fitted to the default plan's per-case times of the reference (draw and
# tests timed per case, this 2-core CPU under load, 2026-12-07): one row costs as much as about 240 input floats
# besides its inputs (the reference's per-row work, the format check); tests about 40 per position.
ROW_FLOATS = 240
TEST_FLOATS = 40


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
            plans = plan_mixed(case, config.seed) if case.laws > 1 else plan_cases([case], config.seed)[0]
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
        return len(tokens_of(trials))

    def finish(self, report: CheckReport, config: CheckConfig) -> None:
        cells = select_cases(config.cases)
        first = plan_cases([cells[0]], config.seed)[0] if cells[0].laws == 1 else plan_mixed(cells[0], config.seed)[0]
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
