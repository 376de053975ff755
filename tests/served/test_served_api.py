"""The API check (`--engine-checks api`, harness.served.api) and `specdec serve`'s step bookkeeping
(harness.served.bookkeeping): stops, limits, finish reasons, streams and seeds under multi-token steps.

Each planted API bug of harness.mutants.api is FAILED over HTTP (exit 1 through the CLI for one of them), the
correct server PASSES with speculation on and off, and the bookkeeping itself is checked on hand-made steps.
"""

from __future__ import annotations

import httpx
import pytest
import torch

from harness.pairs import get_pair
from harness.served.api import placement, stop_cases
from harness.served.bookkeeping import Bookkeeping, Stops, text_deltas
from harness.served.check import run_engine_check
from harness.served.config import EngineConfig
from harness.served.serve import GenerationBackend, Sampling, serving
from harness.served.text import IdTokenizer
from specdec_ref.adapters import generate

PAIR = "toy"
# Small enough to run in seconds; the seeds put a stop inside the step that reaches max_tokens (the cap bug's case)
API = dict(pair=PAIR, checks=("api",), prompts=1, api_seeds=2, api_length=16, api_unseeded=3, seed=1)
decode = IdTokenizer(16).decode
TOOLS = (5, 9)  # the toy server's tool-call markers (`--tool-call-tokens 5,9`): tokens the toy target emits inside steps
STEPS = [[3, 4], [5, 6, 7, 8], [9, 10]]  # " 3 4 | 5 6 7 8 | 9 10"


def _finish(steps=STEPS, book=None, **stops):
    return (book or Bookkeeping()).finish(steps, Stops(stops.pop("max_tokens", 8), **stops), decode)


def test_a_stop_string_inside_a_step_ends_the_reply_at_its_token_and_cuts_the_text():
    done = _finish(strings=(" 6",))
    assert done.tokens == [3, 4, 5, 6] and done.text == " 3 4 5" and done.reason == "stop" and done.steps == [2, 2]
    assert done.stop_reason == " 6"


def test_a_stop_string_across_two_steps_and_the_earliest_of_several_stops():
    done = _finish(strings=("4 5",))
    assert done.tokens == [3, 4, 5] and done.text == " 3 " and done.steps == [2, 1]
    assert _finish(strings=(" 9", "5 6")).text == " 3 4 "


def test_stop_token_ids_eos_and_the_cap_mid_step():
    assert _finish(token_ids=frozenset({6})).tokens == [3, 4, 5, 6]
    done = _finish(eos=frozenset({5}))
    assert done.tokens == [3, 4, 5] and done.reason == "stop" and done.stop_reason is None
    capped = _finish(max_tokens=5)
    assert capped.tokens == [3, 4, 5, 6, 7] and capped.reason == "length" and capped.steps == [2, 3]


def test_min_tokens_skips_every_end_condition_before_it_and_stop_strings_inside_it():
    assert _finish(strings=(" 4",), min_tokens=2).tokens == [3, 4, 5, 6, 7, 8, 9, 10]  # " 4" completes at token 2
    assert _finish(strings=(" 5",), min_tokens=2).tokens == [3, 4, 5]
    assert _finish(token_ids=frozenset({4, 6}), min_tokens=2).tokens == [3, 4, 5, 6]
    assert _finish(eos=frozenset({3}), min_tokens=1, max_tokens=3).reason == "length"
    from harness.mutants.api import API_MUTANTS

    per_step = _finish(strings=(" 5",), min_tokens=2, book=API_MUTANTS["min_tokens_per_step"]())  # the first 2 steps
    # hold 6 tokens: " 5" (token 3) is skipped
    assert per_step.reason == "length" and len(per_step.tokens) == 8
    assert Stops.from_request({"min_tokens": 3}, 8, set()).min_tokens == 3


