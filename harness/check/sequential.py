"""Sequential (anytime-valid) mode of the checks: stop as soon as the verdict is certain.

It is a mode of the one driver (`harness.check.driver.run_battery` with `CheckConfig(sequential=True)`),
drawing through the same trial sources as the fixed-n check, so multi-law cells keep every law and the
reach-following top-up is monitored too. The cells advance in rounds, each to the same growing fraction
of its plan (1/1000 of it first, then ×1.15 per round), and after every chunk the cell's monitors — test
martingales (harness.stats.sequential) — are updated. At the sampler level (`SamplerSource.monitors`,
one set per law): a Dirichlet–multinomial e-process per tested position on the omnibus tests'
coarsening and one on the 99 % nucleus' tail (tokens where p = 0 fail at once), a one-sided process per
acceptance, and a serial bet on the first token's randomized PIT for row independence.

One family of M = (fixed-n gating tests) + (e-processes) shares the false-alarm rate α. A run stops at
the first e-process with log e ≥ log(M/α) (Ville + Bonferroni: ≤ α/M per process under any monitoring),
or at a deterministic failure. Otherwise it reaches the planned rows, and Holm at α over all M tests
decides: the fixed-n tests (planned at the per-test rate α/M, so the stated detectable TV holds)
together with the e-processes' anytime p-values 1/sup e. Every p-value is valid whenever the run stops,
so the family-wise false-alarm rate stays ≤ α under this optional stopping.

Calibration and samples-to-verdict: `specdec campaign sequential` (suites/campaigns/sequential.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.check.config import CheckConfig
from harness.check.driver import look_schedule, run_battery
from harness.check.report import CheckReport
from harness.check.sampler_sequential import law_processes, mass_above  # noqa: F401 - public names
from harness.check.sampler_source import SamplerSource

_schedule = look_schedule  # the old private name


def run_sampler_check_sequential(impl: Callable, config: CheckConfig | None = None, *, impl_name: str = "impl",
                                 dtype: torch.dtype = torch.float32, progress: Callable[[int], None] | None = None,
                                 **fields) -> CheckReport:
    """The sampler-level check in sequential mode: `run_sampler_check` with `sequential=True` (`config` or
    `fields` of CheckConfig say the rest; every default is CheckConfig's)."""
    config = CheckConfig.build(config, **{"level": "sampler", **fields, "sequential": True})
    return run_battery(SamplerSource(impl, dtype=dtype, device=config.device), config, impl_name=impl_name,
                       progress=progress)


def family_size(cases: list | None, seed: int) -> int:
    """M: the e-processes plus the fixed-n gating tests that share the false-alarm rate."""
    config = CheckConfig(level="sampler", cases=cases, seed=seed, sequential=True)
    source = SamplerSource(None)
    cells = source.cells(config)
    return sum(cell.declared_tests() + 1 + sum(len(m.processes) for m in source.monitors(cell, config))
               for cell in cells)
