"""harness.executor: the in-process and dask executors agree; finished cells survive a killed worker and a
rerun, and are never computed twice."""

from __future__ import annotations

import functools
import json
import os
import signal
import zlib

import pytest

from harness.errors import HarnessError
from harness.executor import DaskExecutor, Journal, LocalExecutor, run_cells
from tests.impls.cells import logged_run_task, seeded_cell, starts


def _cells(n: int, log_dir=None, sleep_s=0.0) -> dict[str, tuple]:
    return {f"cell-{s}": (s, str(log_dir) if log_dir else None, sleep_s) for s in range(n)}


def _strip(result: dict, *keys) -> dict:
    return {k: v for k, v in result.items() if k not in keys}


def test_journal_skips_finished_cells_and_ignores_a_torn_line(tmp_path):
    journal = Journal(tmp_path / "cells.jsonl")
    for s in (0, 3):
        journal.append(f"cell-{s}", seeded_cell(s))
    with open(journal.path, "a") as f:
        f.write('{"key": "cell-1", "rec')  # a writer killed mid-line
    logs = tmp_path / "log"
    logs.mkdir()
    with LocalExecutor(1) as ex:
        done = run_cells(ex, seeded_cell, _cells(5, logs), journal=Journal(journal.path))
    assert sorted(starts(logs)) == [1, 2, 4]  # only the unfinished cells ran, the torn one among them
    assert [_strip(done[f"cell-{s}"], "pid") for s in range(5)] == [_strip(seeded_cell(s), "pid") for s in range(5)]
    assert sorted(Journal(journal.path).load()) == [f"cell-{s}" for s in range(5)]
    assert Journal(journal.path, fresh=True).load() == {}


@pytest.mark.end_to_end
def test_unreachable_scheduler_is_a_usage_error():
    with pytest.raises(HarnessError, match="cannot reach the dask scheduler"), \
            DaskExecutor(scheduler="tcp://127.0.0.1:9", timeout_s=2):
        pass
    with pytest.raises(HarnessError, match="either a scheduler address or a number"):
        DaskExecutor()


@pytest.mark.slow
def test_dask_local_cluster_gives_the_in_process_results(tmp_path):
    with LocalExecutor(1) as ex:
        local = run_cells(ex, seeded_cell, _cells(8))
    with DaskExecutor(workers=2) as ex:
        remote = run_cells(ex, seeded_cell, _cells(8), journal=Journal(tmp_path / "j.jsonl"))
        pids = set(ex.worker_pids().values())
    assert {k: _strip(v, "pid") for k, v in remote.items()} == {k: _strip(v, "pid") for k, v in local.items()}
    assert {r["pid"] for r in remote.values()} <= pids and os.getpid() not in pids


def _kill_other_worker(ex: DaskExecutor, last_pid: int) -> int:
    """SIGKILL the worker that did not just deliver a result: it is computing one right now."""
    victim = next(pid for pid in ex.worker_pids().values() if pid != last_pid)
    os.kill(victim, signal.SIGKILL)
    return victim


@pytest.mark.slow
def test_killed_worker_loses_nothing_and_nothing_finished_is_recomputed(tmp_path):
    logs = tmp_path / "log"
    logs.mkdir()
    journal = Journal(tmp_path / "cells.jsonl")
    cells = _cells(12, logs, sleep_s=0.6)
    finished_before_kill, victim = {}, []
    with DaskExecutor(workers=2) as ex:
        def stop():  # called after each journaled result: kill once, after the fourth
            if len(journal.load()) == 4 and not victim:
                finished_before_kill.update(journal.load())
                victim.append(_kill_other_worker(ex, list(finished_before_kill.values())[-1]["pid"]))
            return False

        done = run_cells(ex, seeded_cell, cells, journal=journal, stop=stop)
    assert victim and len(finished_before_kill) == 4
    assert sorted(done) == sorted(cells) and sorted(journal.load()) == sorted(cells)
    assert all(_strip(done[k], "pid") == _strip(seeded_cell(cells[k][0]), "pid") for k in cells)
    runs = starts(logs)
    for key in finished_before_kill:
        assert len(runs[cells[key][0]]) == 1, f"{key} was finished before the kill and ran again"
    retried = [s for s, pids in runs.items() if len(pids) > 1]
    assert retried and all(runs[s][0] == victim[0] for s in retried)  # the lost cell ran again elsewhere
    assert sum(len(p) for p in runs.values()) == len(cells) + len(retried)


ZOO = ["--quick", "--seeds", "3", "--control-seeds", "4", "--only", "always_accept", "reference_verify",
       "always_reject"]


def _verdicts(rows: list[dict]) -> list[dict]:
    return [_strip(r, "worker_seconds") for r in rows]


def _zoo_rows(out, *where: str) -> list[dict]:
    """The zoo (`specdec mutants`) on the campaign runner, its cells where `where` says; its rows."""
    from harness.runner import run

    assert run("zoo", [*ZOO, "--out", str(out), *where]) in (0, 1)
    return json.loads((out / "campaign.json").read_text())["rows"]


@pytest.fixture(scope="module")
def in_process_campaign(tmp_path_factory):
    return _zoo_rows(tmp_path_factory.mktemp("in-process"), "--local-workers", "1")


@pytest.mark.slow
def test_campaign_on_two_dask_workers_gives_the_in_process_verdicts(in_process_campaign, tmp_path):
    rows = _zoo_rows(tmp_path, "--workers", "2")
    assert _verdicts(rows) == _verdicts(in_process_campaign)
    by_name = {r["name"]: r for r in rows}
    assert by_name["always_accept"]["rate_at_gate"] == 1.0 and by_name["reference_verify"]["failed_runs"] == 0
    assert len(Journal(tmp_path / "journal.jsonl").load()) == sum(r["runs"] for r in rows)


