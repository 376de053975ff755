"""The API check's llama-server route (harness.served.llama_api): OpenAI-shaped requests sent as one native
/completion each, and the native replies read back, against a fake server that answers with the shapes the real
llama-server (llama-cpp-python 0.3.36's vendored llama.cpp) returned in this session (trimmed to the fields read).
Runs without llama-server."""

from __future__ import annotations

import json

import httpx
import pytest

from harness.served.api import parse_reply, parse_stream
from harness.served.client import RequestRefused
from harness.served.llama_api import (
    LlamaServerApiClient,
    finish_reason,
    native_body,
    openai_reply,
    openai_stream,
)
from harness.served.llama_server import LlamaServerClient

# A non-streamed reply with n_probs 1 and a draft: the first token from the prompt's logits, the next from a
# speculative step (llama-server gives those logprob 0 and no top list: its "TODO: set result.probs").
LIMIT = {"index": 0, "content": " assistant designed", "tokens": [11173, 2724], "stop": True, "tokens_predicted": 2,
         "stop_type": "limit", "stopping_word": "",
         "completion_probabilities": [
             {"id": 11173, "token": " assistant", "logprob": -0.16345709562301636,
              "top_logprobs": [{"id": 11173, "token": " assistant", "logprob": -0.16345709562301636}]},
             {"id": 2724, "token": " designed", "logprob": 0.0, "top_logprobs": []}]}
# stop "sta" inside the first token: the text cut before it, the token kept, its probs trimmed by the stop's own
# token count (1), so none are left
WORD = {"index": 0, "content": " assi", "tokens": [11173], "stop": True, "tokens_predicted": 1, "stop_type": "word",
        "stopping_word": "sta", "completion_probabilities": []}


def _partial(token, text, predicted_ms, draft=None, probs=True):
    timings = {"predicted_n": 0, "predicted_ms": predicted_ms}
    if draft is not None:
        timings.update(draft_n=draft[0], draft_n_accepted=draft[1])
    event = {"index": 0, "content": text, "tokens": [token], "stop": False, "tokens_predicted": 0, "timings": timings}
    if probs:
        event["completion_probabilities"] = [{"id": token, "token": text, "logprob": -0.5,
                                              "top_logprobs": [{"id": token, "logprob": -0.5}]}]
    return event


# A stream with a draft (timings_per_token): one token per event; the tokens of one speculative step share their
# timings (predicted_ms taken once per step, the draft counters); the final event carries the end fields.
STREAM = [_partial(11173, " assistant", 0.001),
          _partial(2724, " designed", 475.419, (4, 4), probs=False),
          _partial(288, " to", 475.419, (4, 4), probs=False),
          _partial(1199, " support", 475.419, (4, 4), probs=False),
          _partial(3629, " users", 939.128, (8, 6), probs=False),
          {"index": 0, "content": "", "tokens": [], "stop": True, "tokens_predicted": 5, "stop_type": "limit",
           "stopping_word": "", "timings": {"predicted_ms": 939.2, "draft_n": 8, "draft_n_accepted": 6}}]


def test_every_field_the_api_check_asks_about_is_sent_natively():
    body = native_body({"model": "m", "prompt": [1, 2], "max_tokens": 16, "seed": 8, "temperature": 0.7,
                        "top_p": 0.9, "logprobs": 1, "stop": [" 7", "ab"], "n": 24, "return_token_ids": True,
                        "return_tokens_as_token_ids": True, "stream": True, "stream_options": {"include_usage": True}},
                       slots=24)
    assert body == {"prompt": [1, 2], "n_predict": 16, "return_tokens": True, "cache_prompt": False, "stream": True,
                    "temperature": 0.7, "top_p": 0.9, "seed": 8, "stop": [" 7", "ab"], "n_cmpl": 24, "n_probs": 1,
                    "timings_per_token": True}
    plain = native_body({"prompt": [1], "max_tokens": 2, "stop_token_ids": [], "stop": "x"})
    assert plain["stop"] == ["x"] and "seed" not in plain and "n_cmpl" not in plain and "timings_per_token" not in plain


