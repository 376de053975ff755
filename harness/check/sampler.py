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
- independence across rows (rows are independent trials): the exact runs test on consecutive rows'
  emitted lengths (the sequential mode bets on the randomized PIT of each row's first token instead);
- the deep tail (tokens at most 2^-20 of a position's top probability) where it holds enough mass;
- reproducibility under the same seed (advisory).

Sample sizes come from the planner (harness.stats.power): every tested position gets enough rows
to detect TV ≥ ε at the requested power after Holm's correction over the whole suite.

This module is the check's entry point (`run_sampler_check`); the work is done by its siblings, by job:
- **cases** (what a case is, the catalogue, each case's plan, a cell's trials by law): harness.check.sampler_cases;
- **tests** (per position, acceptance, row independence, `--estimate`; the battery and its fixed-n plan):
  harness.check.sampler_tests;
- **the deep-tail probe**: harness.check.sampler_tail;
- **the sequential monitors** (the battery's e-processes): harness.check.sampler_sequential;
- **the trial source** (drawing the inputs, calling `verify`, validating its output, reproducibility):
  harness.check.sampler_source.
The names other modules take from the sampler level are re-exported here (`__all__`). Each is looked up in its
home module: a test that patches one patches it there (e.g. `harness.check.sampler_source.CHUNK_FLOATS`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.check.driver import CheckConfig, run_battery
from harness.check.report import CheckReport
from harness.check.sampler_cases import (
    MAX_CELLS,
    SamplerCase,
    case_names,
    custom_case,
    default_cases,
    plan_cases,
    select_cases,
)
from harness.check.sampler_source import SamplerSource
from harness.check.sampler_tail import deep_tail, tail_positions
from harness.check.sampler_tests import acceptance_outcome, count_acceptance_tests, plan_rows

__all__ = ["MAX_CELLS", "SamplerCase", "SamplerSource", "acceptance_outcome", "case_names",
           "count_acceptance_tests", "custom_case", "deep_tail", "default_cases", "plan_cases", "plan_rows",
           "run_sampler_check", "select_cases", "tail_positions"]


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