def test_each_planted_bug_gets_its_case_wrong():
    from harness.mutants.api import API_MUTANTS

    cap_step = [[3, 4], [5, 6, 7, 8]]  # max_tokens 6: the cap is reached in the step that holds the stop
    assert _finish(cap_step, API_MUTANTS["cap_before_stop"](), max_tokens=6, strings=(" 5",)).reason == "length"
    assert _finish(cap_step, max_tokens=6, strings=(" 5",)).tokens == [3, 4, 5]
    missed = _finish(book=API_MUTANTS["stop_in_step_tail"](), strings=(" 5",), max_tokens=8)
    assert " 5" in missed.text and len(missed.tokens) == 8  # the tail of 3 tokens never held " 5"
    past = _finish(book=API_MUTANTS["ids_past_stop"](), strings=(" 6",))
    assert past.text == " 3 4 5" and past.tokens == [3, 4, 5, 6, 7, 8]
    per_step = API_MUTANTS["max_tokens_per_step"]()
    assert per_step.budget(2, 3) == 8
    assert _finish(STEPS, per_step, max_tokens=2).tokens == [3, 4, 5, 6, 7, 8]
    assert API_MUTANTS["stream_last_token_only"]().deltas(_finish()) == [(1, 2), (5, 6), (7, 8)]
    assert API_MUTANTS["unseeded_shared_stream"]().seed(None) == API_MUTANTS["unseeded_shared_stream"]().seed(None)


def _unseeded(ids_of_unseeded, ids_of_seeded, law=None):
    from harness.served.api import Context, Exchange, Reply, unseeded_coincidence

    def ex(kind, ids):
        return Exchange(kind, None, {"max_tokens": 4}, Reply(list(ids), "", "length", len(ids), None, None))

    ctx = Context(set(), str, 0.0, reply_law=law)
    return unseeded_coincidence(ctx, [ex("unseeded", i) for i in ids_of_unseeded] +
                                [ex("base", i) for i in ids_of_seeded])


def test_unseeded_coincidences_are_judged_by_how_likely_the_shared_continuation_is():
    """The CI false alarm of 2026-12-07: on toy-eos three unseeded replies were all [EOS], a likely reply, and the old
    rule (all equal while the seeded ones differ) failed the correct server. The p-value is P(x*)^(k-1)."""
    import numpy as np

    likely = _unseeded([(0,)] * 3, [(0,), (3, 4)], law=lambda ids: np.array([0.6] * len(ids)))
    assert likely["p"] == pytest.approx(0.36) and likely["method"] == "target bound"
    rare = _unseeded([(3, 4, 5, 6)] * 3, [(1, 2), (3, 4)], law=lambda ids: np.array([0.1] * len(ids)))
    assert rare["p"] == pytest.approx(1e-8)
    assert _unseeded([(3,), (4,), (3,)], [], law=lambda ids: np.ones(len(ids)))["p"] == 1.0  # not all one: no test
    # without a local target: the permutation p-value over the unseeded and seeded replies pooled
    assert _unseeded([(1,)] * 3, [(2,), (3,)])["p"] == pytest.approx(1 / 10)  # C(3,3) / C(5,3)
    assert _unseeded([(1,)] * 3, [(1,), (3,)])["p"] == pytest.approx(4 / 10)  # C(4,3) / C(5,3)
    assert _unseeded([(1,)] * 4, [(j,) for j in range(2, 10)])["p"] == pytest.approx(1 / 495)  # C(12,4)


