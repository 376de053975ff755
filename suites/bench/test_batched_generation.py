"""pytest-benchmark: the reference's batched speculative sampling vs transformers' batched sampling.

    pytest suites/bench/test_batched_generation.py                      # toy guard only (fast)
    pytest suites/bench/test_batched_generation.py -m "slow"            # the SmolLM2 comparison (minutes)

The SmolLM2 case measures both paths on the same 64 sequences and lengths in one run and fails when the
reference is more than 2x slower in tokens/s (the full-size run with the check: specdec campaign bench_batched).
"""

from __future__ import annotations

import pytest
import torch

from harness.models import smollm2
from harness.pairs import get_pair
from suites.campaigns.bench_batched import reference_tokens_per_s, throughput

_available, _why = smollm2.smollm2_available()


def test_toy_batched_generation(benchmark):
    """Regression guard of the batched path's per-call overhead on a toy pair (64 rows, 16 tokens)."""
    pair = get_pair("toy")
    ids = torch.tensor([pair.prompts[0]] * 64)
    result = benchmark.pedantic(reference_tokens_per_s, args=(pair, ids),
                                kwargs=dict(length=16, gamma=3, temperature=1.0, seed=0, cache="batched"),
                                rounds=3, iterations=1)
    assert result["tokens"] == 64 * 16
    benchmark.extra_info.update(tokens_per_s=result["tokens_per_s"], target_calls=result["target_calls"])


@pytest.mark.slow
@pytest.mark.real_model
@pytest.mark.skipif(not _available, reason=f"SmolLM2 not available: {_why}")
def test_smollm2_batched_within_2x_of_transformers(benchmark):
    pair = get_pair("smollm2")
    result = benchmark.pedantic(throughput, args=(pair,), kwargs=dict(rows=64, length=16, gamma=3, per_row_rows=0),
                                rounds=1, iterations=1)
    ratio = result["ratio_transformers_over_batched"]
    benchmark.extra_info.update(ratio_transformers_over_batched=ratio,
                                batched_tokens_per_s=result["batched"]["tokens_per_s"],
                                transformers_tokens_per_s=result["transformers"]["tokens_per_s"])
    assert result["batched"]["tokens"] == result["transformers"]["tokens"] == 64 * 16
    assert ratio <= 2.0, f"reference {ratio:.2f}x slower than transformers' batched sampling"
