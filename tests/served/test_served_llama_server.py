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
    natives = [b for path, b in sent if path == "/completion"]
    assert len(reply["choices"]) == 3 and [b["seed"] for b in natives] == [10, 11, 12]  # no total_slots: 1 each
    native = natives[0]
    assert "n_cmpl" not in native and native["n_predict"] == 2 and native["return_tokens"] is True
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


def test_n_continuations_go_out_as_n_cmpl_batches_within_the_slots_with_the_same_seeds():
    """n = 5 on a 2-slot server: native requests of n_cmpl 2, 2, 1 at seeds 10, 12, 14 (llama-server gives its
    children seed + 1, ...: the seeds of one request per continuation); replies put back in index order."""
    import json

    sent = []

    def handler(request):
        body = json.loads(request.content) if request.content else {}
        sent.append((request.url.path, body))
        if request.url.path == "/props":
            return httpx.Response(200, json={"total_slots": 2})
        count = body.get("n_cmpl", 1)
        replies = [{"index": j, "content": "x", "tokens": [body.get("seed", 0) + j], "stop_type": "limit"} for j in range(count)]
        return httpx.Response(200, json=replies[::-1] if count > 1 else replies[0])

    client = LlamaServerClient("http://fake", transport=httpx.MockTransport(handler))
    reply = client.post("/v1/completions", {"model": "m", "prompt": [1], "n": 5, "max_tokens": 1, "seed": 10})
    natives = [b for path, b in sent if path == "/completion"]
    assert [(b["seed"], b.get("n_cmpl", 1)) for b in natives] == [(10, 2), (12, 2), (14, 1)]
    assert [c["token_ids"] for c in reply["choices"]] == [[10], [11], [12], [13], [14]]
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2, 3, 4]
    sent.clear()  # unseeded: one request per continuation (children's seeds would be the server's choice)
    client.post("/v1/completions", {"model": "m", "prompt": [1], "n": 2, "max_tokens": 1, "seed": None})
    assert all("n_cmpl" not in b for path, b in sent if path == "/completion")
    with pytest.raises(HarnessError, match="n_cmpl"):
        bad = LlamaServerClient("http://fake", max_cmpl=3, transport=httpx.MockTransport(
            lambda r: httpx.Response(200, json=[{"index": 0, "tokens": [1]}])))
        bad.post("/v1/completions", {"model": "m", "prompt": [1], "n": 3, "max_tokens": 1, "seed": 0})


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


def test_the_finding_readme_states_only_what_the_record_measured():
    """suites.campaigns.llama_server: the headline lines follow the record (a zero-logprob reproducer is named
    only when the returned entries carry 0.0 with empty top lists; a convention only when the diagnosis gave it)."""
    from suites.campaigns.llama_server import findings, report_md

    cell = {"name": "T=1/prompt0", "samples": 10, "detectable_tv": 0.3, "min_p": 1e-9, "rejected": ["x"],
            "vacuous": False, "consistent_conventions": ["llama_cpp"], "divergences": None}
    run = {"verdict": "fail", "samples": 10, "detectable_tv": 0.3, "seconds": 1.0, "notes": [], "cases": [],
           "cells": [cell], "rejected": ["x"], "tests": 3}
    lp = lambda v: {"verdict": v, "samples": 2, "detectable_tv": None, "seconds": 1.0, "notes": [], "cells": [],  # noqa: E731
                    "rejected": [], "tests": 2, "cases": [{"name": "c", "compared": 4, "bad_sampled": 3 if v == "fail" else 0,
                                                          "bad_top": 0, "max_abs_diff": 1.0, "p99_abs_diff": 1.0}]}
    entry = lambda v, top: {"id": 1, "logprob": v, "top_logprobs": top}  # noqa: E731
    record = {"checks": {"logprobs/raw/speculation-off": lp("pass"), "logprobs/raw/speculation-on": lp("fail"),
                         "tokens/speculation-on, defaults, documented order": run},
              "tolerance_nats": 0.1, "calibration_spread_nats": 0.02, "seconds": 60, "load_at_start": [1, 1, 1],
              "load_at_end": [1, 1, 1], "version": "v", "slots": 8, "chunk": 4, "concurrency": 2, "prompt": "p",
              "plans": {"speculation-on, defaults, documented order": {"samples": 10, "length": 4}}, "tv_bar": 0.05,
              "probe": {}, "bench_exit": 0,
              "reproducer": {"on": {"request": {}, "tokens": [1, 2], "completion_probabilities": [entry(-1.0, [(1, -1.0)]), entry(0.0, [])]},
                             "off": {"request": {}, "tokens": [1, 2], "completion_probabilities": [entry(-1.0, [(1, -1.0)]), entry(-0.5, [(1, -0.5)])]}}}
    lines = findings(record)
    assert "speculation on **FAIL** (3 of 4" in lines[0]
    assert "1 of 2 returned tokens carry logprob 0.0" in lines[1] and "#27972" in lines[1]
    assert "names `llama_cpp`" in lines[2]
    cell["consistent_conventions"] = []
    record["reproducer"]["on"]["completion_probabilities"][1] = entry(-0.5, [(1, -0.5)])
    lines = findings(record)
    assert not any("reproducer" in line for line in lines) and "names no convention" in lines[-1]
    text = report_md(record, "specdec campaign llama_server")
    assert "## Findings" in text and "speculation-on, defaults, documented order: 10 × 4" in text


