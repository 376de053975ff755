"""A campaign's report, written one way for every campaign of the runner (harness.runner's `Run`).

    header(run, *more)         the provenance line: "Generated DATE · commit `C` · DEVICE · K of N planned cells
                               made · wall S s on WHERE · load average L at start" (`more`: items the campaign adds)
    table(header, rows)        a markdown table (GitHub's: a "|" inside a cell is escaped); `cell` formats a value
    num / pct / rate           a number, a share, and "k/n" with its Clopper–Pearson 95% interval
    not_run(why, what)         "WHAT: not run: WHY"
    rerun(run)                 "Command: `…`": the command that reproduces the run (Run.command)
    write(path, text)          writes the report unless it already says the same apart from its header line, so
                               that regenerating a report leaves an unchanged file alone (its date and commit are
                               those of the run that last changed it)
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

GENERATED = "Generated "  # the header line's first word: `write` ignores the lines that start with it
MISSING = "–"  # a value that is not there (None, NaN) in every table


def where_text(where) -> str:
    """Where the cells ran (a harness.executor.WhereConfig): this process, local processes or dask workers."""
    if where is None:
        return "in this process"
    if getattr(where, "scheduler", None):
        return f"on the workers of the dask scheduler {where.scheduler}"
    if getattr(where, "workers", None):
        return f"on a local dask cluster of {where.workers} worker processes"
    n = getattr(where, "local_workers", 1) or 1
    return "in this process" if n == 1 else f"on {n} worker processes"


def header(run, *more: str) -> str:
    """The report's provenance line, from a runner `Run`: when and at which commit it was written, the device, the
    cells made of those planned, the wall time and where the cells ran (a --report-only run made none: it says it
    was written from the journal: the seconds its cells record, summed), the load average when the run started; then
    `more`."""
    p = run.provenance
    items = [f"{GENERATED}{p.get('utc_time', '?')}", f"commit `{p.get('git_commit', '?')}`", str(p.get("device", "?")),
             f"{len(run.done)} of {len(run.cells)} planned cells made"]
    if getattr(run.runner, "report_only", False):  # no cell ran: the cells' own seconds, where they record them
        took = sum(r["seconds"] for r in run.done.values()
                   if isinstance(r, dict) and isinstance(r.get("seconds"), (int, float)))
        items.append("written from the journal (--report-only)" + (f", the cells took {took:.0f} s" if took else ""))
    else:
        items.append(f"wall {run.seconds:.0f} s {where_text(run.where)}")
    load = getattr(run, "load", None)
    if load:
        items.append(f"load average {load[0]:.2f} at start")
    return " · ".join([*items, *(m for m in more if m)])


def versions(run, *names: str) -> str:
    """"torch 2.13.0 · transformers 5.24.0": the versions of `names` in the run's provenance (for `header`)."""
    found = run.provenance.get("versions") or {}
    return " · ".join(f"{n} {found[n]}" for n in names if n in found)


def escape(text: str) -> str:
    """A "|" inside a table cell, escaped (GitHub ends the cell at a bare one, inside a code span as well)."""
    return re.sub(r"(?<!\\)\|", r"\\|", text)


def cell(value: Any, digits: int = 3) -> str:
    """A table cell: None and NaN are MISSING, a float has `digits` decimals, a string is escaped, else str()."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return escape(value) if isinstance(value, str) else str(value)


def table(head: list[str], rows: list[list]) -> str:
    """A markdown table: `head`, then one line per row (each value through `cell`)."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


markdown_table = table  # the bench's name (harness.bench.report)


def num(value: Any, spec: str = ".3g", missing: str = MISSING) -> str:
    """A number in format `spec`, or `missing` for None / NaN / a value that is not a number."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or (isinstance(value, float) and
                                                                          not math.isfinite(value)):
        return missing
    return format(value, spec)


def pct(value: Any, digits: int = 1, missing: str = MISSING) -> str:
    """A share as a percentage: 0.1234 -> "12.3%"."""
    return missing if num(value) == MISSING else f"{100 * value:.{digits}f}%"


def rate(k: int, n: int, *, ci: bool = True) -> str:
    """"k/n", with `ci` its Clopper–Pearson 95% interval: "k/n (lo%–hi%)" (harness.stats.rates.rate_text)."""
    if not ci:
        return f"{k}/{n}"
    from harness.stats.rates import rate_text

    return rate_text(k, n)


def not_run(why: str, what: str | None = None) -> str:
    """"WHAT: not run: WHY" (or "not run: WHY"): a part or a cell the report has no record of, and why."""
    return f"{what}: not run: {why}" if what else f"not run: {why}"


def rerun(run) -> str:
    """The line naming the command that reproduces the run (flags that differ from their defaults; the same
    command resumes it from OUT/journal.jsonl)."""
    return f"Command: `{run.command}`"


def _content(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith(GENERATED)]


def unchanged(path: str | Path, text: str) -> bool:
    """`path` holds `text` already, apart from its header line(s)."""
    path = Path(path)
    try:
        return _content(path.read_text(encoding="utf-8")) == _content(text)
    except (FileNotFoundError, UnicodeDecodeError):
        return False


def write(path: str | Path, text: str) -> bool:
    """Write the report `text` to `path` (atomically), unless the file says the same apart from its header line;
    True when written."""
    from harness.records import atomic_write_text

    if unchanged(path, text):
        return False
    atomic_write_text(path, text)
    return True
