"""Progress of long loops: a tqdm bar (total + ETA) in a terminal, plain log lines otherwise.

When stderr is not a terminal (nox into a log file, CI), a bar would either print nothing or a
stream of carriage returns; instead one line is written every `interval_s` seconds (default 30)
by a timer, so the log shows the run is alive even while one long call is in progress:

    verify sampler: 120,000/410,000 rows (29%), 1:02 elapsed, ETA 2:30

Library code takes a plain `progress(n)` callable; a `Progress` is one (`__call__` = `update`), and
adds `row()` (one row of a wrapped B = 1 implementation, counted until the batch's own update
arrives) and `set_total()` (a total known only once the models are loaded).
"""

from __future__ import annotations

import sys
import threading
import time

from tqdm import tqdm

INTERVAL_S = 30.0


def _clock(seconds: float) -> str:
    return tqdm.format_interval(seconds)


class Progress:
    def __init__(self, total: float | None = None, desc: str = "", unit: str = "rows", *,
                 interval_s: float = INTERVAL_S, stream=None, terminal: bool | None = None):
        self.total, self.desc, self.unit, self.n = total, desc, unit, 0.0
        self._stream = stream if stream is not None else sys.stderr
        self._terminal = self._stream.isatty() if terminal is None else terminal
        self._interval = interval_s
        self._started = time.monotonic()
        self._provisional = 0  # rows counted by row() that the next update(n) will include
        self._postfix = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bar = tqdm(total=total, desc=desc, unit=unit, file=self._stream, dynamic_ncols=True) \
            if self._terminal else None
        self._timer = None
        if not self._terminal:
            self._log("started")
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
            self.total = total
            if self._bar is not None:
                self._bar.total = total
                self._bar.refresh()

    def set_postfix(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(text)
        self._postfix = text

    def _advance(self, n: float) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)

    # -- plain log ------------------------------------------------------------------------------------
    def line(self) -> str:
        elapsed = time.monotonic() - self._started
        done = f"{self.n:,.0f}" + (f"/{self.total:,.0f}" if self.total else "") + f" {self.unit}"
        if self.total:
            done += f" ({100 * min(1.0, self.n / self.total):.0f}%)"
        eta = ""
        if self.total and 0 < self.n < self.total:
            eta = f", ETA {_clock(elapsed * (self.total - self.n) / self.n)}"
        return f"{self.desc}: {done}, {_clock(elapsed)} elapsed{eta}" + (f" [{self._postfix}]" if self._postfix else "")

    def _log(self, suffix: str = "") -> None:
        print(self.line() + (f" ({suffix})" if suffix else ""), file=self._stream, flush=True)

    def _tick(self) -> None:
        while not self._stop.wait(self._interval):
            self._log()

    def close(self, how: str = "done") -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._bar is not None:
            self._bar.close()
        else:
            self._log(how)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("done" if exc_type is None else "stopped")
