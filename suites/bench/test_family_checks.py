"""pytest-benchmark timings of the block family: the sampler check of the (vectorised) block reference on
every default case (target ≤ 60 s on 2 cores), the draft-step check of it, and the acceptance bounds
per case (target ≤ 1 s each). Run alone (heavy): `pytest suites/bench/test_family_checks.py` on an otherwise idle machine."""

import pytest
import torch

from harness.check.draft_step import run_draft_step_check
from harness.check.sampler import plan_cases, run_sampler_check
from harness.stats.bounds import acceptance_bound, block_acceptance
from specdec_ref.adapters import block_draft_and_verify, block_verify
from suites.catalogues.sampler import CASES


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("check,impl", [(run_sampler_check, block_verify), (run_draft_step_check, block_draft_and_verify)],
                         ids=["sampler", "draft_step"])
def test_block_reference_check_all_default_cases(benchmark, one_thread, check, impl):
    report = benchmark.pedantic(lambda: check(impl, impl_name="block", seed=0), rounds=1, iterations=1)
    assert report.verdict == "pass"
    benchmark.extra_info.update(seconds=report.seconds, rows=report.samples, cases=len(report.cases))


@pytest.mark.parametrize("plan", plan_cases(CASES, 0), ids=lambda plan: plan.case.name)
def test_acceptance_bounds_per_case(benchmark, plan):
    bound = benchmark.pedantic(lambda: (acceptance_bound(plan.p, plan.q), block_acceptance(plan.p, plan.q)),
                               rounds=3, iterations=1)
    assert (bound[0].value >= bound[1] - 1e-12).all()
