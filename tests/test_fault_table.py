"""Fault injection at every layer, as one table (issue 55): docs/EXIT_CODES.md's "Fault table" is rendered from FAULTS.

Each row injects one fault into a small real run and asserts its documented exit code, one line on stderr (no
traceback), and, where the run records, that nothing recorded is lost: the same command resumed against a healthy
setup gives the verdict and statistics of an uninterrupted run. `python -m tests.test_fault_table` prints the table;
`test_the_docs_table_is_this_table` keeps docs/EXIT_CODES.md equal to it.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.cli import main

SAMPLER = ["verify", "--impl", "specdec_ref.adapters:verify", "--samples", "200", "--cases", "anti-logits"]
GENERATION = ["verify", "--impl", "specdec_ref.adapters:generate", "--level", "generation", "--pair", "toy",
              "--samples", "30", "--contexts", "none", "--allow-inconclusive"]
ENGINE = ["verify", "--level", "engine", "--pair", "toy", "--samples", "40", "--prompts", "2", "--contexts", "none",
          "--engine-checks", "tokens", "--retries", "1", "--allow-inconclusive"]
COULD_NOT = "specdec: error: "
FINDING = "specdec: FAIL: "


@dataclasses.dataclass(frozen=True)
class Fault:
    layer: str
    fault: str
    exit: int
    line: str  # the one stderr line starts with this
    resumes: bool = False  # the same command, resumed on a healthy setup, gives an uninterrupted run's verdict


FAULTS = {
    "model-load": Fault("model load", "`--target` a checkpoint folder whose config.json is not JSON", 2, COULD_NOT),
    "kernel": Fault("kernel", "the float64 scoring copy refuses the dtype (RuntimeError)", 2, COULD_NOT),
    "scorer": Fault("scorer", "teacher-forced scoring raises IndexError (a cache the model cannot use)", 2, COULD_NOT),
    "statistics": Fault("statistics", "the statistics raise ZeroDivisionError", 2, COULD_NOT),
    "http-down": Fault("HTTP client", "no server at the endpoint (connection refused)", 2, COULD_NOT),
    "http-5xx": Fault("HTTP client", "every completion answers 503 after /v1/models answered", 1, FINDING, True),
    "http-reset": Fault("HTTP client", "every completion's connection is reset mid-reply", 1, FINDING, True),
    "http-malformed": Fault("HTTP client", "completions answer malformed JSON (a reply cut short)", 1, FINDING, True),
    "http-timeout": Fault("HTTP client", "completions hang past the request timeout", 1, FINDING, True),
    "http-late": Fault("HTTP client", "the server dies after 3 answered completions (5xx from then on)", 1, FINDING,
                       True),
    "sse-truncated": Fault("HTTP client", "a streamed reply stops before `data: [DONE]` (the API battery)", 1, FINDING),
    "results-readonly": Fault("results folder", "`--json` into a read-only folder", 2, COULD_NOT),
    "results-full": Fault("results folder", "the disk is full when the report is written (ENOSPC)", 2, COULD_NOT),
    "engine-record-torn": Fault("engine record", "the response record's last line is torn (killed mid-write)", 0, "",
                                True),
    "journal-torn": Fault("journal", "a campaign journal's last line is torn; the campaign is resumed", 0, "", True),
}
SERVER_ROW = ("server", "`specdec serve` gets SIGTERM (or SIGINT) with requests in flight",
              "exit 0 within 10 s, each request in flight answered 503, the port free (tests/served/test_served_serve.py)")


def render_table() -> str:
    rows = ["| layer | fault injected | exit | stderr | nothing lost on resume |", "|---|---|---|---|---|"]
    for fault in FAULTS.values():
        line = {COULD_NOT: "one line `specdec: error: ...`", FINDING: "one line `specdec: FAIL: ...` (the finding)",
                "": "the verdict"}[fault.line]
        rows.append(f"| {fault.layer} | {fault.fault} | {fault.exit} | {line} | "
                    f"{'resumed: same verdict and statistics' if fault.resumes else '—'} |")
    layer, fault, result = SERVER_ROW
    rows.append(f"| {layer} | {fault} | 0 | {result} | — |")
    return "\n".join(rows)


def test_the_docs_table_is_this_table():
    docs = (Path(__file__).resolve().parents[1] / "docs/EXIT_CODES.md").read_text(encoding="utf-8")
    assert render_table() in docs, "regenerate docs/EXIT_CODES.md's fault table: python -m tests.test_fault_table"
    assert f"{len(FAULTS) + 1} faults" in docs


def _one_line(err: str, start: str) -> None:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("verify ", "Loading"))]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith(start), err


def _run(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _raise(exc):
    def fail(*_args, **_kwargs):
        raise exc
    return fail


# ---- model, kernel, scorer, statistics -------------------------------------------------------------------------

LOCAL = {  # fault -> (what to patch, the exception, the run)
    "kernel": ("harness.models.precision.scoring_copy",
               RuntimeError("Expected mat_a to be Float32, BFloat16 or Float16 matrix, got Double"), GENERATION),
    "scorer": ("harness.check.pit.score_continuations", IndexError("list index out of range"), GENERATION),
    "statistics": ("harness.check.driver._run_checks", ZeroDivisionError("division by zero"), SAMPLER),
}


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_local_faults(name, monkeypatch, capsys):
    target, exc, argv = LOCAL[name]
    monkeypatch.setattr(target, _raise(exc))
    code, out, err = _run(argv, capsys)
    assert code == FAULTS[name].exit, err
    _one_line(err, FAULTS[name].line)
    assert "FAIL" not in out


def test_model_load(tmp_path, capsys):
    for name in ("target", "draft"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{not json", encoding="utf-8")
    argv = ["verify", "--impl", "specdec_ref.adapters:generate", "--level", "generation",
            "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"), "--samples", "30"]
    code, _, err = _run(argv, capsys)
    assert code == 2, err
    _one_line(err, COULD_NOT)


# ---- the results folder ----------------------------------------------------------------------------------------

def test_results_readonly(tmp_path, capsys):
    """A folder the run cannot write: chmod 500, or /sys (read-only even for root) when chmod does not bind."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    target = folder if not _writable(folder) else Path("/sys")
    try:
        code, _, err = _run([*SAMPLER, "--json", str(target / "report.json")], capsys)
    finally:
        folder.chmod(0o700)
    assert code == 2, err
    _one_line(err, COULD_NOT)


