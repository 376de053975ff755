"""Server engines: one subprocess on a 127.0.0.1 port, started bounded in time and always stopped.

`ServerEngine` is the base of every server adapter: it writes `command(port)` and, where they differ from the
defaults, `health` (the path that answers 200 once the model is loaded) and `startup_timeout_s`. Stopping sends
SIGTERM, waits `term_timeout_s`, then SIGKILLs; `stop_report` records which, so a server that ignores SIGTERM is
reported ("ignored SIGTERM ...: killed"), never silently left running or silently killed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

from harness.engines.base import Engine
from harness.errors import HarnessError

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A port free on `host` now (the OS's choice)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen, term_timeout_s: float) -> str:
    """SIGTERM, wait, then SIGKILL: how it stopped, in words (also for a process that had already exited)."""
    if proc.poll() is not None:
        return f"had exited with code {proc.returncode}"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=term_timeout_s)
        return f"stopped by SIGTERM in {time.monotonic() - started:.1f} s (code {proc.returncode})"
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return f"ignored SIGTERM for {term_timeout_s:g} s: killed (SIGKILL)"


class ServerEngine(Engine):
    """An engine served by a subprocess: subclasses write `command(port) -> argv`."""

    kind = "server"
    health = "/health"
    startup_timeout_s = 120.0
    term_timeout_s = 15.0
    env: dict[str, str] = {"OMP_NUM_THREADS": "1"}

    def command(self, port: int) -> list[str]:
        raise NotImplementedError

    def log_path(self):
        out = self.setup.out
        if out is None:
            return None
        out.mkdir(parents=True, exist_ok=True)
        return out / f"{self.name}-{self.setup.method or 'off'}.log"

    def start(self) -> None:
        import httpx

        port = free_port()
        cmd = self.command(port)
        path = self.log_path()
        self._log = open(path or os.devnull, "w")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
                                      start_new_session=True)
        url = f"http://{HOST}:{port}"
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            if self._proc.poll() is not None:
                raise HarnessError(f"engine {self.name} exited with code {self._proc.returncode} while starting "
                                   f"(log: {path or 'none kept: give Setup.out'})")
            try:
                if httpx.get(url + self.health, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise HarnessError(f"engine {self.name} did not answer on {url}{self.health} within "
                                   f"{self.startup_timeout_s:.0f} s (log: {path or 'none kept'})")
            time.sleep(0.25)
        self.url = url

    def stop(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None:
            self.stop_report = stop_process(proc, self.term_timeout_s)
            self._proc = None
        log = getattr(self, "_log", None)
        if log is not None:
            log.close()
            self._log = None
        self.url = None
        super().stop()
