"""Orchestration of a benchmark run: plan → measure the unfinished cells → summarize → report.

Finished cells are read back from OUT/RUN/rows.jsonl and not measured again, so an interrupted sweep
resumes where it stopped — but only cells measured at this commit on this machine (harness.bench.store):
numbers from elsewhere are measured again, and the report says how many cells were measured now and
how many resumed, and when each were taken. Each cell is written there as it finishes, also when cells
are measured on dask workers (--scheduler / --workers, harness.executor). Pairs are built once per run
(per worker). Nothing here prints except the optional progress display (harness.progress, on stderr).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

from harness.bench import measure
from harness.bench.cells import Cell
from harness.bench.config import BenchConfig, command_line
from harness.bench.plan import Plan, make_plan
from harness.bench.store import RowStore
from harness.bench.summarize import summarize
from harness.executor import make_executor
from harness.pairs import ModelPair
from harness.progress import Progress
from harness.records import provenance


@dataclasses.dataclass
class BenchRun:
    """What a run did and where it wrote it."""

    plan: Plan
    out_dir: Path
    rows: list[dict]  # summary rows of every measured cell of the plan (this run's and earlier runs')
    computed: list[str]  # ids of the cells measured by this call
    resumed: list[str]  # ids found finished in rows.jsonl (this commit, this machine) and skipped
    unfinished: list[str]  # ids left for a rerun (time budget exhausted)
    files: dict[str, Path]
    seconds: float
    remeasured: dict[str, str] = dataclasses.field(default_factory=dict)  # id -> why its old record was not reused
    notes: list[str] = dataclasses.field(default_factory=list)  # freshness and clamping, as in the report

    @property
    def skipped(self) -> str | None:
        return self.plan.skip_reason


class PairCache:
    """Builds each (pair, device, dtype) once per run."""

    def __init__(self):
        self._pairs: dict[tuple, ModelPair] = {}

    def get(self, cell: Cell) -> ModelPair:
        key = (cell.pair, cell.checkpoints, cell.device, cell.dtype)
        if key not in self._pairs:
            self._pairs[key] = _build_pair(cell)
        return self._pairs[key]


def _build_pair(cell: Cell) -> ModelPair:
    from harness.models.hf_pair import pair_from_checkpoints, resolve_dtype
    from harness.pairs import get_pair

    dtype = None if cell.dtype is None else resolve_dtype(cell.dtype, device=cell.device)
    if cell.checkpoints is not None:
        return pair_from_checkpoints(*cell.checkpoints, device=cell.device, dtype=dtype)
    return get_pair(cell.pair, device=cell.device, dtype=dtype)


def _cost_estimate(cell: Cell) -> float:
    """Rough seconds, only to make the progress bar's ETA honest across very unequal cells."""
    if cell.kind == "tokens":
        return 1e-4 * cell.min_row_steps * (cell.gamma + 1)
    target_s, draft_s = (cell.synthetic_cost_ms or (5.0, 2.0))
    per_token = {"ar": target_s, "spec": (target_s + cell.gamma * draft_s) / 2.5,
                 "compare": 2 * target_s + 2 * (target_s + cell.gamma * draft_s) / 2.5}[cell.kind] / 1e3
    if cell.kind == "spec" and cell.interleave:
        per_token += target_s / 1e3
    return per_token * cell.max_new_tokens * cell.prompts * cell.repeats + 0.2


def _record(cell: Cell, pair: ModelPair, measurement: dict) -> dict:
    return {"cell_id": cell.id, "cell": cell.to_dict(), "measurement": measurement,
            "pair": {"name": pair.name, "description": pair.description, "meta": pair.meta},
            "provenance": provenance(seed=cell.seed, device=cell.device, dtype=cell.dtype or _model_dtype(pair.target))}


def _model_dtype(model) -> str:
    return str(getattr(model, "dtype", "unknown"))  # transformers models expose their parameters' dtype


_WORKER_PAIRS = PairCache()  # in a dask worker process: each pair built once for all the cells it measures


def measure_record(cell: Cell, pairs: PairCache | None = None) -> dict:
    """Measure one cell and wrap it as its rows.jsonl record (here or on a dask worker)."""
    pair = (pairs or _WORKER_PAIRS).get(cell)
    return _record(cell, pair, measure.measure_cell(pair, cell))


