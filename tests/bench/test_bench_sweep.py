"""`specdec bench` end to end on a tiny suite: files written, resumability, the token formula."""

import json

import pytest

from harness.bench import measure
from harness.bench import plan as bench_plan
from harness.bench.cells import Cell
from harness.bench.config import BenchConfig
from harness.bench.runner import run_bench
from harness.bench.summarize import stats_summary

TINY = [
    bench_plan.Sweep("tokens", ("const-a0.8",), gammas=(1, 2), temperatures=(1.0,), prompts=64, max_new_tokens=0,
                 repeats=1, min_row_steps=150),
    bench_plan.Sweep("timing", ("const-a0.8",), gammas=(1, 2), temperatures=(1.0,), prompts=1, max_new_tokens=8,
                 repeats=2, synthetic_cost_ms=(1.0, 0.2)),
    bench_plan.Sweep("compare", ("toy",), gammas=(2,), temperatures=(1.0,), prompts=1, max_new_tokens=6, repeats=1),
]


@pytest.fixture
def tiny_suite(monkeypatch):
    monkeypatch.setitem(bench_plan._SUITES, "tiny", bench_plan.SuiteSpec("tiny", lambda quick: list(TINY), "test suite"))
    return "tiny"


class MeasureRecorder:
    """Stands in for measure.measure_cell: records the cells measured, can die on the n-th one."""

    def __init__(self, real):
        self.real = real
        self.calls: list[str] = []
        self.interrupt_at: int | None = None

    def __call__(self, pair, cell):
        self.calls.append(cell.id)
        if len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt  # what Ctrl-C in the middle of a cell does
        return self.real(pair, cell)


@pytest.fixture
def recorder(monkeypatch):
    rec = MeasureRecorder(measure.measure_cell)
    monkeypatch.setattr(measure, "measure_cell", rec)
    return rec


@pytest.mark.end_to_end
def test_tiny_sweep_writes_rows_report_and_figures(tmp_path, tiny_suite):
    result = run_bench(BenchConfig(suite=tiny_suite, out=str(tmp_path)))
    out = tmp_path / "tiny"
    for name in ("rows.jsonl", "rows.csv", "rows.json", "report.md", "speedup_vs_gamma.png", "speedup_ratio_vs_gamma.png",
                 "tokens_per_call_vs_gamma.png", "accepted_hist.png", "acceptance_per_position.png",
                 "reference_vs_assisted.png"):
        assert (out / name).is_file(), name
    report = (out / "report.md").read_text()
    for figure in ("speedup_vs_gamma.png", "tokens_per_call_vs_gamma.png", "accepted_hist.png",
                   "acceptance_per_position.png", "reference_vs_assisted.png"):
        assert f"]({figure})" in report
    rows = json.loads((out / "rows.json").read_text())["rows"]
    assert {r["kind"] for r in rows} == {"tokens", "ar", "spec", "compare"}
    assert len(rows) == len(result.plan.cells) == 2 + 3 + 1
    for row in rows:  # provenance in every record
        assert row["git_commit"] and row["utc_time"] and row["versions"]["torch"] and row["device"]
        assert row["seed"] == 0
    spec = [r for r in rows if r["kind"] == "spec"]
    for row in spec:
        assert row["acceptance_rate"] == pytest.approx(0.8, abs=1e-6)  # const pair: α is exact
        assert row["speedup_median"] > 0 and row["predicted_speedup"] > 0 and row["c"] > 0
        assert len(row["speedup_per_repeat"]) == 2
        assert sum(row["accepted_hist"]) == row["full_row_steps"]
        assert len(row["acceptance_per_position"]) == row["gamma"]
    assert {r["best_gamma"] for r in spec} <= {1, 2}
    compare = next(r for r in rows if r["kind"] == "compare")
    assert compare["hf_speedup_median"] > 0 and compare["ref_over_hf_speedup_median"] > 0
    assert "specdec bench --suite tiny" in report


@pytest.mark.end_to_end
def test_rerun_skips_finished_cells_and_resumes_after_interruption(tmp_path, tiny_suite, recorder):
    config = BenchConfig(suite=tiny_suite, out=str(tmp_path))
    cells = bench_plan.make_plan(config).cells
    recorder.interrupt_at = 3
    with pytest.raises(KeyboardInterrupt):
        run_bench(config)
    assert len((tmp_path / "tiny" / "rows.jsonl").read_text().splitlines()) == 2  # finished cells were kept

    recorder.interrupt_at, recorder.calls = None, []
    second = run_bench(config)
    assert recorder.calls == [c.id for c in cells[2:]]  # only the unfinished cells were measured
    assert second.resumed == [c.id for c in cells[:2]]

    recorder.calls = []
    third = run_bench(config)
    assert recorder.calls == []
    assert len(third.resumed) == len(cells) and len(third.rows) == len(cells)

    recorder.calls = []
    run_bench(BenchConfig(suite=tiny_suite, out=str(tmp_path), resume=False, gammas=(1,)))
    assert len(recorder.calls) == 4  # --no-resume measures every cell of the (smaller) plan again


def test_token_formula_holds_on_a_constant_alpha_pair():
    """~3000 full-γ row-steps: the mean must sit within 4 standard errors and 4% of the formula."""
    from harness.pairs import get_pair

    cell = Cell(kind="tokens", pair="const-a0.6", gamma=3, temperature=1.0, top_k=None, top_p=None, prompts=512,
                max_new_tokens=8, repeats=1, warmup=0, synthetic_cost_ms=None, device="cpu", dtype=None, seed=3,
                threads=1, min_row_steps=3000)
    m = measure.measure_tokens(get_pair(cell.pair), cell)
    row = stats_summary(m["stats"]["ref"], cell.gamma)
    assert row["full_row_steps"] >= 3000
    assert row["acceptance_rate"] == pytest.approx(0.6, abs=1e-6)
    predicted = (1 - 0.6**4) / 0.4
    assert row["predicted_tokens_per_call"] == pytest.approx(predicted)
    assert abs(row["tokens_per_call"] - predicted) <= 4 * row["tokens_per_call_se"]
    assert abs(row["tokens_ratio"] - 1) <= 0.04