def _writable(folder: Path) -> bool:
    try:
        (folder / ".probe").write_text("x")
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


def test_results_full(tmp_path, monkeypatch, capsys):
    """The disk fills after preflight: the report's atomic write fails; one line, exit 2, no half-written file."""
    import harness.records as records

    real = records.atomic_write_bytes

    def full(path, data):
        if str(path).endswith("report.json"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(records, "atomic_write_bytes", full)
    code, _, err = _run([*SAMPLER, "--json", str(tmp_path / "report.json")], capsys)
    assert code == 2, err
    _one_line(err, COULD_NOT)
    assert not (tmp_path / "report.json").exists()


# ---- the HTTP client ---------------------------------------------------------------------------------------------

class FaultyProxy:
    """A proxy in front of a real server that breaks completions after `after` good ones, in one of these modes."""

    def __init__(self, upstream: str, mode: str, after: int = 0):
        import httpx

        self.mode, self.after, self.good = mode, after, 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self, method: str):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if method == "POST" and "completions" in self.path and proxy.broken(body):
                    return proxy.misbehave(self)
                reply = httpx.request(method, upstream + self.path, content=body, timeout=120,
                                      headers={"Content-Type": "application/json"})
                self.send_response(reply.status_code)
                self.send_header("Content-Type", reply.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            def do_GET(self):
                self._forward("GET")

            def do_POST(self):
                self._forward("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def broken(self, body: bytes | None) -> bool:
        if self.mode == "sse-truncated":
            return bool(body) and json.loads(body).get("stream") is True
        with self.lock:
            if self.good < self.after:
                self.good += 1
                return False
        return True

    def misbehave(self, handler: BaseHTTPRequestHandler) -> None:
        if self.mode in ("http-5xx", "http-late"):
            handler.send_response(503)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        elif self.mode == "http-reset":
            handler.send_response(200)
            handler.send_header("Content-Length", "1000")
            handler.end_headers()
            handler.wfile.write(b'{"choices": [')
            handler.close_connection = True
            handler.connection.shutdown(2)
        elif self.mode == "http-malformed":
            payload = b'{"choices": [{"text": "ab'
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
        elif self.mode == "http-timeout":
            time.sleep(3)
            handler.close_connection = True
        elif self.mode == "sse-truncated":
            payload = b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n'
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def served_reference():
    from harness.pairs import get_pair
    from harness.served.serve import serving
    from specdec_ref.adapters import generate

    with serving(generate, get_pair("toy")) as served:
        yield served.url


@pytest.fixture(scope="module")
def uninterrupted(served_reference, tmp_path_factory):
    """The engine run with no fault: its verdict and p-values, the yardstick of every resumed run."""
    out = tmp_path_factory.mktemp("uninterrupted")
    return _engine_verdict([*ENGINE, "--endpoint", served_reference, "--out", str(out)], out)


def _engine_verdict(argv, out: Path) -> tuple[int, dict]:
    code = main([*argv, "--json", str(out / "report.json")])
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))["report"]
    return code, {"verdict": report["verdict"], **{test["name"]: test["p_value"] for test in report["tests"]}}