def test_the_tool_call_parser_splits_calls_and_streams_them_whatever_the_slicing():
    """Token 5 opens a call, 9 closes it: the first body token names the function, the rest is its arguments; the
    streamed entries (name once, arguments as they arrive) and content join to the non-streamed fields for any
    deltas; the parser that advances once per delta loses the name and arguments in the delta of the marker."""
    from harness.mutants.api import API_MUTANTS
    from harness.served.bookkeeping import parse_tool_calls

    tokens = [3, 5, 7, 8, 10, 9, 11, 5, 12]  # " 3 <5> 7 8 10 <9> 11 <5> 12": the second call is open at the end
    done = _finish([tokens], max_tokens=9)
    content, calls = parse_tool_calls(tokens, done.text, (5, 9), decode)
    assert content == " 3 11" and [(c.name, done.text[slice(*c.arguments)]) for c in calls] == [("7", " 8 10"),
                                                                                                  ("12", "")]
    assert parse_tool_calls(tokens, done.text, (5, 9), decode, start=6)[0] == " 11"

    def joined(book, slices):
        texts = text_deltas(tokens, done.text, slices, decode)
        parts = book.stream_tool_calls(done, slices, texts, texts, 0, (5, 9), decode)
        got: dict[int, list[str]] = {}
        for _, entries in parts:
            for e in entries:
                call = got.setdefault(e["index"], ["", ""])
                call[0] += e["function"].get("name", "")
                call[1] += e["function"]["arguments"]
        return "".join(c for c, _ in parts), [tuple(got[k]) for k in sorted(got)]

    for slices in ([(i, i + 1) for i in range(9)], [(0, 3), (3, 6), (6, 9)], [(0, 9)], [(0, 2), (2, 8), (8, 9)]):
        assert joined(Bookkeeping(), slices) == (" 3 11", [("7", " 8 10"), ("12", "")]), slices
    once = API_MUTANTS["tool_call_parser_once_per_delta"]()
    assert joined(once, [(i, i + 1) for i in range(9)]) == (" 3 11", [("7", " 8 10"), ("12", "")])  # 1 token a delta
    assert joined(once, [(0, 3), (3, 6), (6, 9)]) == (" 3 11", [("", " 8 10")])  # "7" and the call "12" lost


def test_text_deltas_concatenate_to_the_text_whatever_the_slicing():
    done = _finish(strings=("6",))
    for slices in (Bookkeeping().deltas(done), [(0, 1), (1, 4)], [(0, 4)]):
        assert "".join(text_deltas(done.tokens, done.text, slices, decode)) == done.text


def test_stops_are_chosen_inside_steps_across_steps_and_in_the_cap_step():
    tokens = [3, 4, 5, 6, 7, 8, 9, 10]
    chosen = dict(stop_cases(tokens, [2, 4, 2], True, set(), decode))
    assert set(chosen) == {"stop_in_step", "stop_across_steps", "stop_in_cap_step", "stop_token_in_step"}
    for kind, fields in chosen.items():
        where = placement(tokens, [2, 4, 2], Stops(8, tuple(fields.get("stop", ())),
                                                  frozenset(fields.get("stop_token_ids", ()))), decode)
        assert where["inside"] or kind == "stop_across_steps", (kind, fields, where)
    assert placement(tokens, [2, 4, 2], Stops(8, chosen["stop_across_steps"]["stop"]), decode)["across"]


def test_the_server_reports_the_reference_steps_and_returns_its_tokens():
    pair = get_pair(PAIR)
    backend = GenerationBackend(generate, pair, gamma=4)
    ids = torch.tensor([[1, 2, 3]] * 3)
    for seed, sampling in ((9, Sampling()), (2, Sampling(0.0)), (4, Sampling(0.7, top_p=0.9))):
        rows = backend._call_impl(ids, 12, sampling, seed)
        want = generate(pair.target, pair.draft, ids, max_new_tokens=12, gamma=4, temperature=sampling.temperature,
                        top_k=None, top_p=sampling.top_p, seed=seed).tolist()
        assert [[t for s in r for t in s] for r in rows] == [[t for t in w if t >= 0] for w in want]
        assert any(len(s) > 1 for r in rows for s in r)


def test_a_stream_sends_one_step_per_delta_and_concatenates_to_the_reply():
    with serving(generate, get_pair(PAIR)) as s, httpx.Client(base_url=s.url) as http:
        body = {"model": PAIR, "prompt": [1, 2, 3], "max_tokens": 16, "seed": 3, "return_token_ids": True,
                "logprobs": 1, "stop": [" 7"]}
        whole = http.post("/v1/completions", json=body).json()
        from harness.served.client import EngineClient

        with EngineClient(s.url) as client:
            events = client.stream("/v1/completions", {**body, "stream": True,
                                                        "stream_options": {"include_usage": True}})
    deltas = [c for e in events["events"] for c in e["choices"]]
    assert events["done"] and len(deltas) > 1 and any(len(d["token_ids"]) > 1 for d in deltas)
    assert [t for d in deltas for t in d["token_ids"]] == whole["choices"][0]["token_ids"]
    assert "".join(d["text"] for d in deltas) == whole["choices"][0]["text"]
    assert deltas[-1]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert events["events"][-1]["usage"] == whole["usage"]


