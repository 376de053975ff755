"""One server subprocess on 127.0.0.1: started, waited for, always stopped (the engines' shared lifecycle)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator

from harness.errors import HarnessError


@contextlib.contextmanager
def served(cmd: list[str], url: str, health: str, name: str, *, startup_timeout_s: float,
           log_path: str | None = None, describe_command: bool = False) -> Iterator[str]:
    """Start `cmd`, wait until GET url+health answers 200, yield `url`; terminate (then kill) it on exit.
    The server's output goes to `log_path` (or nowhere); it runs with one OpenMP thread."""
    import httpx

    log = open(log_path or os.devnull, "w")  # noqa: SIM115 - closed in finally, after the process
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                where = f"log: {log_path or 'pass log_path to keep it'}"
                raise HarnessError(f"{name} exited with code {proc.returncode} while starting ({where}"
                                   + (f"; command: {' '.join(cmd)})" if describe_command else ")"))
            try:
                if httpx.get(f"{url}{health}", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise HarnessError(f"{name} did not answer on {url} within {startup_timeout_s:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