@pytest.mark.slow
def test_campaign_completes_after_a_worker_is_killed_and_recomputes_nothing_finished(in_process_campaign, tmp_path):
    """The zoo's cells (its plan, as the runner hands them out) on two dask workers, one killed mid-run."""
    from harness.cli import policy

    zoo = policy("zoo")
    plan = zoo.ZooConfig(quick=True, seeds=3, control_seeds=4, only=ZOO[6:]).plan()
    logs = tmp_path / "log"
    logs.mkdir()
    journal = Journal(tmp_path / "cells.jsonl")
    finished_before_kill, victim = {}, []
    with DaskExecutor(workers=2) as ex:
        def progress(done, total):
            if done == 3 and not victim:
                finished_before_kill.update(journal.load())
                victim.append(_kill_other_worker(ex, list(finished_before_kill.values())[-1]["pid"]))

        cells = zoo.plan_cells(plan)
        done = run_cells(ex, functools.partial(logged_run_task, log_dir=str(logs)), cells, journal=journal,
                         encode=zoo.encode_record, decode=zoo.decode_record, progress=progress)
    result = zoo.summarize(plan, [done[k] for k in cells if k in done])
    assert victim and len(finished_before_kill) == 3
    assert _verdicts(json.loads(json.dumps(result["rows"]))) == _verdicts(in_process_campaign)
    runs = starts(logs)
    for key in finished_before_kill:
        assert len(runs[zlib.crc32(key.encode())]) == 1, f"{key} was finished before the kill and ran again"
    assert any(len(p) > 1 and p[0] == victim[0] for p in runs.values())  # the lost run was retried
    lines = journal.path.read_text().splitlines()
    assert len(lines) == len(set(journal.load())) == sum(r["runs"] for r in result["rows"])  # each run once


def _counts(measurement):
    """A measurement without its timers (every key ending in 'seconds')."""
    if isinstance(measurement, dict):
        return {k: _counts(v) for k, v in measurement.items() if not k.endswith("seconds")}
    return measurement


@pytest.mark.slow
def test_bench_on_a_local_dask_cluster_gives_the_in_process_counts(tmp_path, monkeypatch):
    """`specdec bench --workers 2`: token-count cells (deterministic) come back identical, each row journaled."""
    import json

    from harness.bench import plan as bench_plan
    from harness.bench.config import BenchConfig
    from harness.bench.runner import run_bench

    sweep = bench_plan.Sweep("tokens", ("const-a0.8",), gammas=(1, 2, 3), temperatures=(1.0,), prompts=64,
                         max_new_tokens=0, repeats=1, min_row_steps=150)
    monkeypatch.setitem(bench_plan._SUITES, "counts", bench_plan.SuiteSpec("counts", lambda quick: [sweep], "test suite"))

    def measurements(run) -> dict:
        lines = (run.out_dir / "rows.jsonl").read_text().splitlines()
        return {r["cell_id"]: _counts(r["measurement"]) for r in map(json.loads, lines)}

    here = run_bench(BenchConfig(suite="counts", out=str(tmp_path / "here")))
    there = run_bench(BenchConfig(suite="counts", out=str(tmp_path / "there"), workers=2))
    assert len(here.computed) == 3 and sorted(there.computed) == sorted(here.computed) and not there.unfinished
    assert measurements(there) == measurements(here)
    again = run_bench(BenchConfig(suite="counts", out=str(tmp_path / "there"), workers=2))
    assert again.computed == [] and sorted(again.resumed) == sorted(here.computed)  # nothing measured twice


@pytest.mark.slow
def test_mutants_cli_resume_skips_finished_runs_and_bad_workers_exit_2(tmp_path, capsys):
    from harness.cli import main

    out = tmp_path / "z"
    argv = ["mutants", "--quick", "--only", "always_accept", "--seeds", "2", "--out", str(out)]
    assert main(argv) == 0
    journal = (out / "journal.jsonl").read_text()
    assert len(journal.splitlines()) == 2
    first = (out / "campaign.json").read_text()
    assert main(argv) == 0  # a rerun resumes: everything finished, nothing runs, same rows
    assert (out / "journal.jsonl").read_text() == journal
    assert json.loads((out / "campaign.json").read_text())["rows"] == json.loads(first)["rows"]
    capsys.readouterr()
    assert main([*argv, "--workers", "0"]) == 2
    err = capsys.readouterr().err
    assert "--workers must be >= 1" in err and "Traceback" not in err


def test_deadline_and_stop_at_spellings():
    from harness.executor import deadline, parse_stop_at

    now = [1_000.0]
    stop = deadline(budget_s=5, clock=lambda: now[0])
    assert not stop()
    now[0] = 1_006.0
    assert stop()
    assert not deadline(clock=lambda: now[0])()  # no limit: never stops
    assert deadline(stop_at="1005", clock=lambda: now[0])()  # a Unix time already past
    assert parse_stop_at("12:30", now=86_400 * 3 + 5) == 86_400 * 3 + 12 * 3600 + 30 * 60  # HH:MM is UTC, today
    assert parse_stop_at(None) is None
    for bad in ("25:00", "noon", "1:2:3"):
        with pytest.raises(HarnessError, match="--stop-at"):
            parse_stop_at(bad)


def test_run_cells_past_its_deadline_runs_nothing_but_returns_the_journal(tmp_path):
    journal = Journal(tmp_path / "cells.jsonl")
    journal.append("cell-0", seeded_cell(0))
    logs = tmp_path / "log"
    logs.mkdir()
    with LocalExecutor(1) as ex:
        done = run_cells(ex, seeded_cell, _cells(3, logs), journal=journal, stop=lambda: True)
    assert sorted(done) == ["cell-0"] and starts(logs) == {}
