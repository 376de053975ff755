"""Executors for independent cells (campaign runs, benchmark cells): in this machine, or on dask.distributed.

One interface, `Executor.as_completed(fn, args)`, yields `(index, fn(*args[index]))` as results arrive;
`run_cells` adds the bookkeeping every caller needs: cells already in a jsonl `Journal` are not run
again, and each new result is appended (flushed and fsynced) the moment it reaches this process.

- `LocalExecutor(workers)`: a plain loop in this process (workers ≤ 1) or a process pool.
- `DaskExecutor(scheduler=ADDRESS)` connects to a running dask scheduler (`dask scheduler` +
  `dask worker ADDRESS` on each machine, with this package installed there);
  `DaskExecutor(workers=N)` starts a LocalCluster of N single-threaded worker processes on 127.0.0.1.

Why dask.distributed rather than Ray: it is pure pip (already a dependency here, no separate runtime
or object-store daemon to install and keep in version lock); a LocalCluster starts inside a test in
seconds; its futures API (submit / as_completed / release) is exactly "run these cells, keep each
result as it finishes"; and the scheduler itself reschedules the tasks of a worker that dies (up to
`distributed.scheduler.allowed-failures` times, default 3) with no client code.

Nothing finished is lost or recomputed when a worker dies: a cell counts as finished when its result
has reached the client, which journals it and then releases the future at once. dask recomputes a
lost result only while some client still holds its future, so a released, journaled cell is never
run again; a cell whose worker died while computing it (or before its result was fetched) is simply
run again elsewhere. A rerun with the same journal skips every finished cell.
"""

from __future__ import annotations

import calendar
import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from harness.configs import option
from harness.errors import HarnessError
from harness.records import cut_torn_tail


class Executor(Protocol):
    def as_completed(self, fn: Callable, args: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        """Run fn(*args[i]) for every i; yield (i, result) in completion order."""

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc) -> None: ...


class LocalExecutor:
    """This machine: a loop in this process (workers ≤ 1) or a pool of `workers` processes."""

    def __init__(self, workers: int = 1):
        self.workers = workers
        self._pool = None

    def __enter__(self) -> LocalExecutor:
        if self.workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(max_workers=self.workers)
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def as_completed(self, fn, args):
        if self._pool is None:
            for i, a in enumerate(args):
                yield i, fn(*a)
            return
        from concurrent.futures import as_completed

        index = {self._pool.submit(fn, *a): i for i, a in enumerate(args)}
        for future in as_completed(index):
            yield index.pop(future), future.result()


class DaskExecutor:
    """dask.distributed: an existing scheduler (`scheduler`) or a LocalCluster of `workers` processes."""

    def __init__(self, scheduler: str | None = None, workers: int | None = None, *, timeout_s: float = 30):
        if (scheduler is None) == (workers is None):
            raise HarnessError("a dask executor needs either a scheduler address or a number of local workers")
        if workers is not None and workers < 1:
            raise HarnessError(f"--workers must be >= 1, got {workers}")
        self.scheduler, self.workers, self.timeout_s = scheduler, workers, timeout_s
        self.client = self._cluster = None

    def __enter__(self) -> DaskExecutor:
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - dask[distributed] is a dependency
            raise HarnessError("the dask executor needs dask[distributed] (pip install 'dask[distributed]')") from exc
        try:
            if self.scheduler is not None:
                self.client = Client(self.scheduler, timeout=self.timeout_s)
            else:
                # Single-threaded processes: the cells are torch work that sets its own thread count.
                self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                             host="127.0.0.1", dashboard_address=None)
                self.client = Client(self._cluster, timeout=self.timeout_s)
        except (OSError, TimeoutError) as exc:
            self.__exit__()
            where = self.scheduler or f"a local cluster of {self.workers}"
            raise HarnessError(f"cannot reach the dask scheduler at {where}: {exc}") from exc
        return self

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()
        self.client = self._cluster = None

    def worker_pids(self) -> dict[str, int]:
        """Worker address -> process id (tests kill one)."""
        return self.client.run(os.getpid)

    def as_completed(self, fn, args):
        from distributed import as_completed

        futures = [self.client.submit(fn, *a, pure=False) for a in args]
        index = {f.key: i for i, f in enumerate(futures)}
        pending = as_completed(futures)
        del futures  # only `pending` holds them now, so each one can be released when it is done
        try:
            for future in pending:
                result = future.result()
                i = index[future.key]
                future.release()  # finished: a worker dying from now on does not bring it back
                yield i, result
        finally:
            for future in list(pending.futures):  # stopped early (time budget, error): drop the rest
                future.cancel()