def _measured(config: BenchConfig, todo: list[Cell], over_budget) -> Iterator[tuple[Cell, dict]]:
    """(cell, record) as cells finish: one after another here, or on dask workers (--scheduler /
    --workers; each cell is then timed on its worker, so workers sharing a machine share its cores).
    No cell starts once `over_budget()` (dask: the cells not yet finished are cancelled)."""
    if config.scheduler is None and config.workers is None:
        pairs = PairCache()
        for cell in todo:
            if over_budget():
                return
            yield cell, measure_record(cell, pairs)
        return
    with make_executor(config.scheduler, config.workers) as executor:
        for i, record in executor.as_completed(measure_record, [(c,) for c in todo]):
            yield todo[i], record
            if over_budget():
                return


def run_bench(config: BenchConfig, *, progress: bool = False) -> BenchRun:
    """Run (or resume) the benchmark `config` describes and write its report; returns what happened."""
    started = time.perf_counter()
    plan = make_plan(config)
    out_dir = Path(config.out) / plan.name
    if plan.skip_reason:
        return BenchRun(plan, out_dir, [], [], [], [c.id for c in plan.cells], {}, 0.0)
    store = RowStore(out_dir / "rows.jsonl")
    reusable, foreign = store.resumable() if config.resume else ({}, {})
    records = {c.id: reusable[c.id] for c in plan.cells if c.id in reusable}
    todo = [c for c in plan.cells if c.id not in records]
    resumed = list(records)
    remeasured = {c.id: foreign[c.id] for c in todo if c.id in foreign}
    computed = []
    display = Progress(sum(map(_cost_estimate, todo)), f"bench {plan.name}", unit="est. s") if progress \
        else contextlib.nullcontext()
    with display as bar:
        for cell, record in _measured(config, todo, lambda: plan.time_budget_s is not None
                                      and time.perf_counter() - started > plan.time_budget_s):
            store.append(record)  # persisted as it arrives: an interrupted or distributed run keeps it
            records[cell.id] = record
            computed.append(cell.id)
            if bar is not None:
                bar.set_postfix(f"{len(computed)}/{len(todo)} {cell.label}")
                bar.update(_cost_estimate(cell))
    finished = set(computed)
    unfinished = [c.id for c in todo if c.id not in finished]
    rows = summarize(plan.cells, records)
    notes = [freshness_note(records, computed, resumed, remeasured)] + clamp_notes(plan.cells, records)
    files = {"rows.jsonl": store.path}
    files.update(_write(out_dir, plan, rows, command_line(config), len(unfinished), notes, config))
    return BenchRun(plan, out_dir, rows, computed, resumed, unfinished, files, time.perf_counter() - started,
                    remeasured, notes)


def _span(records: list[dict]) -> str:
    times = sorted(r["provenance"]["utc_time"] for r in records if r.get("provenance", {}).get("utc_time"))
    if not times:
        return "time unknown"
    return f"UTC {times[0]}" if times[0] == times[-1] else f"UTC {times[0]} to {times[-1]}"


def freshness_note(records: dict[str, dict], computed: list[str], resumed: list[str],
                   remeasured: dict[str, str]) -> str:
    """How many cells were measured by this run and how many resumed, and when each were measured."""
    parts = [f"{len(computed)} cells measured by this run"
             + (f" ({_span([records[i] for i in computed])})" if computed else "")]
    if resumed:
        parts.append(f"{len(resumed)} resumed from an earlier run of the same commit on the same machine "
                     f"({_span([records[i] for i in resumed])})")
    else:
        parts.append("none resumed")
    if remeasured:
        example = next(iter(remeasured.values()))
        parts.append(f"{len(remeasured)} earlier records in rows.jsonl not reused ({example})")
    return "; ".join(parts)


def clamp_notes(cells: list[Cell], records: dict[str, dict]) -> list[str]:
    """Cells whose max_new_tokens did not fit the model's context: the clamp is reported, never silent."""
    clamped = [(c, records[c.id]["measurement"].get("max_new_tokens_used")) for c in cells if c.id in records]
    clamped = [(c, used) for c, used in clamped if used is not None and used < c.max_new_tokens]
    if not clamped:
        return []
    asked = sorted({c.max_new_tokens for c, _ in clamped})
    used = sorted({u for _, u in clamped})
    return [f"max_new_tokens clamped to fit the model's context in {len(clamped)} cells: asked "
            f"{', '.join(map(str, asked))}, generated at most {', '.join(map(str, used))} new tokens"]


def _write(out_dir: Path, plan: Plan, rows: list[dict], command: str | None, unfinished: int,
           notes: list[str], config=None) -> dict[str, Path]:
    from harness.bench.report import write_report

    return write_report(out_dir, plan.name, plan.suite, rows, command=command, unfinished=unfinished, notes=notes,
                        config=config)
