"""`specdec serve` over HTTP: routes, vLLM-style token ids and logprobs, errors, seeds, metrics."""

from __future__ import annotations

import math

import httpx
import numpy as np
import pytest
import torch

from harness.pairs import get_pair
from harness.served.serve import serving
from specdec_ref.adapters import generate
from specdec_ref.processing import logits_to_probs


@pytest.fixture(scope="module")
def served():
    with serving(generate, get_pair("toy"), logprobs_mode="processed_logprobs") as s:
        yield s


@pytest.fixture(scope="module")
def http(served):
    with httpx.Client(base_url=served.url, timeout=60) as client:
        yield client


def complete(http, **fields):
    reply = http.post("/v1/completions", json={"model": "toy", "prompt": [1, 2, 3, 4], "max_tokens": 3, **fields})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_models_route_lists_the_served_model(http):
    assert [m["id"] for m in http.get("/v1/models").json()["data"]] == ["toy"]


def test_completion_returns_n_choices_with_token_ids_and_usage(http):
    body = complete(http, n=5, seed=3, return_token_ids=True)
    assert len(body["choices"]) == 5
    for c in body["choices"]:
        assert 1 <= len(c["token_ids"]) <= 3 and all(0 <= t < 16 for t in c["token_ids"])
        assert c["text"] == "".join(f" {t}" for t in c["token_ids"])  # toy pairs: the ids are the text
        assert c["prompt_token_ids"] == [1, 2, 3, 4]
    assert body["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in body["choices"])


def test_seed_is_honoured_and_different_seeds_differ(http):
    same = [complete(http, n=20, seed=11, return_token_ids=True) for _ in range(2)]
    other = complete(http, n=20, seed=12, return_token_ids=True)
    ids = [[c["token_ids"] for c in b["choices"]] for b in (*same, other)]
    assert ids[0] == ids[1] and ids[0] != ids[2]


def test_logprobs_are_the_targets_processed_law_at_the_returned_tokens(http):
    body = complete(http, seed=1, temperature=0.7, logprobs=3, return_tokens_as_token_ids=True, return_token_ids=True)
    choice = body["choices"][0]
    ids = choice["token_ids"]
    assert choice["logprobs"]["tokens"] == [f"token_id:{t}" for t in ids]
    target = get_pair("toy").target.double()
    with torch.inference_mode():
        logits = target(input_ids=torch.tensor([[1, 2, 3, 4] + ids])).logits[0, 3:-1].double()
    want = torch.log(logits_to_probs(logits, 0.7)).numpy()
    for j, t in enumerate(ids):
        assert math.isclose(choice["logprobs"]["token_logprobs"][j], want[j, t], rel_tol=1e-9, abs_tol=1e-9)
        top = choice["logprobs"]["top_logprobs"][j]
        best = np.argsort(-want[j])[:3]
        assert {f"token_id:{b}" for b in best} <= set(top) and len(top) <= 4  # top 3 + the sampled token


def test_prompt_logprobs_follow_vllm_format_with_ranks(http):
    body = complete(http, max_tokens=1, prompt_logprobs=2)
    entries = body["choices"][0]["prompt_logprobs"]
    assert entries[0] is None and len(entries) == 4
    for actual, entry in zip([2, 3, 4], entries[1:], strict=True):
        assert str(actual) in entry
        ranks = sorted(v["rank"] for v in entry.values())
        assert ranks[:2] == [1, 2]


def test_chat_completion_route(http):
    reply = http.post("/v1/chat/completions", json={"model": "toy", "messages": [{"role": "user", "content": "1 2 3"}],
                                                     "max_tokens": 2, "logprobs": True, "top_logprobs": 2})
    choice = reply.json()["choices"][0]
    assert reply.status_code == 200 and choice["message"]["role"] == "assistant"
    assert len(choice["logprobs"]["content"]) == len(choice["message"]["content"].split())


@pytest.mark.parametrize(("fields", "status", "words"), [
    ({"model": "nope"}, 404, "does not exist"),
    ({"logprobs": 21}, 400, "max-logprobs"),
    ({"prompt": [99]}, 400, "outside"),
    ({"n": 0}, 400, "n must be"),
    ({"temperature": -1}, 400, "temperature"),
])
def test_bad_requests_get_openai_error_bodies(http, fields, status, words):
    reply = http.post("/v1/completions", json={"model": "toy", "prompt": [1, 2], "max_tokens": 2, **fields})
    assert reply.status_code == status
    assert words in reply.json()["error"]["message"]


def test_speculation_off_serves_the_target_alone_and_metrics_say_so():
    pair = get_pair("toy")
    with serving(generate, pair, speculative=False) as off, httpx.Client(base_url=off.url) as client:
        client.post("/v1/completions", json={"model": "toy", "prompt": [1, 2, 3], "max_tokens": 6, "seed": 0})
        metrics = client.get("/metrics").text
    assert "specdec_speculative_decoding_enabled 0" in metrics
    assert "specdec_tokens_per_target_call 1.0" in metrics  # one target pass per token without drafts


def test_speculation_metrics_count_more_than_one_token_per_target_pass():
    with serving(generate, get_pair("toy-same")) as on, httpx.Client(base_url=on.url) as client:
        client.post("/v1/completions", json={"model": "toy-same", "prompt": [1, 2, 3], "max_tokens": 12, "seed": 0})
        value = [line for line in client.get("/metrics").text.splitlines()
                 if line.startswith("specdec_tokens_per_target_call")][0]
    assert float(value.split()[1]) > 2  # draft = target: every draft accepted, γ + 1 = 4 tokens per pass


@pytest.mark.slow  # a fresh interpreter importing torch + transformers: ~5-20 s on a loaded 2-core machine
def test_specdec_serve_command_serves_and_stops_after_max_requests():
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "harness", "serve", "--pair", "toy", "--port", str(port),
                             "--max-requests", "2"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, "specdec serve did not start"
                time.sleep(0.2)
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions",
                           json={"model": "toy", "prompt": [1, 2], "max_tokens": 2, "seed": 0}, timeout=30)
        assert models["data"][0]["id"] == "toy" and reply.status_code == 200
        assert proc.wait(timeout=30) == 0  # bounded: it stops by itself after --max-requests
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_specdec_serve_refuses_non_local_hosts():
    from harness.cli import main

    assert main(["serve", "--pair", "toy", "--host", "0.0.0.0"]) == 2


