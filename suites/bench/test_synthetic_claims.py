"""The synthetic sweep's claims, checked on a full run (slow: ~10 min on 2 CPU cores; resumable).

Runs (or resumes) `specdec bench --suite synthetic` into $SPECDEC_BENCH_OUT (default results/bench), so
after a completed `nox -s bench` the cells are read back, not measured again. Claims (Leviathan et al.
2023, const-α toy pairs, α ∈ {0.2 … 0.95}, γ = 1..8, T = 1):

- tokens per target call within ±3% of (1 − α^{γ+1}) / (1 − α), each cell over ≥ 10,000 full-γ row-steps;
- with every forward padded to 40 ms (target) / 4 ms (draft), the walltime speedup reaches
  ≥ 0.9 × (1 − α^{γ+1}) / ((1 − α)(γc + 1)) at the measured α and c, for every γ ≤ 8.
"""

import os

import pytest

from harness.bench.config import BenchConfig
from harness.bench.runner import run_bench
from harness.bench.summarize import SPEEDUP_FLOOR, TOKEN_TOLERANCE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def synthetic_rows():
    import torch

    torch.set_num_threads(1)
    result = run_bench(BenchConfig(suite="synthetic", out=os.environ.get("SPECDEC_BENCH_OUT", "results/bench")))
    assert not result.unfinished
    return result.rows


def _cells(rows, kind):
    return [r for r in rows if r["kind"] == kind]


def test_token_formula_within_3_percent_over_10k_row_steps(synthetic_rows):
    cells = _cells(synthetic_rows, "tokens")
    assert len(cells) == 6 * 8
    off = [(r["pair"], r["gamma"], round(r["tokens_ratio"], 4)) for r in cells
           if abs(r["tokens_ratio"] - 1) > TOKEN_TOLERANCE]
    assert not off, f"outside ±3%: {off}"
    assert min(r["full_row_steps"] for r in cells) >= 10_000


def test_walltime_speedup_tracks_the_prediction(synthetic_rows):
    cells = [r for r in _cells(synthetic_rows, "spec") if r["gamma"] <= 8]
    assert len(cells) == 6 * 8
    low = [(r["pair"], r["gamma"], round(r["speedup_ratio"], 3)) for r in cells if r["speedup_ratio"] < SPEEDUP_FLOOR]
    assert not low, f"below {SPEEDUP_FLOOR} x predicted: {low}"


def test_measured_alpha_and_cost_ratio_are_what_the_pairs_promise(synthetic_rows):
    for r in _cells(synthetic_rows, "spec") + _cells(synthetic_rows, "tokens"):
        assert r["alpha"] == pytest.approx(float(r["pair"].removeprefix("const-a")), abs=1e-5)
    for r in _cells(synthetic_rows, "spec"):
        assert 0.05 < r["c"] < 0.3  # 4 ms / 40 ms padding plus the runners' own overhead
