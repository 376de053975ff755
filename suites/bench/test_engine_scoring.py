"""Scoring side of the engine level (ground truth a): returned continuations teacher-forced through the local
float64 target and turned into randomized PIT values, batched vs one sequence per pass, in the same run.

    pytest suites/bench/test_engine_scoring.py --benchmark-only            # toy, and SmolLM2 where installed

Each benchmark writes `tokens_per_s` (returned tokens scored per second) to its extra_info.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.check.exact_laws import target64
from harness.check.pit import pit_values
from harness.check.settings import Setting
from harness.pairs import get_pair, list_pairs

ROWS, LENGTH = 64, 16
SETTING = Setting(0.7, top_p=0.9)
HAVE_SMOLLM2 = any(r["name"] == "smollm2-trunc" and r["available"] for r in list_pairs())


@pytest.fixture(scope="module", params=["toy", pytest.param("smollm2-trunc", marks=[
    pytest.mark.real_model, pytest.mark.skipif(not HAVE_SMOLLM2, reason="the SmolLM2 wheel is not installed")])])
def scoring_case(request):
    torch.set_num_threads(1)
    pair = get_pair(request.param)
    g = torch.Generator().manual_seed(0)
    rows = ROWS if pair.vocab_size <= 64 else ROWS // 4  # V = 49k: fewer rows keep a round in seconds
    tokens = torch.randint(0, pair.vocab_size, (rows, LENGTH), generator=g)  # [rows, LENGTH] returned ids
    prompt = (pair.prompts or [[0]])[0]
    return target64(pair), prompt, tokens, pair.vocab_size


@pytest.mark.parametrize("batch", [64, 1], ids=["batched", "per_sequence"])
def test_scoring_throughput(benchmark, scoring_case, batch):
    model, prompt, tokens, vocab = scoring_case
    u, _, _, _ = benchmark.pedantic(
        pit_values, args=(model, prompt, tokens, SETTING, vocab, np.random.default_rng(0)),
        kwargs={"batch": batch}, rounds=3, warmup_rounds=1)
    assert len(u) == tokens.numel()  # every returned token scored (off-support ones are counted in `off`)
    benchmark.extra_info["tokens_per_s"] = tokens.numel() / benchmark.stats.stats.median
    benchmark.extra_info["shape"] = f"{tokens.shape[0]} rows x {LENGTH} tokens, V={vocab}, batch={batch}"
