"""The bench on CUDA (device synchronization, CUDA pairs): runs only where a CUDA device exists."""

import json

import pytest
import torch

from harness.bench.config import BenchConfig
from harness.bench.runner import run_bench

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_tiny_grid_on_cuda(tmp_path):
    result = run_bench(BenchConfig(pairs=("toy",), device="cuda", gammas=(1, 2), temperatures=(0.0, 1.0),
                                   repeats=2, prompts=1, max_new_tokens=8, compare_hf=True, out=str(tmp_path)))
    rows = json.loads((result.out_dir / "rows.json").read_text())["rows"]
    assert {r["kind"] for r in rows} == {"ar", "spec", "compare"}
    assert all(r["device"].startswith("cuda") for r in rows)
    assert all(r["speedup_median"] > 0 for r in rows if r["kind"] == "spec")