@pytest.mark.parametrize("fields", [{"stop_token_ids": [5]}, {"min_tokens": 3}, {"n": 25}, {"echo": True}])
def test_what_the_native_route_lacks_is_refused_never_dropped(fields):
    with pytest.raises(RequestRefused) as refused:
        native_body({"prompt": [1], "max_tokens": 4, **fields}, slots=24)
    assert refused.value.status == 400


def test_end_fields_become_finish_reasons_and_disagreeing_ones_fail():
    assert finish_reason(LIMIT, []) == "length" and finish_reason(WORD, ["sta"]) == "stop"
    assert finish_reason({"stop_type": "eos", "stopping_word": ""}, []) == "stop"
    assert finish_reason({**WORD, "stopping_word": "other"}, ["sta"]).startswith("inconsistent")
    assert finish_reason({**LIMIT, "stopping_word": "x"}, ["x"]).startswith("inconsistent")
    older = {"stop_type": "eos", "stopped_eos": True, "stopped_word": False, "stopped_limit": False}
    assert finish_reason(older, []) == "stop"
    assert "stopped_limit True" in finish_reason({**older, "stopped_limit": True}, [])
    assert finish_reason({"stop_type": "none"}, []) == "stop_type 'none'"


def test_a_native_reply_reads_back_with_ids_logprobs_and_tokens_predicted_as_usage():
    reply = parse_reply(openai_reply(LIMIT, {"logprobs": 1}), "fake")
    assert reply.ids == [11173, 2724] and reply.text == " assistant designed" and reply.reason == "length"
    assert reply.usage == 2 and reply.logprob_names == ["token_id:11173", "token_id:2724"]
    assert reply.logprobs == pytest.approx([-0.16345709562301636, 0.0])
    word = parse_reply(openai_reply(WORD, {"logprobs": 1, "stop": ["sta"]}), "fake")
    assert word.ids == [11173] and word.text == " assi" and word.reason == "stop" and word.logprobs == []
    both = openai_reply([{**WORD, "index": 1}, LIMIT], {"n": 2, "stop": ["sta"]})
    assert [c["index"] for c in both["choices"]] == [0, 1] and both["usage"]["completion_tokens"] == 3
    assert openai_reply({**LIMIT, "tokens_predicted": None}, {})["usage"]["completion_tokens"] is None


def test_a_stream_gives_one_token_per_delta_and_the_steps_from_the_timings():
    got = openai_stream(STREAM, {"logprobs": 1})
    assert got["done"] and got["events"][-1] == {"choices": [], "usage": {"completion_tokens": 5}}
    reply = parse_stream(got)
    assert reply.ids == [11173, 2724, 288, 1199, 3629] and reply.text == " assistant designed to support users"
    assert reply.deltas == [1] * 5 and reply.steps == [1, 3, 1] and reply.reason == "length" and reply.usage == 5
    assert reply.logprob_names == ["token_id:11173"]  # what the server sent: the speculative tokens had none
    cut = openai_stream(STREAM[:-1], {})
    assert not cut["done"]  # no final event: the stream ended early (the native stream has no [DONE])
    untimed = [{k: v for k, v in e.items() if k != "timings"} for e in STREAM]
    assert parse_stream(openai_stream(untimed, {})).steps == [1] * 5  # no timings: every token its own step


def _fake(slots=24):
    sent = []

    def handler(request):
        body = json.loads(request.content) if request.content else {}
        sent.append((request.url.path, body))
        if request.url.path == "/props":
            return httpx.Response(200, json={"total_slots": slots})
        if request.url.path == "/v1/chat/completions":
            return httpx.Response(200, json={"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]})
        if body.get("stream"):
            text = "".join(f"data: {json.dumps(e)}\n\n" for e in STREAM)
            return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})
        if body.get("n_cmpl", 1) > 1:
            return httpx.Response(200, json=[{**LIMIT, "index": j} for j in range(body["n_cmpl"])])
        return httpx.Response(200, json=WORD if body.get("stop") else LIMIT)

    return handler, sent