def test_http_down(capsys):
    code, _, err = _run([*ENGINE, "--endpoint", "http://127.0.0.1:9/v1"], capsys)
    assert code == 2, err
    _one_line(err, COULD_NOT)


@pytest.mark.end_to_end
@pytest.mark.parametrize("name", ["http-5xx", "http-reset", "http-malformed", "http-timeout", "http-late"])
def test_http_faults_mid_run_are_findings_and_resume_loses_nothing(name, served_reference, uninterrupted, tmp_path,
                                                                   monkeypatch, capsys):
    from harness.served import client

    monkeypatch.setattr(client.EngineClient.__init__, "__kwdefaults__",
                        {**client.EngineClient.__init__.__kwdefaults__, "timeout_s": 1.0, "backoff_s": 0.0})
    proxy = FaultyProxy(served_reference.removesuffix("/v1"), name, after=3 if name == "http-late" else 0)
    try:
        code, _, err = _run([*ENGINE, "--endpoint", proxy.url + "/v1", "--out", str(tmp_path)], capsys)
    finally:
        proxy.close()
    assert code == FAULTS[name].exit, err
    _one_line(err, FAULTS[name].line)
    monkeypatch.undo()
    resumed = _engine_verdict([*ENGINE, "--endpoint", served_reference, "--out", str(tmp_path)], tmp_path)
    assert resumed == uninterrupted


@pytest.mark.end_to_end
def test_truncated_sse_is_a_finding(served_reference, capsys):
    proxy = FaultyProxy(served_reference.removesuffix("/v1"), "sse-truncated")
    try:
        argv = [*ENGINE, "--endpoint", proxy.url + "/v1", "--engine-checks", "api"]
        code, _, err = _run(argv, capsys)
    finally:
        proxy.close()
    assert code == FAULTS["sse-truncated"].exit, err
    _one_line(err, FAULTS["sse-truncated"].line)


@pytest.mark.end_to_end
def test_a_torn_engine_record_loses_nothing(served_reference, uninterrupted, tmp_path):
    """A killed run leaves a torn last line; the next run's first new record must not be glued to it."""
    argv = [*ENGINE, "--endpoint", served_reference, "--out", str(tmp_path)]
    _engine_verdict(argv, tmp_path)
    record = next(tmp_path.glob("engine-*.jsonl"))
    lines = record.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = lines[: len(lines) // 2]
    record.write_text("".join(kept) + lines[len(lines) // 2][: 20], encoding="utf-8")  # torn, no newline
    assert _engine_verdict(argv, tmp_path) == uninterrupted
    records = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    assert len({r["key"] for r in records}) == len(lines)  # every response recorded once, whole


# ---- the campaign journal ----------------------------------------------------------------------------------------

def test_a_torn_journal_resumes_to_the_same_verdict(tmp_path, capsys):
    argv = ["campaign", "invariance", "--rules", "3", "--sources", "sampler", "--out", str(tmp_path)]
    first = main(argv)
    report = (tmp_path / "README.md").read_text(encoding="utf-8") if (tmp_path / "README.md").exists() else None
    journal = tmp_path / "journal.jsonl"
    lines = journal.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) >= 2
    journal.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2], encoding="utf-8")
    again = main(argv)
    capsys.readouterr()
    assert again == first
    assert len(journal.read_text(encoding="utf-8").splitlines()) == len(lines)
    if report is not None:
        assert (tmp_path / "README.md").read_text(encoding="utf-8").split("\n## ")[1:] == report.split("\n## ")[1:]


if __name__ == "__main__":
    print(render_table())

