"""Progress of long loops: one line with the phase, the plan's total and an ETA, at every level.

In a terminal the line is redrawn in place (at least every second); when stderr is not a terminal (nox into a log file,
CI) one line is written every `interval_s` seconds (default 30, `SPECDEC_PROGRESS_S` overrides it) by a timer,
so the log shows the run is alive even while one long call is in progress:

    verify sampler [case zipf1000-high-alpha, 9/10]: 812,000/879,411 rows (92%), 48% of the work, 01:02 elapsed, ETA 01:07

A check's driver (harness.check.driver) gives the line its **plan**: one `Step` per cell of the battery, with
the phase it belongs to (a sampler case; generation, context or greedy cells; the engine's law, API battery or
logprobs cells), the units its draws will count (rows, samples, requests; None where not known in advance),
a cost per unit and the cost of its tests once drawn. The costs are relative (the sources say how their work
scales: the sampler's input floats per row, the generation level's new tokens per sample, ...); the ETA is
the time per unit of cost measured so far, since the plan was given, times the cost left in *every* step of
the plan. Without a plan (bench, numerics, a matrix) it is the old count: elapsed × (total − n) / n.

Library code takes a plain `progress(n)` callable; a `Progress` is one (`__call__` = `update`), and adds
`row()` (one row of a wrapped B = 1 implementation, counted until the batch's own update arrives),
`set_total()` (a total known only once the models are loaded) and the plan methods `plan()`, `enter()`,
`extend()` and `tested()` that the driver calls when its `progress` has them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import threading
import time

from tqdm import tqdm

INTERVAL_S = 30.0
TERMINAL_REFRESH_S = 1.0  # a terminal's line is redrawn at least this often (elapsed and ETA move on)
TERMINAL_THROTTLE_S = 0.2  # and at most this often on updates


def default_interval() -> float:
    """Seconds between plain progress lines: 30, or `SPECDEC_PROGRESS_S` (a positive number)."""
    text = os.environ.get("SPECDEC_PROGRESS_S")
    try:
        value = float(text) if text else INTERVAL_S
    except ValueError:
        return INTERVAL_S
    return value if value > 0 else INTERVAL_S


def _clock(seconds: float) -> str:
    return tqdm.format_interval(seconds)


@dataclasses.dataclass
class Step:
    """One cell of a check's plan, as the progress line sees it.

    key        the driver's cell name (what `enter` names)
    phase      what the line calls the kind of work: "case", "generation cells", "context cells", "greedy", "law",
               "API battery", "logprobs"
    units      progress units its draws count (rows, samples, requests), None when not known in advance
    cost       relative cost of one unit (with units None: of the whole draw)
    test_cost  relative cost of its tests once drawn (scoring, statistics)"""

    key: str
    phase: str
    units: float | None
    cost: float = 1.0
    test_cost: float = 0.0
    done: float = 0.0  # units counted so far
    drawn: bool = False  # its draws are over (its tests started, or the driver moved on)
    tested: bool = False

    def weight(self) -> float:
        return (self.cost * self.units if self.units is not None else self.cost) + self.test_cost

    def weight_done(self) -> float:
        if self.units is None:
            draw = self.cost if (self.drawn or self.tested) else 0.0
        elif self.drawn or self.tested:
            draw = self.cost * self.units
        else:
            draw = self.cost * min(self.done, self.units)
        return draw + (self.test_cost if self.tested else 0.0)


class Progress:
    def __init__(self, total: float | None = None, desc: str = "", unit: str = "rows", *,
                 interval_s: float | None = None, stream=None, terminal: bool | None = None):
        self.total, self.desc, self.unit, self.n = total, desc, unit, 0.0
        self._stream = stream if stream is not None else sys.stderr
        self._terminal = self._stream.isatty() if terminal is None else terminal
        self._interval = default_interval() if interval_s is None else interval_s
        self._started = time.monotonic()
        self._planned_at: float | None = None  # the ETA's clock starts with the plan (model loading is before it)
        self.steps: list[Step] = []
        self._by_key: dict[str, int] = {}
        self._current: int | None = None
        self._testing = False
        self._provisional = 0  # rows counted by row() that the next update(n) will include
        self._postfix = ""
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._drawn_at = 0.0  # a terminal's last redraw
        # a line every interval (none at the start: a run refused at once prints only its error); a terminal's
        # line is redrawn every second so elapsed and ETA move on during one long call
        self._timer = threading.Thread(target=self._tick, name="specdec-progress", daemon=True)
        self._timer.start()

    # -- counting -------------------------------------------------------------------------------------
    def update(self, n: float = 1) -> None:
        """n units finished (authoritative: rows already shown by row() are not counted twice)."""
        with self._lock:
            counted = min(n, self._provisional)
            self._provisional -= counted
            self._advance(n - counted)

    __call__ = update

    def row(self) -> None:
        """One row finished inside a batch whose update() comes later."""
        with self._lock:
            if self.total is None or self.n < self.total:
                self._provisional += 1
                self._advance(1)

    def set_total(self, total: float | None) -> None:
        with self._lock:
            if not self.steps:  # a plan's total is the sum of its steps
                self.total = total
            self._redraw()

    def set_postfix(self, text: str) -> None:
        self._postfix = text
        self._redraw()

    def _advance(self, n: float) -> None:
        self.n += n
        if self._current is not None:
            self.steps[self._current].done += n
        self._redraw(throttle=True)

    # -- the plan (harness.check.driver) ------------------------------------------------------------------
    def plan(self, steps: list[Step], unit: str | None = None) -> None:
        """The run's cells, in the order they run (their units: `unit`); the ETA's clock starts now."""
        with self._lock:
            self.unit = unit or self.unit
            self.steps = list(steps)
            self._by_key = {s.key: i for i, s in enumerate(self.steps)}
            self._planned_at = time.monotonic()
            self._current = None
            self._sum_total()
            self._redraw()

    def enter(self, key: str, testing: bool = False) -> None:
        """The driver draws (or, `testing`, tests) cell `key` now; the cell drawn before is over."""
        with self._lock:
            i = self._by_key.get(key)
            if i is None:
                return
            if testing:
                self.steps[i].drawn = True
            self._current, self._testing = i, testing
            self._redraw()

    def extend(self, key: str, units: float | None) -> None:
        """Cell `key` draws `units` more than planned (a top-up): the total grows."""
        with self._lock:
            i = self._by_key.get(key)
            if i is None or units is None or self.steps[i].units is None:
                return
            self.steps[i].units += units
            self.steps[i].drawn = False
            self._sum_total()

    def tested(self, key: str) -> None:
        with self._lock:
            i = self._by_key.get(key)
            if i is not None:
                self.steps[i].drawn = self.steps[i].tested = True
                self._testing = False
                self._redraw()

    def _sum_total(self) -> None:
        known = [s.units for s in self.steps if s.units is not None]
        self.total = sum(known) if known else None

    # -- what the line says -------------------------------------------------------------------------------
    def fraction(self) -> float | None:
        """Share of the plan's cost done (the ETA's basis); without a plan, of the total count."""
        if self.steps:
            total = sum(s.weight() for s in self.steps)
            return sum(s.weight_done() for s in self.steps) / total if total > 0 else None
        if self.total:
            return min(1.0, self.n / self.total)
        return None

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left: time per unit of cost so far × the cost left (None until some work is done)."""
        now = time.monotonic() if now is None else now
        f = self.fraction()
        if f is None or f <= 0 or f >= 1:
            return None
        since = now - (self._planned_at if self.steps else self._started)
        return since * (1 - f) / f

    def phase_text(self) -> str:
        if self._current is None:
            return ""
        step = self.steps[self._current]
        return (f"{step.phase} {step.key}" if step.phase == "case" else f"{step.phase}: {step.key}") + \
            f", {self._current + 1}/{len(self.steps)}" + (", testing" if self._testing else "")

    def line(self) -> str:
        with self._lock:
            now = time.monotonic()
            elapsed = now - self._started
            done = f"{self.n:,.0f}" + (f"/{self.total:,.0f}" if self.total else "") + f" {self.unit}"
            if self.total:
                done += f" ({100 * min(1.0, self.n / self.total):.0f}%)"
            if self.steps:
                unknown = sum(s.units is None for s in self.steps)
                if unknown:
                    done += f" + {unknown} cell{'s' if unknown > 1 else ''} not in this count"
                f = self.fraction()
                done += f", {100 * (f or 0):.0f}% of the work"
            eta = self.eta(now)
            tail = f", ETA {_clock(eta)}" if eta is not None else ""
            phase = self.phase_text()
            head = f"{self.desc} [{phase}]" if phase else self.desc
            return f"{head}: {done}, {_clock(elapsed)} elapsed{tail}" + (f" [{self._postfix}]" if self._postfix else "")

    def _redraw(self, throttle: bool = False, final: bool = False) -> None:
        """A terminal: the line again, in place (cut to the terminal's width, so that it never wraps)."""
        if not self._terminal:
            return
        now = time.monotonic()
        if throttle and now - self._drawn_at < TERMINAL_THROTTLE_S:
            return
        self._drawn_at = now
        width = shutil.get_terminal_size((100, 20)).columns - 1
        self._stream.write("\r" + self.line()[:width] + "\x1b[K" + ("\n" if final else ""))
        self._stream.flush()

    def _log(self, suffix: str = "") -> None:
        print(self.line() + (f" ({suffix})" if suffix else ""), file=self._stream, flush=True)

    def _tick(self) -> None:
        every = TERMINAL_REFRESH_S if self._terminal else self._interval
        while not self._stop.wait(every):
            with self._lock:
                if self._terminal:
                    self._redraw()
                else:
                    self._log()

    def close(self, failed: bool = False) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        with self._lock:
            self._current, self._testing = None, False
            if self._terminal:  # the last state stays on screen; a run that failed ends the line for its error
                self._redraw(final=True)
            elif not failed:  # a run that raised prints its error line, not "done"
                self._log("done")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(failed=exc_type is not None)


