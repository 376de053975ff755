"""harness.reporting: a campaign report's header line, tables, rates, and the write that leaves an unchanged report
alone (issue 56, item 7)."""

from __future__ import annotations

import os
import types

from harness.executor import WhereConfig
from harness.reporting import cell, escape, header, not_run, num, pct, rate, rerun, table, where_text, write


def _run(**kw):
    base = dict(provenance={"utc_time": "2026-01-02T03:04:05+00:00", "git_commit": "abc123", "device": "cpu (x86)",
                            "versions": {"torch": "2.13.0"}},
                cells={"a": (), "b": (), "c": ()}, done={"a": {}, "b": {}}, seconds=12.4,
                runner=types.SimpleNamespace(report_only=False), where=WhereConfig(local_workers=2),
                load=(1.5, 1.0, 0.5), command="specdec campaign x --n 2")
    return types.SimpleNamespace(**{**base, **kw})


def test_the_header_line_names_date_commit_device_cells_wall_where_and_load():
    assert header(_run(), "torch 2.13.0") == (
        "Generated 2026-01-02T03:04:05+00:00 · commit `abc123` · cpu (x86) · 2 of 3 planned cells made · wall 12 s "
        "on 2 worker processes · load average 1.50 at start · torch 2.13.0")
    from_journal = header(_run(runner=types.SimpleNamespace(report_only=True), load=None))
    assert from_journal.endswith("2 of 3 planned cells made · written from the journal (--report-only)")
    timed = header(_run(runner=types.SimpleNamespace(report_only=True), done={"a": {"seconds": 2.5}, "b": {}}))
    assert "written from the journal (--report-only), the cells took 2 s · load average" in timed


def test_where_the_cells_ran():
    assert where_text(WhereConfig()) == "in this process"
    assert where_text(WhereConfig(workers=4)) == "on a local dask cluster of 4 worker processes"
    assert where_text(WhereConfig(scheduler="tcp://h:1")) == "on the workers of the dask scheduler tcp://h:1"


def test_a_table_formats_and_escapes_its_cells():
    assert table(["a", "b"], [[1, 0.5], [None, "x|y"]]).splitlines() == [
        "| a | b |", "|---|---|", "| 1 | 0.500 |", "| – | x\\|y |"]
    assert escape("a\\|b|c") == "a\\|b\\|c"  # an escaped bar stays as it is
    assert cell(float("nan")) == "–" and cell(2.0, 1) == "2.0"


def test_numbers_shares_and_rates():
    assert num(0.012345) == "0.0123" and num(None) == "–" and num(True) == "–" and num(3, "d") == "3"
    assert pct(0.1234) == "12.3%" and pct(None, missing="-") == "-"
    assert rate(0, 200) == "0/200 (0.0%–1.8%)" and rate(3, 4, ci=False) == "3/4"
    assert rate(0, 0) == "0/0 (no runs)"


def test_not_run_and_the_rerun_line():
    assert not_run("no llama-server binary", "engine") == "engine: not run: no llama-server binary"
    assert not_run("out of time") == "not run: out of time"
    assert rerun(_run()) == "Command: `specdec campaign x --n 2`"


def test_a_report_whose_content_is_unchanged_but_its_header_is_not_rewritten(tmp_path):
    path = tmp_path / "README.md"
    first = "# T\n\n" + header(_run()) + "\n\n| a |\n|---|\n| 1 |\n"
    assert write(path, first) is True
    os.utime(path, (1_000_000, 1_000_000))
    later = first.replace("2026-01-02T03:04:05+00:00", "2027-05-06T07:08:09+00:00").replace("abc123", "def456")
    assert write(path, later) is False  # only the header line differs: the file is left alone
    assert path.read_text() == first and path.stat().st_mtime == 1_000_000
    changed = later.replace("| 1 |", "| 2 |")
    assert write(path, changed) is True and path.read_text() == changed