def test_the_client_sends_one_native_request_per_request_and_passes_other_routes_through():
    handler, sent = _fake()
    engine = LlamaServerClient("http://fake/v1", transport=httpx.MockTransport(handler))
    route = engine.api_route()
    assert isinstance(route, LlamaServerApiClient) and engine.api_route() is route
    reply = route.post("/v1/completions", {"prompt": [1], "max_tokens": 2, "seed": 3, "n": 3})
    natives = [b for path, b in sent if path == "/completion"]
    assert len(natives) == 1 and natives[0]["n_cmpl"] == 3 and natives[0]["seed"] == 3  # n sent as n, not split
    assert len(reply["choices"]) == 3
    assert route.post("/v1/completions", {"prompt": [1], "max_tokens": 2, "stop": ["sta"]})["choices"][0][
        "finish_reason"] == "stop"
    streamed = route.post("/v1/completions", {"prompt": [1], "max_tokens": 5, "stream": True})
    assert streamed["done"] and parse_stream(streamed).steps == [1, 3, 1]
    assert route.post("/v1/chat/completions", {"messages": []})["choices"][0]["message"]["content"] == "hi"
    assert sent[-1][0] == "/v1/chat/completions"
    engine.close()


def test_the_api_check_leaves_out_what_is_not_offered_and_says_so():
    """min_tokens and stop_token_ids are not offered; n = 24 is, on 24 slots, and is not on 4."""
    from types import SimpleNamespace

    from harness.served.api import N_CHOICES, not_offered

    for slots, n_offered in ((N_CHOICES, True), (4, False)):
        handler, _ = _fake(slots)
        run = SimpleNamespace(engine=LlamaServerClient("http://fake", transport=httpx.MockTransport(handler)))
        lacks = not_offered(run)
        assert set(lacks) == {"stop_token_ids", "min_tokens"} | (set() if n_offered else {"n"})
        assert all(why for why in lacks.values())


# ------------------------------------------------------------------------------------------ the whole battery

