"""The HTTP side of `specdec serve`: the FastAPI app over a backend (`build_app`), `serving` (in a thread on a free
127.0.0.1 port, always stopped) and `serve_forever` (the CLI's, until SIGTERM / SIGINT)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator

from harness.errors import HarnessError
from harness.served.serve.backend import GenerationBackend
from harness.served.serve.request import RequestError, ServerStopping
from harness.served.serve.streaming import Stream


def build_app(backend: GenerationBackend):
    """The FastAPI app: thin routes over the backend; errors as OpenAI error bodies."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

    app = FastAPI(title="specdec serve", docs_url=None, redoc_url=None)

    def error(message: str, status: int) -> JSONResponse:
        kind = {404: "NotFoundError", 500: "server_error", 503: "service_unavailable"}.get(status,
                                                                                      "invalid_request_error")
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    def route(handler):
        async def endpoint(request: Request):
            try:
                body = await request.json()
            except ValueError:
                return error("the request body is not valid JSON", 400)
            if not isinstance(body, dict):
                return error("the request body must be a JSON object", 400)
            try:  # the model runs in a worker thread: the event loop keeps serving /health and /metrics
                from starlette.concurrency import run_in_threadpool

                reply = await run_in_threadpool(backend.handled(handler), body)
                if isinstance(reply, Stream):
                    return StreamingResponse(reply.lines(), media_type="text/event-stream")
                return JSONResponse(reply)
            except RequestError as exc:
                return error(str(exc), exc.status)
            except Exception as exc:  # noqa: BLE001 - the implementation under test raised: a 500, said plainly
                from specdec_ref.errors import SpecDecInputError

                if backend.stopping.is_set():  # the abort, however the implementation wrapped it
                    stopping = ServerStopping()
                    return error(str(stopping), stopping.status)
                status = 400 if isinstance(exc, SpecDecInputError) else 500
                return error(f"{type(exc).__name__}: {exc}", status)
        endpoint.__annotations__ = {"request": Request}  # postponed annotations would hide the local import
        return endpoint

    app.post("/v1/completions")(route(backend.completion))
    app.post("/v1/chat/completions")(route(backend.chat))
    if backend.dialect == "llama-cpp-python":
        app.post("/extras/tokenize")(route(backend.extras_tokenize))
    else:
        app.post("/tokenize")(route(backend.tokenize))
    app.get("/v1/models")(backend.models)
    app.get("/health")(lambda: {"status": "ok"})
    app.get("/metrics")(lambda: PlainTextResponse(backend.metrics()))
    return app


@dataclasses.dataclass
class Served:
    url: str  # http://127.0.0.1:PORT (no /v1)
    backend: GenerationBackend
    stop: Callable[[], None]  # stops the server now (a test can kill it mid-run)


@contextlib.contextmanager
def serving(impl: Callable, pair, *, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 30.0,
            **backend_options) -> Iterator[Served]:
    """Serve `impl` on `pair` in a background thread; always stopped on exit (generations in flight aborted,
    open connections not drained). port 0: a free port."""
    from harness.served import lifecycle

    backend = GenerationBackend(impl, pair, **backend_options)
    running = lifecycle.start(build_app(backend), backend, lifecycle.bind(host, port))

    def stop():
        running.server.force_exit = True  # abrupt: open connections are not drained
        running.stop(join_s=15)

    try:
        running.wait_started(startup_timeout_s)
        yield Served(f"http://{host}:{running.port}", backend, stop)
    finally:
        stop()


def serve_forever(impl: Callable, pair, *, host: str, port: int, max_requests: int | None = None,
                  startup_timeout_s: float = 60.0, **backend_options) -> int:
    """Blocking server for the CLI: runs until SIGTERM / SIGINT (or after `max_requests` requests), then stops
    within seconds (harness.served.lifecycle); returns the exit code, 0."""
    from harness.served import lifecycle

    if host not in ("127.0.0.1", "localhost", "::1"):
        raise HarnessError(f"specdec serve listens on localhost only (got --host {host}): it runs untrusted code")
    backend = GenerationBackend(impl, pair, **backend_options)
    running = lifecycle.start(build_app(backend), backend, lifecycle.bind(host, port), max_requests=max_requests)
    running.wait_started(startup_timeout_s)
    return lifecycle.run_until_stopped(running)
