"""HTTP client for OpenAI-compatible engines: bounded, retrying, and never silent about failures.

- bounded concurrency (a thread pool of `concurrency` workers sharing one httpx.Client);
- timeouts per request; retries with exponential backoff on connection errors, timeouts, 5xx and
  malformed or truncated JSON (a server dying mid-reply); 4xx are not retried: they are the
  caller's mistake and come back as one clear line;
- every answered request is appended to a JSON-lines record under the run's own `--out`
  (`engine-<config hash>.jsonl`); a rerun with the same configuration reuses it and sends only the
  requests still missing. A truncated last line (the run was killed mid-write) is ignored.

Failures that mean "the run could not be done" raise `EngineError` (a HarnessError: exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from harness.errors import HarnessError
from harness.records import cut_torn_tail

# Request fields that carry a structured-output constraint (OpenAI, vLLM, SGLang and llama.cpp names).
CONSTRAINT_FIELDS = ("response_format", "structured_outputs", "guided_json", "guided_regex", "guided_grammar",
                     "guided_choice", "json_schema", "grammar", "regex", "ebnf")


class EngineError(HarnessError):
    """The engine could not be used (unreachable, refused the request, replied with something unreadable)."""


class EngineUnreachable(EngineError):
    """Every attempt at a request failed (no connection, timeouts, 5xx, unreadable replies): at the start of a
    run the engine is not there (exit 2); after it has answered, it died or hung (the check's finding)."""


RETRYABLE_STATUS = frozenset({500, 502, 503, 504})


def config_hash(config: dict) -> str:
    """Stable short hash of a JSON-able configuration (the record's file name)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


class ResponseStore:
    """Append-only JSON-lines record of {key, response}; the resumable part of a run."""

    def __init__(self, out_dir: str | Path | None, digest: str):
        self.path = Path(out_dir) / f"engine-{digest}.jsonl" if out_dir else None
        self._lock = threading.Lock()
        self._done: dict[str, dict] = {}
        if self.path and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short when the previous run was killed: that request is redone
                self._done[record["key"]] = record["response"]
        if self.path:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.touch()
                cut_torn_tail(self.path)  # else the next put joins the torn line and is lost to the next resume
            except OSError as exc:
                raise HarnessError(f"cannot write the engine record under {out_dir}: {exc}; choose another --out") \
                    from exc

    @property
    def resumed(self) -> int:
        return len(self._done)

    def get(self, key: str) -> dict | None:
        return self._done.get(key)

    def put(self, key: str, response: dict) -> None:
        with self._lock:
            self._done[key] = response
            if self.path:
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps({"key": key, "response": response}) + "\n")
                    f.flush()
                    os.fsync(f.fileno())


class EngineClient:
    """One engine endpoint. `endpoint` may end in /v1 or not."""

    def __init__(self, endpoint: str, *, concurrency: int = 4, timeout_s: float = 120.0, retries: int = 4,
                 backoff_s: float = 0.5, transport=None):
        import httpx

        if not endpoint.startswith(("http://", "https://")):
            raise HarnessError(f"--endpoint must be an http(s) URL such as http://127.0.0.1:8000/v1, got {endpoint!r}")
        if concurrency < 1 or retries < 0 or timeout_s <= 0:
            raise HarnessError("--concurrency must be >= 1, --retries >= 0 and --timeout > 0")
        self.base = endpoint.rstrip("/").removesuffix("/v1")
        self.concurrency, self.retries, self.backoff_s = concurrency, retries, backoff_s
        self._http = httpx.Client(base_url=self.base, timeout=timeout_s,
                                  limits=httpx.Limits(max_connections=concurrency), transport=transport)
        self._transient = (httpx.TransportError, httpx.TimeoutException)
        self.needs_token_names: bool | None = None  # ids only as "token_id:N" logprob names? (found on first use)

    # The coarsening of token ids this client's rows carry ([V] id -> class representative), None: exact ids.
    # harness.served.pieces.PiecesClient sets it once given the local tokenizer (`attach`).
    classes = None

    def attach(self, tokenizer) -> None:
        """Given the local tokenizer before the first completion (the engine check does); nothing to do here."""

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ single requests

    def request(self, method: str, path: str, payload: dict | None = None, *, parse_json: bool = True):
        """One request with retries; returns parsed JSON (or text). EngineError when it cannot be done."""
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                reply = self._http.request(method, path, json=payload)
            except self._transient as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if reply.status_code >= 400 and any(m in _error_message(reply) for m in UNWRITABLE_REPLY):
                raise ReplyNotWritten(f"{self.base}{path} could not write its own reply (HTTP {reply.status_code}: "
                                      f"{_error_message(reply)}): it holds a value JSON cannot carry (NaN or ±inf)")
            if reply.status_code in RETRYABLE_STATUS:
                last = f"HTTP {reply.status_code}: {_error_message(reply)}"
                continue
            if reply.status_code >= 400:
                raise RequestRefused(reply.status_code, f"{self.base}{path} answered HTTP {reply.status_code}: "
                                     f"{_error_message(reply)}")
            if not parse_json:
                return reply.text
            try:
                return reply.json()
            except ValueError:  # truncated or malformed JSON: often a server dying mid-reply; try again
                last = f"malformed JSON reply ({len(reply.content)} bytes: {reply.text[:80]!r})"
        raise EngineUnreachable(f"{self.base}{path} failed after {self.retries + 1} attempts ({last}); is the server "
                          "running and healthy? Check --endpoint (results so far are kept under --out)")

    def post(self, path: str, payload: dict) -> dict:
        """One POST; a payload with `stream: true` is read as server-sent events (`stream`)."""
        if payload.get("stream"):
            return self.stream(path, payload)
        return self.request("POST", path, payload)

    def stream(self, path: str, payload: dict) -> dict:
        """A streamed request: {"events": the JSON of every `data:` line in order, "done": whether `data: [DONE]`
        ended it}. Retried as `request` is; a 4xx is RequestRefused."""
        import json

        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                with self._http.stream("POST", path, json=payload) as reply:
                    if reply.status_code >= 400:
                        reply.read()
                        if reply.status_code in RETRYABLE_STATUS:
                            last = f"HTTP {reply.status_code}: {_error_message(reply)}"
                            continue
                        raise RequestRefused(reply.status_code, f"{self.base}{path} answered HTTP "
                                             f"{reply.status_code}: {_error_message(reply)}")
                    events, done = [], False
                    for line in reply.iter_lines():
                        data = line.strip().removeprefix("data:").strip() if line.startswith("data:") else None
                        if data == "[DONE]":
                            done = True
                            break
                        if data:
                            events.append(json.loads(data))
                    return {"events": events, "done": done}
            except self._transient as exc:
                last = f"{type(exc).__name__}: {exc}"
            except ValueError as exc:  # an event that is not JSON: a server dying mid-stream; try again
                last = f"malformed event ({exc})"
        raise EngineUnreachable(f"{self.base}{path} (stream) failed after {self.retries + 1} attempts ({last})")

    def optional(self, method: str, path: str, payload: dict | None = None, *, parse_json: bool = True):
        """A request for an optional feature: None when the server does not have it (4xx)."""
        try:
            return self.request(method, path, payload, parse_json=parse_json)
        except RequestRefused:
            return None

    def models(self) -> list[str]:
        data = self.request("GET", "/v1/models")
        try:
            return [str(m["id"]) for m in data["data"]]
        except (KeyError, TypeError) as exc:
            raise EngineError(f"{self.base}/v1/models replied without a data[].id list: {str(data)[:120]}") from exc

    def resolve_model(self, model: str | None) -> str:
        """The served model to use: `model` if the server has it, else its only model."""
        served = self.models()
        if model is None:
            if len(served) != 1:
                raise HarnessError(f"{self.base} serves {len(served)} models ({', '.join(served) or 'none'}): "
                                   "name one with --model")
            return served[0]
        if model not in served:
            raise HarnessError(f"model {model!r} is not served by {self.base} (it serves: {', '.join(served)}); "
                               "fix --model")
        return model

    # ------------------------------------------------------------------ many requests

    def run_all(self, path: str, jobs: list[tuple[str, dict]], store: ResponseStore,
                progress: Callable[[int], None] | None = None,
                reduce: Callable[[str, dict], dict] | None = None) -> dict[str, dict]:
        """POST every (key, payload) not yet in `store`, `concurrency` at a time; all responses by key.
        `reduce(key, response)`: what is kept and returned instead of the response (a scorer's wide top k cut to
        what the test reads: the store holds every response in memory).

        The first failure cancels the requests not yet started and is raised (responses received so
        far stay in the store, so a rerun resumes)."""
        results = {k: r for k, _ in jobs if (r := store.get(k)) is not None}
        todo = [(k, p) for k, p in jobs if k not in results]
        if not todo:
            return results
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = {pool.submit(self.post, path, payload): key for key, payload in todo}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    if f.exception() is not None:
                        for p in pending:
                            p.cancel()
                        raise f.exception()
                    key = futures[f]
                    results[key] = f.result() if reduce is None else reduce(key, f.result())
                    store.put(key, results[key])
                    if progress:
                        progress(1)
        return results


# What a server says when its *own* reply cannot be written as JSON (Python's json with allow_nan=False, as
# Starlette's JSONResponse uses; vLLM 0.32 maps that ValueError to HTTP 400). The request was valid JSON, so this
# is the engine's failure (it produced a non-finite value), not a refused request.
UNWRITABLE_REPLY = ("Out of range float values are not JSON compliant",)


class ReplyNotWritten(EngineError):
    """The server failed to serialize its reply (a NaN / ±inf inside): the engine broke, whatever status it gave."""


class RequestRefused(EngineError):
    """The server refused the request (4xx): not retried."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _error_message(reply) -> str:
    try:
        body = reply.json()
        err = body.get("error", body) if isinstance(body, dict) else body
        return str(err.get("message", err) if isinstance(err, dict) else err)[:300]
    except ValueError:
        return reply.text[:300] or "(empty body)"
