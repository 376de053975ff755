"""How `specdec serve` starts and stops: uvicorn in a thread on a socket bound here, stopped within seconds.

A stop (SIGTERM, SIGINT, `Served.stop`, or --max-requests reached) sets the backend's `stopping` event first:
every generation in flight aborts at its next forward pass of the target or the draft (a pre-hook raises
`ServerStopping`, harness.served.serve), the scorer between its chunks, and each request in flight is answered
503. uvicorn then closes the listening socket (the port is free at once) and waits at most STOP_GRACE_S for the
connections to close. A generation that never calls the models again (an implementation stuck outside them) is
abandoned: after STOP_GRACE_S + ABANDON_S the process exits without waiting for it. A process stopped by a signal
then exits at once (`os._exit`, stdio flushed: the interpreter's teardown alone takes seconds on a loaded machine).
Exit code 0 for a stop that was asked for (SIGTERM, SIGINT, --max-requests), whichever way it ended; a second
signal exits at once, 0 too.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import sys
import threading
import time

from harness.errors import HarnessError

STOP_GRACE_S = 3.0  # uvicorn's wait for the connections in flight (answered 503 by then) before it cancels them
ABANDON_S = 2.0  # then this long for the worker threads, before the process exits without them
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (0: a free port); HarnessError (exit 2) where it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise HarnessError(f"cannot listen on {host}:{port}: {exc}; choose another --port") from exc
    return sock


@dataclasses.dataclass
class Running:
    """A uvicorn server serving `app` in a daemon thread on `sock`."""

    server: object  # uvicorn.Server
    thread: threading.Thread
    sock: socket.socket
    backend: object  # harness.served.serve.GenerationBackend (its `stopping` event)

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def wait_started(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise HarnessError(f"the server did not start on {self.sock.getsockname()[0]}:{self.port}")
            time.sleep(0.01)

    def stop(self, join_s: float = STOP_GRACE_S + ABANDON_S) -> bool:
        """Abort what is in flight, stop accepting, wait up to `join_s` for uvicorn; True when it has stopped."""
        self.backend.stopping.set()
        self.server.should_exit = True
        self.thread.join(timeout=join_s)
        stopped = not self.thread.is_alive()
        self.sock.close()
        return stopped


def start(app, backend, sock: socket.socket, *, max_requests: int | None = None) -> Running:
    """Serve `app` on the bound `sock` in a daemon thread (uvicorn leaves the signals to the caller there)."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", lifespan="off", limit_max_requests=max_requests,
                            timeout_graceful_shutdown=STOP_GRACE_S)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="specdec-serve")
    thread.start()
    return Running(server, thread, sock, backend)


def run_until_stopped(running: Running) -> int:
    """Block the main thread until a signal of SIGNALS or the server's own end (--max-requests); stop within
    STOP_GRACE_S + ABANDON_S of the signal. A signal ends the process there (exit 0); the server's own end returns
    the exit code, 0 (or ends the process where a request is still being handled: abandoned)."""
    got: list[int] = []

    def on_signal(sig, frame):
        if got:  # a second signal: stop now
            _exit_now(f"specdec serve: {signal.Signals(sig).name} again: exiting without waiting", 0)
        got.append(sig)

    previous = {sig: signal.signal(sig, on_signal) for sig in SIGNALS}
    try:
        while running.thread.is_alive() and not got:
            running.thread.join(timeout=0.2)
        started = time.monotonic()
        in_flight = running.backend.in_flight
        stopped = running.stop()
        if not stopped or _generating(running.backend):
            _exit_now("specdec serve: a request did not stop (the implementation no longer calls the models): "
                      "abandoned", 0)
        if got:  # the process was asked to end: it does now, without the interpreter's slow teardown (seconds of
            # module finalization on a loaded machine; a server has nothing left to write)
            _exit_now(f"specdec serve: {signal.Signals(got[0]).name}: stopped in {time.monotonic() - started:.1f} s "
                      f"({in_flight} request(s) in flight aborted, answered 503)", 0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _generating(backend) -> bool:
    """Whether requests are still being handled (in uvicorn's worker threads, which are not daemons: the
    interpreter would wait for them at exit) ABANDON_S after uvicorn stopped."""
    deadline = time.monotonic() + ABANDON_S
    while backend.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(backend.in_flight)


def _exit_now(message: str, code: int) -> None:
    import logging

    print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    logging.shutdown()
    os._exit(code)
