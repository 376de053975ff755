"""The engine client: retries with backoff, 4xx, malformed JSON, a server dying mid-run, resuming."""

from __future__ import annotations

import json

import httpx
import pytest

from harness.pairs import get_pair
from harness.served.client import EngineClient, EngineError, RequestRefused, ResponseStore
from harness.served.serve import serving
from specdec_ref.adapters import generate


def client_with(handler, **kw) -> EngineClient:
    return EngineClient("http://engine.test/v1", transport=httpx.MockTransport(handler), backoff_s=0.0, **kw)


def test_5xx_is_retried_then_succeeds():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(503, json={"error": {"message": "busy"}}) if len(calls) < 3 else \
            httpx.Response(200, json={"ok": True})

    assert client_with(handler, retries=3).post("/v1/completions", {}) == {"ok": True}
    assert len(calls) == 3


def test_4xx_is_not_retried_and_says_what_the_server_said():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(400, json={"error": {"message": "max_tokens too large"}})

    with pytest.raises(RequestRefused, match="max_tokens too large"):
        client_with(handler, retries=3).post("/v1/completions", {})
    assert len(calls) == 1


def test_truncated_json_is_retried_and_then_a_clear_error():
    def handler(request):
        return httpx.Response(200, content=b'{"choices": [{"text": "ab')

    with pytest.raises(EngineError, match="after 3 attempts.*malformed JSON"):
        client_with(handler, retries=2).post("/v1/completions", {})


def test_connection_refused_is_a_clear_error():
    client = EngineClient("http://127.0.0.1:9/v1", retries=1, backoff_s=0.0, timeout_s=2)
    with pytest.raises(EngineError, match="is the server running"):
        client.models()


def test_models_reply_without_ids_is_a_clear_error():
    with pytest.raises(EngineError, match="data"):
        client_with(lambda r: httpx.Response(200, json={"object": "list"})).models()


def test_store_ignores_a_truncated_last_line(tmp_path):
    store = ResponseStore(tmp_path, "abc")
    store.put("k1", {"a": 1})
    with store.path.open("a") as f:
        f.write('{"key": "k2", "response": {"a"')  # killed mid-write
    again = ResponseStore(tmp_path, "abc")
    assert again.resumed == 1 and again.get("k1") == {"a": 1} and again.get("k2") is None


def test_server_dying_mid_run_keeps_results_and_a_rerun_resumes(tmp_path):
    pair = get_pair("toy")
    jobs = [(f"job{i}", {"model": "toy", "prompt": [1, 2], "max_tokens": 2, "n": 3, "seed": i}) for i in range(6)]
    store = ResponseStore(tmp_path, "run")
    with serving(generate, pair) as served:
        client = EngineClient(served.url, concurrency=1, retries=1, backoff_s=0.0, timeout_s=5)
        seen = []

        def kill_after_two(_):
            seen.append(1)
            if len(seen) == 2:
                served.stop()

        with pytest.raises(EngineError, match="failed after 2 attempts"):
            client.run_all("/v1/completions", jobs, store, kill_after_two)
    kept = [json.loads(line)["key"] for line in store.path.read_text().splitlines()]
    assert 2 <= len(kept) < 6
    with serving(generate, pair) as served:
        sent = []
        client = EngineClient(served.url, concurrency=2, backoff_s=0.0)
        results = client.run_all("/v1/completions", jobs, ResponseStore(tmp_path, "run"), sent.append)
    assert len(results) == 6 and len(sent) == 6 - len(kept)  # only the missing requests were sent