# A generate() of the §1b signature that is slow the way a real model is: every target pass takes 0.2 s (a
# 300-token request stays in flight for tens of seconds), or one that is stuck outside the models altogether.
SLOW_GENERATE = """
import time

from specdec_ref.adapters import generate as reference


def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    hook = target.register_forward_pre_hook(lambda *args: time.sleep(0.2))
    try:
        return reference(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                         temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    finally:
        hook.remove()


def stuck(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    time.sleep(3600)
"""


def _serve_and_stop(tmp_path, impl: str, sig, requests: int) -> tuple[float, int, list, int]:
    """`specdec serve --impl impl` on toy as a subprocess, `requests` concurrent 300-token requests in flight,
    then `sig`: (seconds from the signal to the exit, exit code, the replies (status or exception name), port)."""
    import socket
    import subprocess
    import sys
    import threading
    import time

    (tmp_path / "slowgen.py").write_text(SLOW_GENERATE)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "harness", "serve", "--impl", impl, "--pair", "toy", "--port",
                             str(port)], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    replies: list = []
    try:
        deadline = time.monotonic() + 120  # a fresh interpreter importing torch on a loaded machine
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, "specdec serve did not start"
                time.sleep(0.2)

        def ask(seed: int):
            try:
                replies.append(httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=120, json={
                    "model": "toy", "prompt": [1, 2, 3], "max_tokens": 300, "seed": seed,
                    "ignore_eos": True}).status_code)
            except httpx.HTTPError as exc:
                replies.append(type(exc).__name__)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(requests)]
        for t in threads:
            t.start()
        time.sleep(3)  # all sent and in flight: the first alone needs >= 100 target passes of 0.2 s
        assert not replies, f"answered before the signal: {replies}"
        sent = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
        seconds = time.monotonic() - sent
        for t in threads:
            t.join(timeout=30)
        return seconds, code, replies, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def _port_is_free(port: int) -> bool:
    """Nothing listens on the port and a new server can listen there (SO_REUSEADDR, as uvicorn binds)."""
    import socket

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()
    return True


@pytest.mark.end_to_end  # a fresh interpreter importing torch + transformers: ~5-60 s on a loaded 2-core machine
def test_specdec_serve_stops_within_seconds_of_sigterm_under_load_and_answers_503(tmp_path):
    """Four 300-token requests in flight (issue 55: it ignored SIGTERM for 150 s): the generation aborts at its
    next target pass, every request is answered 503, the process exits 0 within 10 s and the port is free."""
    import signal

    seconds, code, replies, port = _serve_and_stop(tmp_path, "slowgen:generate", signal.SIGTERM, 4)
    assert code == 0 and seconds < 10, (code, seconds)
    assert replies == [503] * 4, replies
    assert _port_is_free(port)


@pytest.mark.end_to_end
def test_specdec_serve_abandons_a_generation_stuck_outside_the_models_on_sigint(tmp_path):
    """A generate() that never calls the models again cannot be aborted: the server stops accepting, gives up on
    it after lifecycle.STOP_GRACE_S + ABANDON_S (5 s) and exits 0 without waiting for it."""
    import signal

    seconds, code, replies, port = _serve_and_stop(tmp_path, "slowgen:stuck", signal.SIGINT, 2)
    assert code == 0 and seconds < 10, (code, seconds)
    assert len(replies) == 2 and 200 not in replies, replies
    assert _port_is_free(port)
