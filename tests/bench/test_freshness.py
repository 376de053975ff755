"""Fresh measurements are the default: a sweep resumes only cells of this commit on this machine,
the demo never resumes, every report says what was measured now and what was resumed, and when."""

import json
import os
import shutil
from pathlib import Path

import pytest

from harness import records
from harness.bench import plan as bench_plan
from harness.bench.config import BenchConfig
from harness.bench.runner import run_bench
from harness.bench.store import RowStore

TINY = [bench_plan.Sweep("tokens", ("const-a0.8",), gammas=(1, 2), temperatures=(1.0,), prompts=32, max_new_tokens=6,
                     repeats=1, min_row_steps=40)]
EXAMPLE_ROWS = Path(__file__).resolve().parents[2] / "docs/example-demo/bench/rows.jsonl"


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setitem(bench_plan._SUITES, "fresh", bench_plan.SuiteSpec("fresh", lambda quick: list(TINY), "test suite"))
    return BenchConfig(suite="fresh", out=str(tmp_path))


def _rewrite_provenance(path: Path, **fields) -> None:
    lines = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        record["provenance"].update(fields)
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")


def test_same_commit_same_machine_resumes_and_says_so(tiny, tmp_path):
    first = run_bench(tiny)
    assert len(first.computed) == 2 and first.resumed == []
    second = run_bench(tiny)
    assert second.computed == [] and second.resumed == first.computed
    report = (tmp_path / "fresh" / "report.md").read_text()
    assert "0 cells measured by this run" in report and "2 resumed from an earlier run of the same commit" in report
    assert "UTC " in report  # when the resumed cells were measured


@pytest.mark.parametrize("field,value,reason", [
    ("git_commit", "0" * 40, "measured at commit 000000000000"),
    ("machine", "another-box (arm64, 64 cores)", "measured on another-box"),
    ("git_commit", "unknown", "commit is unknown"),
])
def test_records_from_another_commit_or_machine_are_measured_again(tiny, tmp_path, field, value, reason):
    first = run_bench(tiny)
    _rewrite_provenance(tmp_path / "fresh" / "rows.jsonl", **{field: value})
    again = run_bench(tiny)
    assert again.resumed == [] and again.computed == first.computed
    assert set(again.remeasured) == set(first.computed) and reason in next(iter(again.remeasured.values()))
    report = (tmp_path / "fresh" / "report.md").read_text()
    assert "2 cells measured by this run" in report and "none resumed" in report and reason in report


def test_committed_example_rows_are_never_resumable_here():
    """The demo's documented example was measured at an earlier commit: no run of this code may borrow it."""
    reusable, foreign = RowStore(EXAMPLE_ROWS).resumable()
    assert reusable == {} and len(foreign) > 0


def test_demo_sweep_never_resumes():
    from suites.campaigns.demo import demo_bench_config

    for pair in ("toy", "smollm2"):
        assert demo_bench_config(pair, Path("x"), quick=True).resume is False


@pytest.mark.slow
def test_demo_measures_every_cell_even_over_the_committed_rows(tmp_path, monkeypatch):
    """The issue's fresh clone: results/demo held another commit's rows.jsonl; the demo must measure all cells."""
    from harness.cli import main
    from suites.campaigns import demo

    monkeypatch.setattr(demo, "choose_pair", lambda: ("toy", "the toy pair (test)"))
    (tmp_path / "bench").mkdir()
    shutil.copy(EXAMPLE_ROWS, tmp_path / "bench" / "rows.jsonl")
    assert main(["demo", "--quick", "--out", str(tmp_path)]) == 0
    bench = next(r for r in json.loads((tmp_path / "demo.json").read_text())["rows"] if r["part"] == "bench")
    assert "none resumed" in " ".join(bench["notes"]) and "none resumed" in (tmp_path / "report.md").read_text()


def test_result_files_are_0644_under_the_usual_umask(tmp_path):
    old = os.umask(0o022)
    try:
        records._file_mode.cache_clear()
        for path in (records.atomic_write_text(tmp_path / "a.md", "x"), records.atomic_write_json(tmp_path / "b.json", {})):
            assert oct(path.stat().st_mode & 0o777) == oct(0o644)
        os.umask(0o077)
        records._file_mode.cache_clear()
        assert oct(records.atomic_write_text(tmp_path / "c.md", "x").stat().st_mode & 0o777) == oct(0o600)
    finally:
        os.umask(old)
        records._file_mode.cache_clear()


def test_empty_acceptance_figure_is_neither_written_nor_embedded(tmp_path, monkeypatch):
    from harness.bench import plots
    from harness.bench.report import write_figures

    monkeypatch.setattr(plots, "FIGURES", {"acceptance_per_position.png": plots.acceptance_per_position})
    row = {"kind": "spec", "group": "g", "pair": "p", "sampling": "greedy", "gamma": 2, "acceptance_rate": 0.5,
           "acceptance_per_position": [0.5, 0.5], "reached_per_position": [1, 1]}  # below MIN_REACHED
    assert plots.acceptance_per_position([row]) is None
    (tmp_path / "acceptance_per_position.png").write_bytes(b"stale")
    written = write_figures(tmp_path, [row])
    assert "acceptance_per_position.png" not in written
    assert not (tmp_path / "acceptance_per_position.png").exists()
