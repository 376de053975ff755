"""An engine that runs in a venv of its own (OpenVINO GenAI, ONNX Runtime GenAI: no torch, or none of the project's),
driven through one worker subprocess that speaks JSON lines on stdin / stdout.

`venv_python(env, install)` the worker's Python, named by an environment variable; `dist_version(python, dist)` the
installed version read from the venv's dist-info (nothing is run); `VenvWorker` one worker process: `call(request,
timeout_s) -> reply`, bounded, and `close()`, which always ends it (quit, else terminate, else kill) and says how.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from pathlib import Path

from harness.errors import HarnessError

# A worker module has no __main__ block (tests/test_layout.py): it is run by path, its main() the exit code.
LAUNCH = "import runpy, sys; sys.exit(runpy.run_path(sys.argv[1])['main']())"


class EngineRequestFailed(RuntimeError):
    """The engine refused or aborted a request (an exception inside the engine): the implementation broke."""


def venv_python(env: str, label: str, install: str) -> Path:
    value = os.environ.get(env)
    if not value:
        raise HarnessError(f"{label} runs in its own venv: set ${env} to its python ({install})")
    path = Path(value)
    if not path.exists():
        raise HarnessError(f"${env} names {path}, which does not exist")
    return path


def dist_version(python: Path, dist: str) -> str | None:
    """`dist`'s version from the venv's dist-info folder (nothing is run)."""
    for site in sorted(python.parent.parent.glob("lib/python3*/site-packages")):
        for info in site.glob(f"{dist}-*.dist-info"):
            return info.name[len(f"{dist}-"):-len(".dist-info")]
    return None


def venv_probe(env: str, dist: str, requirement: str):
    """The `installed()` probe of an engine in its own venv: $env names a python whose venv holds `dist`."""
    from harness.engines.base import Probe

    value = os.environ.get(env)
    if not value or not Path(value).exists():
        return Probe(False, f"set ${env} to the python of a venv with {requirement}")
    version = dist_version(Path(value), dist)
    if version is None:
        return Probe(False, f"${env} ({value}) has no {requirement.split('==')[0]} installed")
    return Probe(True, value, version)


class VenvWorker:
    """One worker process of the engine `label` running `worker` (a path) under `python`."""

    label = "the engine"

    def __init__(self, python: Path, worker: Path, log: Path | None = None):
        self.log = open(log, "a") if log else subprocess.DEVNULL  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([str(python), "-c", LAUNCH, str(worker)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)
        self.replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.replies.put(line)
        self.replies.put(None)

    def call(self, request: dict, timeout_s: float) -> dict:
        if self.proc.poll() is not None:
            raise HarnessError(f"the {self.label} worker has exited (code {self.proc.returncode})")
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        try:
            line = self.replies.get(timeout=timeout_s)
        except queue.Empty:
            how = self.close()
            raise EngineRequestFailed(f"{self.label} did not answer {request.get('op')} in {timeout_s:.0f} s "
                                      f"(worker {how})") from None
        if line is None:
            raise HarnessError(f"the {self.label} worker exited during {request.get('op')} (code {self.proc.wait()})")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise HarnessError(f"{self.label} {request.get('op')}: {reply.get('error')}")
        return reply

    def close(self) -> str:
        """Quit, else terminate, else kill; returns which."""
        how = "quit"
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                how = "terminated"
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    how = "killed"
                    self.proc.kill()
                    self.proc.wait()
        if self.log is not subprocess.DEVNULL:
            self.log.close()
        return how