def make_executor(scheduler: str | None = None, workers: int | None = None, *, local_workers: int = 1) -> Executor:
    """--scheduler ADDRESS or --workers N: dask; neither: this machine with `local_workers` processes."""
    if scheduler is not None:
        return DaskExecutor(scheduler=scheduler)
    if workers is not None:
        return DaskExecutor(workers=workers)
    return LocalExecutor(local_workers)


class Journal:
    """Append-only jsonl of finished cells, one {"key", "record"} object per line.

    A line is written whole, flushed and fsynced before the next cell is reported; a process killed
    mid-write leaves at most one torn last line, which `load` ignores (that cell is simply run again).
    """

    def __init__(self, path: str | Path, *, fresh: bool = False):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if fresh or not self.path.exists():
                self.path.write_text("", encoding="utf-8")
            cut_torn_tail(self.path)
        except OSError as exc:
            raise HarnessError(f"cannot write the cell journal {self.path}: {exc}") from exc

    def load(self) -> dict[str, Any]:
        records = {}
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from a killed writer
            records[entry["key"]] = entry["record"]
        return records

    def append(self, key: str, record: Any) -> None:
        line = json.dumps({"key": key, "record": record}, sort_keys=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def run_cells(
    executor: Executor,
    fn: Callable,
    cells: dict[str, tuple],  # key -> the arguments of fn
    *,
    journal: Journal | None = None,
    encode: Callable[[Any], Any] = lambda r: r,  # result -> JSON-able record
    decode: Callable[[Any], Any] = lambda r: r,  # record -> result
    progress: Callable[[int, int], None] | None = None,
    stop: Callable[[], bool] | None = None,  # checked after each result: True leaves the rest unrun
) -> dict[str, Any]:
    """key -> result for every finished cell (journaled before or computed now)."""
    done = {k: decode(r) for k, r in journal.load().items() if k in cells} if journal else {}
    todo = [k for k in cells if k not in done]
    if progress:
        progress(len(done), len(cells))
    if stop and stop():  # out of time before the first cell
        return done
    for i, result in executor.as_completed(fn, [cells[k] for k in todo]):
        if journal:
            journal.append(todo[i], encode(result))
        done[todo[i]] = result
        if progress:
            progress(len(done), len(cells))
        if stop and stop():
            break
    return done


# --- the campaign runner's options, one spelling for every campaign of suites/campaigns -------------------------

JOURNAL = "journal.jsonl"  # the one journal name: OUT/journal.jsonl, resumed unless --fresh (campaigns, the zoo, --vary)
_WHEN = "campaign runner (journal, resume, when to stop)"
_WHERE = "campaign runner: where the cells run"


@dataclasses.dataclass
class ScheduleConfig:
    """When no new cell starts, and whether the journal is kept: the same options on every campaign."""

    fresh: bool = option(False, "--fresh", "forget the journal: run every cell again (default: a rerun resumes, "
                         "keeping every finished cell)", action="store_true", group=_WHEN)
    stop_at: str | None = option(None, "--stop-at", "start no cell after this time: a Unix time or HH:MM (UTC, today)",
                                 metavar="WHEN", group=_WHEN)
    budget_s: float | None = option(None, "--budget-s", "start no cell after S seconds", float, "S", group=_WHEN)


@dataclasses.dataclass
class WhereConfig:
    """Where the cells run: this process, a pool of local processes, or dask workers."""

    local_workers: int = option(1, "--local-workers", "processes on this machine (1: in this process)", int, "N",
                                group=_WHERE)
    scheduler: str | None = option(None, "--scheduler", "run the cells on this dask scheduler's workers",
                                   metavar="ADDRESS", group=_WHERE)
    workers: int | None = option(None, "--workers", "run the cells on a local dask cluster of N processes", int, "N",
                                 group=_WHERE)


def parse_stop_at(value: str | float | None, now: float | None = None) -> float | None:
    """A Unix time from '1796188984', '1796188984.5' or 'HH:MM' (UTC, today); None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except ValueError:
        pass
    try:
        hours, minutes = (int(x) for x in value.split(":"))
        if not (0 <= hours < 24 and 0 <= minutes < 60):
            raise ValueError
    except ValueError:
        raise HarnessError(f"--stop-at {value!r}: give a Unix time or HH:MM (UTC)") from None
    day = time.gmtime(time.time() if now is None else now)
    return float(calendar.timegm((day.tm_year, day.tm_mon, day.tm_mday, hours, minutes, 0)))


def deadline(stop_at: str | float | None = None, budget_s: float | None = None,
             clock: Callable[[], float] = time.time) -> Callable[[], bool]:
    """`stop` for `run_cells`: True once the Unix time `stop_at` or `budget_s` seconds from now has passed."""
    limits = [t for t in (parse_stop_at(stop_at, clock()), None if budget_s is None else clock() + budget_s)
              if t is not None]
    end = min(limits, default=None)
    return lambda: end is not None and clock() > end
