"""pytest-benchmark: the whole tree check of the vectorized reference on the default tree cases.

    OMP_NUM_THREADS=1 pytest suites/bench/test_tree_check_bench.py --benchmark-min-rounds=3

Target: ≤ 60 s on 2 cores. Each round clears the plan cache, so the time includes planning
(the reference's pilot run that estimates how often each node is reached) as a fresh process pays it.
The planned rows, the number of gating tests and the verdict go to extra_info.
"""

import torch

from harness.check.tree import plan_case, run_tree_check
from specdec_ref.adapters import tree_verify_specinfer


def _fresh_check():
    plan_case.cache_clear()
    return run_tree_check(tree_verify_specinfer, seed=0)


def test_tree_check_reference_default_cases(benchmark):
    torch.set_num_threads(1)
    report = benchmark.pedantic(_fresh_check, rounds=3, iterations=1)
    assert report.verdict == "pass"
    benchmark.extra_info.update(rows=report.samples, gating_tests=len(report.tests), cases=len(report.cases))