@pytest.mark.end_to_end
def test_a_chat_stream_with_a_reasoning_parser_splits_each_step_where_the_marker_falls():
    """Token 2 ends the reasoning (a DeepSeek-R1 style parser): the streamed reasoning_content / content, one delta
    per speculative step, concatenate to the non-streamed fields; the parser that takes one transition per delta
    drops the content after a marker in the middle of a step."""
    from harness.served.client import EngineClient

    body = {"model": PAIR, "messages": [{"role": "user", "content": " 12 15 5 0"}], "max_tokens": 16,
            "return_token_ids": True, "stream_options": {"include_usage": True}}
    seen_mid = False
    for mutant in (None, "reasoning_parser_once_per_delta"):
        with serving(generate, get_pair(PAIR), reasoning_end=2, api_mutant=mutant) as s, EngineClient(s.url) as client:
            for seed in range(1, 9):
                whole = client.post("/v1/chat/completions", {**body, "seed": seed})["choices"][0]
                events = client.stream("/v1/chat/completions", {**body, "seed": seed, "stream": True})
                deltas = [c for e in events["events"] for c in e["choices"]]
                ids = whole["token_ids"]
                if 2 not in ids:
                    continue
                joined = ("".join(d["delta"].get("reasoning_content") or "" for d in deltas),
                          "".join(d["delta"].get("content") or "" for d in deltas))
                assert (whole["message"]["reasoning_content"], whole["message"]["content"]) == (
                    decode(ids[: ids.index(2)]), decode(ids[ids.index(2) + 1:]))
                sizes = [len(d["token_ids"]) for d in deltas if "token_ids" in d]
                at, mid = 0, False
                for size in sizes:  # the marker strictly inside its step
                    mid = mid or at < ids.index(2) < at + size - 1
                    at += size
                if mutant is None:
                    assert joined == (whole["message"]["reasoning_content"], whole["message"]["content"])
                elif mid:
                    seen_mid = True
                    assert joined[1] != whole["message"]["content"]
    assert seen_mid


@pytest.mark.parametrize("speculative", [True, False])
@pytest.mark.stochastic(false_alarm=0.001, seed=1)  # PASS 0.001
def test_the_correct_server_passes_the_api_check_with_stops_inside_steps(speculative):
    with serving(generate, get_pair(PAIR), speculative=speculative, reasoning_end=2, tool_call_tokens=TOOLS) as s:
        report = run_engine_check(EngineConfig(endpoint=s.url + "/v1", **API))
    assert report.verdict == "pass", [t.details for t in report.tests if t.reject]
    (cell,) = report.cases
    assert {t.name.rsplit("/", 1)[-1] for t in report.tests} >= {"max_tokens", "usage", "stop_strings", "stream",
                                                                 "min_tokens", "n_independent", "chat_stream",
                                                                 "tool_calls_finish_reason"}
    assert cell["seed_reproducible"] and cell["stop_requests"] >= 3
    assert cell["chat_tools"] and cell["chat_tool_call_replies"] >= 2  # tool calls parsed, streamed and compared
    if speculative:
        assert cell["stops_inside_step"] >= 2 and cell["stops_across_steps"] >= 1
        assert set(cell["tokens_per_delta"]) > {"1"}
        assert cell["chat_tool_call_in_multi_token_delta"] >= 2
    else:
        assert set(cell["tokens_per_delta"]) == {"1"}


@pytest.mark.stochastic(false_alarm=0.011, seed=1)  # PASS 0.001 + FAIL 0.01
def test_eos_inside_steps_passes_on_the_correct_server_and_the_cap_checked_first_fails():
    """toy-eos: EOS is the target's favourite token, proposed inside draft blocks; a stop string never taken from
    the EOS token's own text (ending there on EOS or on the stop is the same reply)."""
    config = dict(API, pair="toy-eos", prompts=2, stop_on_fail=False)
    with serving(generate, get_pair("toy-eos")) as good, serving(generate, get_pair("toy-eos"),
                                                                 api_mutant="cap_before_stop") as bad:
        ok = run_engine_check(EngineConfig(endpoint=good.url + "/v1", **config))
        broken = run_engine_check(EngineConfig(endpoint=bad.url + "/v1", **config))
    assert ok.verdict == "pass", [t.details for t in ok.tests if t.reject]
    assert broken.verdict == "fail"
    # prompt0 at T = 0.7 / top-p 0.9 is EOS with probability 1: the unseeded replies coincide and the report says
    # that a shared stream cannot be told from chance there
    assert any("prompt0: all 3 unseeded replies were one continuation, of target probability 1" in n and
               "cannot tell" in n for n in ok.notes), ok.notes


