"""The engine interface: capabilities, registration, declared-only engines, server lifecycle, the registry."""

from __future__ import annotations

import sys
import textwrap

import pytest

from harness.engines import base
from harness.engines.base import Capabilities, Engine, Probe, Request, Setup, register_engine
from harness.engines.process import ServerEngine
from harness.errors import HarnessError


@pytest.fixture
def registry():
    before = dict(base._REGISTRY)
    yield base._REGISTRY
    base._REGISTRY.clear()
    base._REGISTRY.update(before)


def test_capabilities_reject_unknown_words():
    with pytest.raises(ValueError, match="methods"):
        Capabilities(methods=("medusa",))
    with pytest.raises(ValueError, match="returns"):
        Capabilities(methods=(), returns=("hidden_states",))


def test_a_runnable_adapter_replaces_a_declared_one_and_two_runnable_ones_clash(registry):
    @register_engine("test-x")
    class Declared(Engine):
        runnable = False
        not_runnable_why = "no adapter"
        capabilities = Capabilities(methods=("draft",))

    with pytest.raises(HarnessError, match="capabilities only: no adapter"):
        Declared(Setup("toy")).__enter__()

    @register_engine("test-x")
    class Real(Engine):
        capabilities = Capabilities(methods=("draft",))

    assert registry["test-x"] is Real and Real.name == "test-x"

    @register_engine("test-x")  # a declared one after the real one does not replace it
    class Late(Engine):
        runnable = False
        capabilities = Capabilities(methods=())

    assert registry["test-x"] is Real
    with pytest.raises(ValueError, match="registered twice"):
        @register_engine("test-x")
        class Again(Engine):
            capabilities = Capabilities(methods=("draft",))


def test_unsupported_names_what_a_request_asks_beyond_the_capabilities(registry):
    @register_engine("test-caps")
    class E(Engine):
        capabilities = Capabilities(methods=("ngram",), speculation_off=False, sampling=("temperature", "seed"))

    e = E(Setup("toy", "ngram"))
    assert e.unsupported(Request((1, 2), method="ngram")) is None
    assert "draft" in e.unsupported(Request((1,), method="draft"))
    assert e.unsupported(Request((1,), method=None)) == "speculation off"
    assert "top_p" in e.unsupported(Request((1,), method="ngram", top_p=0.9))
    assert "n > 1" in e.unsupported(Request((1,), method="ngram", n=4))


_SERVER = textwrap.dedent("""
    import http.server, signal, sys
    if sys.argv[2] == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


@pytest.mark.parametrize("mode, expected", [("obey", "stopped by SIGTERM"), ("ignore", "ignored SIGTERM")])
def test_a_server_engine_is_started_bounded_and_a_server_ignoring_sigterm_is_killed_and_reported(
        registry, tmp_path, mode, expected):
    import httpx

    @register_engine(f"test-server-{mode}")
    class Fake(ServerEngine):
        health = "/"
        term_timeout_s = 1.0
        startup_timeout_s = 20.0
        capabilities = Capabilities(methods=("draft",), levels=("engine",))

        @classmethod
        def installed(cls):
            return Probe(True)

        def command(self, port):
            return [sys.executable, "-c", _SERVER, str(port), mode]

    with Fake(Setup("toy", "draft", out=tmp_path)) as engine:
        assert httpx.get(engine.url + "/").status_code == 200
        assert engine.endpoint() == engine.url + "/v1"
        proc = engine._proc
    assert expected in engine.stop_report
    assert proc.poll() is not None and engine.url is None
    assert (tmp_path / f"test-server-{mode}-draft.log").exists()

    from harness.engines.battery import STOPS, EngineHost  # the battery's host records the same report

    host = EngineHost(Fake, "toy", 3, tmp_path / "run")
    assert host.endpoint("draft").endswith("/v1")
    host.close()
    (line,) = (tmp_path / "run" / STOPS).read_text().splitlines()
    assert expected in line and '"method": "draft"' in line


def test_a_server_that_exits_while_starting_is_one_harness_error(registry):
    @register_engine("test-dies")
    class Dies(ServerEngine):
        startup_timeout_s = 20.0
        capabilities = Capabilities(methods=("draft",), levels=("engine",))

        def command(self, port):
            return [sys.executable, "-c", "raise SystemExit(3)"]

    with pytest.raises(HarnessError, match="exited with code 3"):
        Dies(Setup("toy", "draft")).__enter__()


def test_the_registry_lists_every_catalogue_engine_with_a_probe():
    from harness.engines.catalogue import ADAPTERS
    from harness.engines.registry import listing

    rows = {r["name"]: r for r in listing()}
    assert set(ADAPTERS) <= set(rows) and len(ADAPTERS) >= 8
    for name in ADAPTERS:
        row = rows[name]
        assert row["kind"] in base.KINDS and isinstance(row["installed"], bool)
        assert row["installed"] or row["reason"], name  # not installed: always why
        assert row["runnable"] or row["not_runnable_why"], name
    assert rows["sglang"]["installed"] is False and "CUDA" in rows["sglang"]["reason"]
    assert rows["specdec-serve"]["runnable"] and rows["transformers"]["runnable"]


def test_specdec_engines_lists_every_engine_with_its_version_state_and_capabilities(capsys):
    from harness.cli import main
    from harness.engines.catalogue import ADAPTERS

    assert main(["engines"]) == 0
    out = capsys.readouterr().out
    heads = [line for line in out.splitlines() if line and not line.startswith((" ", "Run the battery"))]
    named = {line.split(" (")[0] for line in heads}
    assert set(ADAPTERS) <= named and len(named) >= 6
    assert all(("installed" in line) for line in heads)
    assert "sglang (server, version unknown): not installed: not installable here" in out
    assert out.count("    methods ") == len(heads)