@contextlib.contextmanager
def api_display(progress, level: str, stream=None):
    """`specdec.verify`'s `progress=`: a callable as given; False: none; None (the default): this progress line on
    stderr when stderr is a terminal (redrawn in place, closed with the run), nothing otherwise."""
    if progress is False:
        yield None
        return
    stream = stream if stream is not None else sys.stderr
    if progress is not None or not getattr(stream, "isatty", lambda: False)():
        yield progress
        return
    bar = Progress(None, f"verify {level}", stream=stream, terminal=True)
    try:
        yield bar
    except BaseException:
        bar.close(failed=True)
        raise
    bar.close()


# -- what Ctrl-C leaves (harness.cli) -------------------------------------------------------------------------
_DEFAULT_OUT = {"bench": "bench", "numerics": "numerics", "demo": "campaign.demo", "mutants": "campaign.zoo"}


def _outputs(args) -> list[str]:
    """The paths a command writes to: its --json / --out (a campaign's among its own options), else its results
    folder by default (suites/outputs.py)."""
    named = [v for v in (getattr(args, "json", None), getattr(args, "out", None)) if isinstance(v, str) and v]
    rest = list(getattr(args, "args", None) or [])  # `specdec campaign NAME --out DIR`
    named += [rest[i + 1] for i, a in enumerate(rest[:-1]) if a == "--out"]
    named += [a.split("=", 1)[1] for a in rest if a.startswith("--out=")]
    if named:
        return named
    command = getattr(args, "command", None)
    if command == "campaign":
        key = f"campaign.{getattr(args, 'name', '')}"
    elif command == "verify" and getattr(args, "vary", None):
        key = "verify-matrix"
    else:
        key = _DEFAULT_OUT.get(command)
    if key is None:
        return []
    try:
        from harness.policy import results_folder

        return [results_folder(key)]
    except Exception:  # noqa: BLE001 - no policy table here: only the named outputs count
        return []


def written_since(paths: list[str], started: float) -> list[str]:
    """Files under `paths` (files or folders) modified at or after `started` (time.time())."""
    found = []
    for path in paths:
        if os.path.isfile(path):
            candidates = [path]
        elif os.path.isdir(path):
            candidates = [os.path.join(d, f) for d, _, files in os.walk(path) for f in files]
        else:
            candidates = []
        for f in candidates:
            try:
                if os.stat(f).st_mtime >= started:
                    found.append(f)
            except OSError:
                continue
    return found


def interrupted_line(args, started: float) -> str:
    """The line after Ctrl-C: what this run really kept (the files it wrote, where), or that it wrote nothing."""
    paths = _outputs(args)
    written = written_since(paths, started)
    if not written:
        return "specdec: interrupted: nothing was written" + (
            f" (nothing new at {', '.join(paths)})" if paths else "")
    if len(written) == 1:
        return f"specdec: interrupted: kept {written[0]} (written by this run)"
    where = os.path.commonpath(written)
    return f"specdec: interrupted: kept {len(written)} files written by this run under {where}"
