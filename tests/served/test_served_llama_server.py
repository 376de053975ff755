"""llama-server (llama.cpp's own server): the native-API adapter (a fake server, always run) and the real
binary (slow; skipped where `nox -s engines` has not built it and $SPECDEC_LLAMA_SERVER is unset)."""

from __future__ import annotations

import math

import httpx
import pytest

from harness.errors import HarnessError
from harness.served.client import RequestRefused
from harness.served.llama_server import LlamaServerClient, client_for, find_binary, server_command
from harness.served.probe import choice_token_ids


def _fake(processed: bool):
    sent = []

    def handler(request):
        import json

        body = json.loads(request.content) if request.content else {}
        sent.append((request.url.path, body))
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [7, 8]})
        key, top = ("prob", "top_probs") if processed else ("logprob", "top_logprobs")
        value = (lambda p: p) if processed else math.log
        probs = [{"id": 5, "token": "a", key: value(0.5), top: [{"id": 5, key: value(0.5)}, {"id": 6, key: value(0.25)}]},
                 {"id": 6, "token": "b", key: value(1.0), top: []}]
        reply = {"content": "ab", "tokens": [5, 6], "stop_type": "limit"}
        if body.get("n_probs"):
            reply["completion_probabilities"] = probs
        return httpx.Response(200, json=reply)

    return handler, sent


@pytest.mark.parametrize("processed", [False, True])
def test_vllm_style_requests_become_native_completions_and_back(processed):
    handler, sent = _fake(processed)
    client = LlamaServerClient("http://fake/v1", processed=processed, transport=httpx.MockTransport(handler))
    reply = client.post("/v1/completions", {"model": "m", "prompt": [1, 2], "n": 3, "max_tokens": 2, "seed": 10,
                                            "temperature": 0.7, "top_p": 0.9, "logprobs": 2})
    assert len(reply["choices"]) == 3 and [b["seed"] for _, b in sent] == [10, 11, 12]
    native = sent[0][1]
    assert sent[0][0] == "/completion" and native["n_predict"] == 2 and native["return_tokens"] is True
    assert native["n_probs"] == 2 and native["post_sampling_probs"] is processed and native["top_p"] == 0.9
    choice = reply["choices"][0]
    assert choice_token_ids(choice) == [5, 6] and choice["finish_reason"] == "length"
    lp = choice["logprobs"]
    assert lp["tokens"] == ["token_id:5", "token_id:6"]
    assert lp["token_logprobs"] == pytest.approx([math.log(0.5), 0.0])
    assert lp["top_logprobs"][0] == pytest.approx({"token_id:5": math.log(0.5), "token_id:6": math.log(0.25)})
    assert client.post("/tokenize", {"prompt": "hi"})["tokens"] == [7, 8] and sent[-1][1]["content"] == "hi"
    with pytest.raises(RequestRefused):
        client.post("/v1/completions", {"model": "m", "prompt": [1], "prompt_logprobs": 1})


def test_unknown_api_and_missing_binary_are_clear_errors(monkeypatch, tmp_path):
    with pytest.raises(HarnessError, match="--api"):
        client_for("grpc", "http://127.0.0.1:9")
    monkeypatch.setenv("SPECDEC_LLAMA_SERVER", str(tmp_path / "nope"))
    with pytest.raises(HarnessError, match="not an executable"):
        find_binary()


def test_server_command_has_the_draft_only_with_speculation(tmp_path):
    on = server_command(tmp_path / "llama-server", tmp_path / "t.gguf", 8080, draft=tmp_path / "d.gguf")
    off = server_command(tmp_path / "llama-server", tmp_path / "t.gguf", 8080, draft=None)
    assert "-md" in on and "--spec-draft-n-max" in on and "-md" not in off
    assert on[on.index("--host") + 1] == "127.0.0.1"


def _binary():
    try:
        return find_binary()
    except HarnessError:
        return None


@pytest.mark.slow
@pytest.mark.llama_server
@pytest.mark.real_model
@pytest.mark.skipif(_binary() is None, reason="no llama-server binary (`nox -s engines` builds it)")
@pytest.mark.parametrize("draft", [False, True])
def test_real_server_speaks_token_ids_and_logprobs(draft):
    from harness.served.llama_server import llama_server

    with llama_server(draft=draft) as url:
        client = LlamaServerClient(url, timeout_s=300)
        reply = client.post("/v1/completions", {"model": "smollm2", "prompt": [1, 504, 3458, 282], "n": 1,
                                                "max_tokens": 8, "temperature": 0.0, "seed": 0, "logprobs": 3})
        choice = reply["choices"][0]
        assert len(choice_token_ids(choice)) == 8 and len(choice["logprobs"]["token_logprobs"]) == 8
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=2)