@pytest.mark.stochastic(false_alarm=0.01, seed=1)  # FAIL 0.01
def test_eos_masked_per_step_fails_the_min_tokens_test_on_toy_eos():
    """min_tokens counted in steps keeps EOS masked past min_tokens: fewer EOS there than the local target's law
    gives (the statistical part of `min_tokens`)."""
    config = dict(API, pair="toy-eos")
    with serving(generate, get_pair("toy-eos"), api_mutant="min_tokens_per_step") as s:
        report = run_engine_check(EngineConfig(endpoint=s.url + "/v1", **config))
    rejected = {t.name.rsplit("/", 1)[-1] for t in report.tests if t.reject}
    assert "min_tokens" in rejected, rejected


@pytest.mark.parametrize("mutant", ["cap_before_stop", "stop_in_step_tail", "ids_past_stop", "max_tokens_per_step",
                                    "stream_last_token_only", "unseeded_shared_stream", "min_tokens_per_step",
                                    "n_choices_share_seed", "reasoning_parser_once_per_delta",
                                    "tool_call_parser_once_per_delta", "stop_ids_unmasked_under_min_tokens",
                                    "tool_calls_finish_stream_stop"])
@pytest.mark.stochastic(false_alarm=0.01, seed=1)  # FAIL 0.01
def test_each_planted_api_bug_fails_the_api_check(mutant):
    from harness.mutants.api import API_MUTANTS

    with serving(generate, get_pair(PAIR), api_mutant=mutant, reasoning_end=2, tool_call_tokens=TOOLS) as s:
        report = run_engine_check(EngineConfig(endpoint=s.url + "/v1", **API))
    rejected = {t.name.rsplit("/", 1)[-1] for t in report.tests if t.reject}
    assert report.verdict == "fail" and rejected, API_MUTANTS[mutant].__doc__
    expected = {"cap_before_stop": "finish_reason", "stop_in_step_tail": "stop_strings", "ids_past_stop": "stop_strings",
                "max_tokens_per_step": "max_tokens", "stream_last_token_only": "stream",
                "unseeded_shared_stream": "unseeded_independent",
                "min_tokens_per_step": "stop_strings min_tokens",  # min_tokens: the stop ids masked per step
                "n_choices_share_seed": "n_independent", "reasoning_parser_once_per_delta": "chat_stream",
                "tool_call_parser_once_per_delta": "chat_stream",
                "stop_ids_unmasked_under_min_tokens": "min_tokens",
                "tool_calls_finish_stream_stop": "tool_calls_finish_reason chat_stream"}[mutant]
    assert set(expected.split()) <= rejected, rejected


def test_tool_calls_are_compared_only_where_the_server_streams_chat_with_tools():
    """A server without a tool-call parser refuses a chat stream with `tools` (as vLLM without
    --enable-auto-tool-choice does): the check sends no tools and says so; with the parser, the non-streamed
    tool_calls and the streamed delta.tool_calls of one multi-token step are the same calls."""
    from types import SimpleNamespace

    from harness.served.api import streams
    from harness.served.client import EngineClient

    for tools, allowed in ((None, False), (TOOLS, True)):
        with serving(generate, get_pair(PAIR), tool_call_tokens=tools) as s, EngineClient(s.url) as client:
            run = SimpleNamespace(tokenizer=IdTokenizer(16), engine=client, model=PAIR)
            assert streams(run, [1, 2, 3], chat=True) and streams(run, [1, 2, 3], tools=True) == allowed
            if not allowed:
                continue
            body = {"model": PAIR, "messages": [{"role": "user", "content": " 12 15 5 0"}], "max_tokens": 16,
                    "seed": 7, "return_token_ids": True, "tools": [{"type": "function", "function": {"name": "f"}}]}
            whole = client.post("/v1/chat/completions", body)["choices"][0]
            events = client.stream("/v1/chat/completions", {**body, "stream": True})
    entries = [e for ev in events["events"] for c in ev["choices"] for e in c["delta"].get("tool_calls") or []]
    reasons = [c["finish_reason"] for ev in events["events"] for c in ev["choices"] if c.get("finish_reason")]
    assert whole["finish_reason"] == "tool_calls" and reasons == ["tool_calls"]  # vLLM: a turn that called tools
    assert whole["token_ids"][:2] == [5, 3] and whole["message"]["tool_calls"][0]["function"]["name"] == "3"
    assert entries[0]["function"]["name"] == "3" and entries[0]["type"] == "function"
    assert "".join(e["function"]["arguments"] for e in entries if e["index"] == 0) == \
        whole["message"]["tool_calls"][0]["function"]["arguments"]