def _native_server(url: str, trim_probs_at_stop_word: bool = False):
    """A fake llama-server: native /completion requests answered by `specdec serve` on the toy pair (its OpenAI
    route, speculative steps of 1 to 4 tokens) and put back in llama-server's shapes: one token per stream event,
    the tokens of one step sharing their timings, the end fields on a final event. `trim_probs_at_stop_word`:
    llama-server 0.3.36's own behaviour at a stop string (the probabilities cut by the stop's token count, 1 here,
    the tokens not)."""
    toy = httpx.Client(base_url=url, timeout=60)

    def end(choice: dict) -> dict:
        why = choice.get("stop_reason")
        kind = "limit" if choice["finish_reason"] == "length" else "word" if isinstance(why, str) else "eos"
        return {"stop": True, "stop_type": kind, "stopping_word": why if kind == "word" else ""}

    def probs(ids, values):
        return [{"id": t, "logprob": v, "top_logprobs": [{"id": t, "logprob": v}]} for t, v in zip(ids, values, strict=True)]

    def handler(request):
        body = json.loads(request.content) if request.content else {}
        if request.url.path == "/props":
            return httpx.Response(200, json={"total_slots": 24})
        if request.url.path == "/tokenize":  # native {"content"} -> the toy server's {"prompt"}
            reply = toy.post("/tokenize", json={"model": "toy", "prompt": body["content"]}).json()
            return httpx.Response(200, json={"tokens": reply["tokens"]})
        if request.url.path != "/completion":
            reply = toy.request(request.method, request.url.path, json=body or None)
            return httpx.Response(reply.status_code, content=reply.content, headers=reply.headers)
        ask = {"model": "toy", "prompt": body["prompt"], "max_tokens": body["n_predict"], "n": body.get("n_cmpl", 1),
               "return_token_ids": True, "return_tokens_as_token_ids": True, "logprobs": body.get("n_probs", 1),
               **{k: body[k] for k in ("seed", "stop", "temperature", "top_p") if k in body}}
        if body.get("stream"):
            events, step = [], 0
            with toy.stream("POST", "/v1/completions", json={**ask, "stream": True}) as s:
                for line in s.iter_lines():
                    data = line.removeprefix("data:").strip()
                    if not data or data == "[DONE]":
                        continue
                    for choice in json.loads(data).get("choices") or []:
                        ids, step = choice.get("token_ids") or [], step + 1
                        values = (choice.get("logprobs") or {}).get("token_logprobs") or []
                        for j, t in enumerate(ids):
                            events.append({"index": 0, "content": choice["text"] if j == 0 else "", "tokens": [t],
                                           "stop": False, "timings": {"predicted_ms": float(step), "draft_n": step},
                                           **({"completion_probabilities": probs([t], values[j:j + 1])}
                                              if "n_probs" in body else {})})
                        if choice.get("finish_reason"):
                            events.append({"index": 0, "content": "", "tokens": [], **end(choice),
                                           "tokens_predicted": sum(len(e["tokens"]) for e in events)})
            text = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
            return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})
        reply = toy.post("/v1/completions", json=ask).json()
        out = []
        for choice in reply["choices"]:
            ids, values = choice["token_ids"], choice["logprobs"]["token_logprobs"]
            native = {"index": choice["index"], "content": choice["text"], "tokens": ids, **end(choice),
                      "tokens_predicted": len(ids)}
            if "n_probs" in body:
                cut = 1 if trim_probs_at_stop_word and native["stop_type"] == "word" else 0
                native["completion_probabilities"] = probs(ids[: len(ids) - cut], values[: len(ids) - cut])
            out.append(native)
        return httpx.Response(200, json=out if len(out) > 1 else out[0])

    return handler


@pytest.mark.parametrize("trim", [False, True])
def test_the_api_battery_runs_over_the_native_route_and_catches_probs_cut_at_a_stop_word(trim, tmp_path):
    """The whole check with --api llama-server against the fake native server: PASS, with stops placed inside the
    steps read off the timings, min_tokens and stop_token_ids reported as not offered; the probabilities cut at a
    stop string (llama-server's behaviour) FAIL logprobs_aligned and stream."""
    from harness.pairs import get_pair
    from harness.served.check import run_engine_check_with
    from harness.served.config import EngineConfig
    from harness.served.serve import serving
    from specdec_ref.adapters import generate

    with serving(generate, get_pair("toy")) as s:
        engine = LlamaServerClient("http://fake", transport=httpx.MockTransport(_native_server(s.url, trim)))
        config = EngineConfig(endpoint="http://fake", api="llama-server", pair="toy", checks=("api",), prompts=1,
                              api_seeds=2, api_length=16, api_unseeded=3, seed=1, stop_on_fail=False,
                              out=str(tmp_path)).validate()
        report, _ = run_engine_check_with(engine, config)
        engine.close()
    rejected = sorted({t.name.rsplit("/", 1)[-1] for t in report.tests if t.reject})
    case = report.cases[0]
    assert case["steps_from"].startswith("the stream's step tags") and case["stops_inside_step"] > 0
    assert set(case["not_offered"]) == {"stop_token_ids", "min_tokens"} and case["seed_reproducible"]
    names = {t.name.rsplit("/", 1)[-1] for t in report.tests}
    assert "min_tokens" not in names and {"n_independent", "stream", "stop_strings"} <= names
    assert any("not offered" in n and "min_tokens" in n for n in report.notes)
    # cut non-streamed only, as llama-server does: the stream's logprobs then differ from the reply's too
    assert (report.verdict, rejected) == (("fail", ["logprobs_aligned", "stream"]) if trim else ("pass", []))
