"""Cost model: break-even acceptance and the measured pass costs (toy pair)."""

from __future__ import annotations

import json

import pytest
import torch

from harness.bench.theory import expected_tokens_per_call
from harness.pairs import get_pair
from suites.campaigns.bench_costs import break_even_alpha, cost_model, main


@pytest.mark.parametrize("gamma,r,c", [(1, 1.0, 0.1), (2, 1.4, 0.2), (4, 2.0, 0.05), (8, 3.0, 0.3)])
def test_break_even_alpha_solves_speedup_one(gamma, r, c):
    a = break_even_alpha(gamma, r, c)
    assert a is not None and 0 < a < 1
    assert expected_tokens_per_call(a, gamma) == pytest.approx(r + gamma * c, rel=1e-9)
    assert expected_tokens_per_call(a * 0.99, gamma) < r + gamma * c  # below α* it does not pay off


def test_break_even_edge_cases():
    assert break_even_alpha(3, 1.0, 0.0) == pytest.approx(0.0, abs=1e-12)  # a free draft pays at any α
    assert break_even_alpha(2, 2.5, 0.3) is None  # 3 tokens at most, but a step costs 3.1 passes


def test_cost_model_on_toy(tmp_path):
    torch.set_num_threads(1)
    pair = get_pair("toy")
    result = cost_model(pair.target, {"toy draft": pair.draft}, pair.prompts[0], vocab=pair.vocab_size,
                        gammas=(1, 2), repeats=2, alphas={"toy draft": 0.6})
    assert set(result["target_seconds"]) == {"1", "2", "3"} and all(v > 0 for v in result["target_seconds"].values())
    assert [row["gamma"] for row in result["rows"]] == [1, 2]
    assert all(row["c"] > 0 and row["speedup_at_measured_alpha"] > 0 for row in result["rows"])


def test_costs_cli_writes_report(tmp_path):
    assert main(["--pair", "toy", "--repeats", "1", "--threads", "1", "--out", str(tmp_path)]) == 0
    assert "Break-even" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "costs.json").read_text())["config"]["pair"] == "toy"
    assert main(["--pair", "nope", "--out", str(tmp_path)]) == 2


def test_cost_model_times_its_passes_as_cells_of_the_one_runner_without_a_journal(monkeypatch):
    """A ratio comes from one run: the timings go through `run_cells` with no journal (never resumed)."""
    from harness import executor
    from suites.campaigns import bench_costs

    seen = []

    def spy(ex, fn, cells, **kw):
        seen.append((list(cells), kw.get("journal")))
        return executor.run_cells(ex, fn, cells, **kw)

    monkeypatch.setattr(bench_costs, "run_cells", spy)
    pair = get_pair("toy")
    result = cost_model(pair.target, {"toy draft": pair.draft}, pair.prompts[0], vocab=pair.vocab_size,
                        gammas=(1,), repeats=1)
    assert seen == [(["target/k=1", "target/k=2", "draft/toy draft"], None)]
    assert set(result["target_seconds"]) == {"1", "2"} and result["rows"][0]["c"] > 0