def test_stop_token_ids_are_masked_before_min_tokens_and_honoured_after_it():
    """min_tokens masks the request's stop_token_ids with EOS (vLLM: "before EOS or stop_token_ids can be
    generated"), speculation on and off; one past min_tokens ends the reply. The planted bug masks EOS only. An
    implementation the server cannot mask them for refuses the request, and the API check then sends none."""
    import functools
    from types import SimpleNamespace

    from harness.served.api import takes_min_stop_ids
    from harness.served.client import EngineClient

    body = {"model": PAIR, "prompt": [1, 2, 3], "max_tokens": 16, "min_tokens": 8, "stop_token_ids": [3, 5],
            "temperature": 1.0, "return_token_ids": True}
    for options, masked in (({}, True), ({"speculative": False}, True),
                            ({"api_mutant": "stop_ids_unmasked_under_min_tokens"}, False)):
        early = ended = 0
        with serving(generate, get_pair(PAIR), **options) as s, EngineClient(s.url) as client:
            for seed in range(12):
                (choice,) = client.post("/v1/completions", {**body, "seed": seed})["choices"]
                ids = choice["token_ids"]
                early += any(t in (3, 5) for t in ids[:8])
                if any(t in (3, 5) for t in ids[8:]):
                    ended += 1
                    assert ids[-1] in (3, 5) and not any(t in (3, 5) for t in ids[8:-1]), ids
                    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == ids[-1]
        assert (early == 0) == masked and ended >= 3, (options, early, ended)

    @functools.wraps(generate)
    def third_party(*args, **kwargs):
        return generate(*args, **kwargs)

    with serving(third_party, get_pair(PAIR)) as s, EngineClient(s.url, retries=0) as client:
        run = SimpleNamespace(engine=client, model=PAIR)
        assert takes_min_stop_ids(run, [1, 2, 3]) is False
        report = run_engine_check(EngineConfig(endpoint=s.url + "/v1", **{**API, "api_unseeded": 0}))
    assert report.verdict == "pass" and report.cases[0]["min_tokens_with_stop_ids"] is False


@pytest.mark.stochastic(false_alarm=0.01, seed=0)  # FAIL 0.01 (exit 1)
def test_the_cli_exit_codes_1_for_a_planted_bug_2_without_a_local_tokenizer():
    from harness.cli import main

    argv = ["verify", "--level", "engine", "--engine-checks", "api", "--prompts", "1", "--api-seeds", "2",
            "--api-length", "16", "--api-unseeded", "0", "--contexts", "none"]
    with serving(generate, get_pair(PAIR), api_mutant="ids_past_stop") as s:
        assert main([*argv, "--endpoint", s.url + "/v1", "--pair", PAIR]) == 1
        assert main([*argv, "--endpoint", s.url + "/v1"]) == 2


def test_an_unknown_api_mutant_is_a_clear_error():
    from harness.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="cap_before_stop"):
        GenerationBackend(generate, get_pair(PAIR), api_mutant="cap_before_stops")