def test_a_constraint_is_never_dropped_silently():
    """The plain llama-server client does not translate structured-output fields into llama.cpp's grammar: a
    constrained request is refused with one line (exit 2), never sent unconstrained."""
    handler, sent = _fake(False)
    client = LlamaServerClient("http://fake", max_cmpl=1, transport=httpx.MockTransport(handler))
    for field, value in (("structured_outputs", {"regex": "[a-z]+"}), ("guided_regex", "[a-z]+"),
                         ("response_format", {"type": "json_schema", "json_schema": {"schema": {"type": "string"}}})):
        with pytest.raises(HarnessError, match="does not translate"):
            client.post("/v1/completions", {"model": "m", "prompt": [1], "n": 1, "max_tokens": 2, "seed": 0, field: value})
    assert not [path for path, _ in sent if path == "/completion"]


def test_the_probe_names_structured_outputs_this_client_cannot_send_and_sends_none():
    """The probe through the plain llama-server client (the llama_server campaign's probe cells): each
    structured-output name is reported as not sent, not refused, and no request carries one."""
    from harness.served.structured import NOT_SENT, PROBE_FIELDS, structured_support

    handler, sent = _fake(False)
    client = LlamaServerClient("http://fake", max_cmpl=1, transport=httpx.MockTransport(handler))
    assert structured_support(client, "m", [1, 2]) == {name: NOT_SENT for name in PROBE_FIELDS}
    assert sent == []


def test_the_llama_server_build_is_portable_not_native(tmp_path, monkeypatch):
    """A GGML_NATIVE build died with SIGILL in its quantized kernels on a VM whose CPU reports AMX: the build
    asks for ggml's portable x86 set, into a build folder that an older native build does not occupy."""
    from harness.served import llama_server as ls

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.delenv(ls.BINARY_ENV, raising=False)
    root = ls.cache_root()
    (root / "llama.cpp").mkdir(parents=True)
    (root / "llama.cpp" / "CMakeLists.txt").write_text("")
    (root / f"llama_cpp_python-{ls.LLAMA_CPP_PYTHON}.tar.gz").write_text("")
    old = root / "llama.cpp" / "build" / "bin"
    old.mkdir(parents=True)
    (old / "llama-server").write_text("")  # a native build from before: not reused
    assert ls.find_binary() is None
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        if "--build" in cmd:
            binary = root / "llama.cpp" / ls.BUILD_DIR / "bin" / "llama-server"
            binary.parent.mkdir(parents=True)
            binary.write_text("")

    monkeypatch.setattr(ls.subprocess, "run", fake_run)
    assert ls.build_llama_server() == root / "llama.cpp" / ls.BUILD_DIR / "bin" / "llama-server"
    configure = next(c for c in calls if "-S" in c)
    assert "-DGGML_NATIVE=OFF" in configure and "-DGGML_NATIVE=ON" not in configure


def test_the_power_paragraph_states_each_cell_against_the_bar_as_measured():
    """Cells above the bar are named with their run's verdict (a rejected one: its power does not limit the
    verdict); no projection is printed."""
    from suites.campaigns.llama_server import power_lines

    def cell(name, tv, rejected=()):
        return {"name": name, "detectable_tv": tv, "rejected": list(rejected)}

    record = {"tv_bar": 0.05, "checks": {
        "tokens/diagnosis": {"verdict": "fail", "cells": [cell("greedy", None), cell("T=1/prompt0", 0.135, ["x"])]},
        "tokens/declared": {"verdict": "pass", "cells": [cell("T=0.7/prompt0", 0.047), cell("T=1/prompt0", 0.0446)]},
        "logprobs/raw/speculation-on": {"verdict": "fail", "cases": []}}}
    (text,) = power_lines(record)
    assert text.startswith("Power: 2 of 3 sampling cells reached detectable TV ≤ 0.05 (power 0.99); the cells of "
                           "the passing runs 0.0446–0.047.")
    assert "diagnosis T=1/prompt0 (0.135, run verdict FAIL: rejected, so its power does not limit the verdict)" in text
    record["checks"]["tokens/declared"]["cells"][0]["detectable_tv"] = 0.06
    assert "declared T=0.7/prompt0 (0.06, run verdict PASS)" in power_lines(record)[0]