def test_the_default_engine_checks_add_the_api_check_where_the_server_may_allow_it():
    from harness.cli import build_parser
    from harness.served.cli import engine_config

    def checks(*extra):
        config = engine_config(build_parser().parse_args(["verify", "--level", "engine", "--endpoint",
                                                          "http://127.0.0.1:9/v1", *extra]))
        return config.checks, config.api_where_allowed

    assert checks("--pair", "toy") == (("tokens", "api"), True)
    assert checks("--pair", "toy", "--engine-checks", "tokens") == (("tokens",), False)
    assert checks("--pair", "toy", "--api", "llama-server") == (("tokens", "api"), True)  # its native route
    assert checks("--pair", "toy", "--api", "llama-cpp-python") == (("tokens",), False)
    assert build_parser().parse_args(["serve", "--reasoning-end-token", "2"]).reasoning_end == 2
    assert build_parser().parse_args(["serve", "--tool-call-tokens", "5,9"]).tool_call_tokens == (5, 9)


def test_the_api_check_asks_the_server_whether_it_allows_it():
    """refusal(): a server that returns no token ids (as llama-server's OpenAI route) does not allow it; the correct
    server does; without a local tokenizer nothing does."""
    from types import SimpleNamespace

    from harness.served.api import refusal
    from harness.served.client import EngineClient

    for options, allowed in (({}, True), ({"token_ids": False}, False)):
        with serving(generate, get_pair(PAIR), **options) as s, EngineClient(s.url) as client:
            run = SimpleNamespace(tokenizer=IdTokenizer(16), config=SimpleNamespace(api="openai"), engine=client,
                                  model=PAIR)
            why = refusal(run, [1, 2, 3])
            assert (why is None) == allowed, why
            assert allowed or "no token ids" in why
            assert "tokenizer" in refusal(SimpleNamespace(**{**vars(run), "tokenizer": None}), [1, 2, 3])


def test_a_field_the_server_refuses_is_a_capability_it_lacks_skipped_and_listed():
    """`specdec serve` with a generate() of exactly the §1b signature refuses min_tokens (HTTP 400: no
    min_new_tokens): the probe names it with the server's words, and the tests that need it are skipped with why;
    the reference adapter takes every optional field."""
    from types import SimpleNamespace

    from harness.served.api import refused_fields, skipped_tests
    from harness.served.client import EngineClient

    def contract_generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
        return generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                        temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)

    found = {}
    for name, impl in (("contract", contract_generate), ("reference", generate)):
        with serving(impl, get_pair(PAIR)) as s, EngineClient(s.url) as client:
            run = SimpleNamespace(tokenizer=IdTokenizer(16), engine=client, model=PAIR)
            found[name] = refused_fields(run, [1, 2, 3], {})
            assert refused_fields(run, [1, 2, 3], {"min_tokens": "not offered", "n": "not offered"}) == {}
    assert found["reference"] == {} and set(found["contract"]) == {"min_tokens"}
    assert "HTTP 400" in found["contract"]["min_tokens"] and "min_new_tokens" in found["contract"]["min_tokens"]
    skipped = skipped_tests(found["contract"])
    assert set(skipped) == {"min_tokens"} and found["contract"]["min_tokens"] in skipped["min_tokens"]
    assert set(skipped_tests({"n": "4 slots"})) == {"n_independent"}


def test_no_shorter_bases_are_asked_of_an_engine_that_streams_one_token_per_delta(tmp_path):
    """The shorter bases exist to put the cap inside a multi-token step; an implementation that reports no steps
    (a generate() of the bare §1b signature: one token per delta) has none, so they would be requests spent on
    nothing (24 of the 91 of a smollm2 cell, issue 58). The stops are still placed, at spread positions."""
    import json

    def contract_generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
        return generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                        temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)

    with serving(contract_generate, get_pair(PAIR)) as s:
        report = run_engine_check(EngineConfig(endpoint=s.url + "/v1", out=str(tmp_path), **API))
    assert report.verdict == "pass", [t.details for t in report.tests if t.reject]
    (cell,) = report.cases
    assert cell["tokens_per_delta"] == {"1": sum(cell["tokens_per_delta"].values())} and cell["stop_requests"] >= 2
    keys = [json.loads(line)["key"] for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    bases = {k.split("/base/")[1].split("/")[0] for k in keys if "/base/" in k}
    assert bases == {str(API["api_length"])}, bases
