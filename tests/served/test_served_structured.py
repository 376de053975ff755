"""Structured outputs at the engine level, llama-server's way: the constraint sent under llama-server's own `grammar`
field (ConstrainedLlamaServerClient), the engine check run through that client against a local float64
ground truth with the same grammar, and the format test on every returned continuation (first offending
position named). A fake llama-server (httpx.MockTransport over the toy pair) stands in for the binary: an
honest one passes, one that drops the grammar or keeps the grammar state one token behind fails."""

import json

import httpx
import pytest
import torch

from harness.check.settings import Setting
from harness.check.structured import ConstraintSpec, compile_for_pair
from harness.errors import HarnessError
from harness.mutants import get
from harness.mutants.structured import FREE_THEN_CONSTRAINED
from harness.pairs import get_pair
from harness.served.check import run_engine_check_with
from harness.served.config import EngineConfig
from harness.served.structured import (
    ConstrainedLlamaServerClient,
    engine_format_test,
    gbnf_spec,
    speculation_metrics,
    stored_rows,
)
from harness.served.text import encode, tokenizer_for
from specdec_ref.adapters import generate as reference_generate
from specdec_ref.constraints import GrammarConstraint, toy_tokenizer

pytest.importorskip("llguidance")

TOY_GBNF = 'root ::= [a-eg-p]* "f" [a-c]+'  # FREE_THEN_CONSTRAINED as llama.cpp's GBNF


def _fake_llama_server(generate_fn, bodies: list, honour_grammar: bool = True):
    """A MockTransport speaking llama-server's native routes over the toy pair: /v1/models, /tokenize and
    /completion, which samples with `generate_fn` under the body's `grammar` (compiled for the toy letters)."""
    pair = get_pair("toy")
    tokenizer = tokenizer_for(pair)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "smollm2"}]})
        body = json.loads(request.content or b"{}")
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": encode(tokenizer, body["content"])})
        if request.url.path != "/completion":
            return httpx.Response(404, json={"error": {"message": "no such route"}})
        bodies.append(body)
        extra = {}
        if honour_grammar and body.get("grammar"):
            extra["constraint"] = compile_for_pair(gbnf_spec(body["grammar"]), pair)
        prompt = body["prompt"]
        ids = torch.tensor([encode(tokenizer, prompt) if isinstance(prompt, str) else list(prompt)])
        out = generate_fn(pair.target, pair.draft, ids, max_new_tokens=body["n_predict"], gamma=3,
                          temperature=body["temperature"], top_k=None, top_p=None, seed=body["seed"], **extra)
        tokens = [t for t in out[0].tolist() if t >= 0]
        return httpx.Response(200, json={"content": "", "tokens": tokens, "stop_type": "limit"})

    return httpx.MockTransport(handler)


def _check(transport, out):
    spec = gbnf_spec(TOY_GBNF)
    config = EngineConfig(endpoint="http://fake-llama-server", pair="toy", api="llama-server", samples=400, prompts=1,
                          chunk=1, concurrency=1, seed=1, stop_on_fail=False, settings=(Setting(1.0, constraint=spec),),
                          out=str(out))
    with ConstrainedLlamaServerClient(config.endpoint, spec=spec, native={"grammar": TOY_GBNF}, concurrency=1,
                                      transport=transport) as client:
        report, path = run_engine_check_with(client, config)
        assert speculation_metrics(client) == {}  # the fake has no /metrics: nothing invented
    constraint = compile_for_pair(spec, get_pair("toy"))
    return report, engine_format_test(constraint, stored_rows(path), 3, None)  # toy pairs: 3 new tokens


def test_gbnf_is_the_same_language_as_the_regex_it_spells():
    spec = gbnf_spec(TOY_GBNF)
    pair = get_pair("toy")
    assert spec.kind == "lark"
    a = compile_for_pair(spec, pair)
    b = compile_for_pair(ConstraintSpec("regex", FREE_THEN_CONSTRAINED), pair)
    for prefix in [(), (0,), (5,), (5, 1), (3, 4, 5, 2), (5, 2, 0)]:
        assert torch.equal(a.allowed(prefix), b.allowed(prefix)), prefix


@pytest.mark.stochastic(false_alarm=0.001, seed=1)  # PASS 0.001
def test_the_client_sends_the_grammar_under_llama_servers_name_only_with_a_constrained_request(tmp_path):
    bodies = []
    report, fmt = _check(_fake_llama_server(reference_generate, bodies), tmp_path / "honest")
    sampling = [b for b in bodies if b["n_predict"] == 3]  # (the check's first request asks for 1 token, unconstrained)
    assert len(sampling) == 400 and all(b.get("grammar") == TOY_GBNF for b in sampling)
    assert not any("structured_outputs" in b or "response_format" in b for b in bodies)
    assert report.verdict == "pass" and not any(t.reject for t in report.tests), \
        [(t.name, t.p_value) for t in report.tests if t.reject]
    assert fmt.p_value == 1.0 and fmt.details["violations"] == 0 and fmt.n == 400
    # an unconstrained request carries no grammar; a request with another constraint is refused
    spec = gbnf_spec(TOY_GBNF)
    bodies.clear()
    with ConstrainedLlamaServerClient("http://fake-llama-server", spec=spec, native={"grammar": TOY_GBNF},
                                      transport=_fake_llama_server(reference_generate, bodies)) as client:
        client.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 2, "seed": 0, "temperature": 1.0})
        assert "grammar" not in bodies[-1]
        with pytest.raises(HarnessError, match="the request has regex="):
            client.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 2, "seed": 0,
                                            "structured_outputs": {"regex": "[a-c]+"}})
    with pytest.raises(HarnessError, match="grammar"):
        ConstrainedLlamaServerClient("http://x", spec=spec, native={"regex": "a"})


@pytest.mark.end_to_end
def test_a_server_that_drops_the_grammar_fails_the_format_test_naming_the_position(tmp_path):
    report, fmt = _check(_fake_llama_server(reference_generate, [], honour_grammar=False), tmp_path / "dropped")
    assert fmt.p_value == 0.0 and fmt.details["violations"] > 0
    assert "at new-token position" in fmt.details["message"] and "is not allowed by lark=" in fmt.details["message"]
    assert report.verdict == "fail"  # the PIT of a masked-out token: off the constrained support


@pytest.mark.end_to_end
def test_a_server_with_the_grammar_state_one_token_behind_fails(tmp_path):
    report, fmt = _check(_fake_llama_server(get("grammar_state_one_behind").fn, []), tmp_path / "behind")
    assert report.verdict == "fail" and fmt.p_value == 0.0


def test_engine_format_test_checks_eos_only_where_the_automaton_accepts():
    c = GrammarConstraint("regex", "f[a-c]+", toy_tokenizer(16, eos=15))
    ok = engine_format_test(c, [([5, 0, 1], "length"), ([5, 0], "stop"), ([5, 1, 15], "stop")], 3, 15)
    assert ok.p_value == 1.0
    early = engine_format_test(c, [([5, 0, 1], "length"), ([5], "stop")], 3, 15)  # EOS right after 'f'
    assert early.p_value == 0.0 and "row 1: token 15 at new-token position 1" in early.details["message"]


def test_stored_rows_reads_the_sampling_cells_only(tmp_path):
    path = tmp_path / "engine-x.jsonl"
    lines = [{"key": "engine/T=1/[1]/0/0", "response": {"choices": [{"token_ids": [5, 0], "finish_reason": "stop"}]}},
             {"key": "engine-greedy/T=0/[1]/0/0", "response": {"choices": [{"token_ids": [9], "finish_reason": "x"}]}}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n{truncated")
    assert stored_rows(path) == [([5, 0], "stop")]
    assert stored_rows(tmp_path / "absent.jsonl") == []


@pytest.mark.parametrize("which", ["llama-server", "vllm"])
@pytest.mark.end_to_end
def test_the_engine_constraints_mask_every_tokenization_on_smollm2(which):
    """The campaign's grammar and regex (suites/campaigns/structured.py) force no byte, so llguidance's masks are
    the naive ones (every token whose text extends a prefix of the language), which is what llama.cpp's grammar
    sampler and xgrammar allow; a grammar forcing a string would differ: llguidance allows its canonical token
    only."""
    regex = pytest.importorskip("regex")
    from harness.models.smollm2 import smollm2_available

    ok, why = smollm2_available()
    if not ok:
        pytest.skip(why)
    from suites.campaigns.structured import ENGINE_GBNF, VLLM_REGEX

    pair = get_pair("smollm2")
    tok = pair.tokenizer
    spec, naive = {"llama-server": (gbnf_spec(ENGINE_GBNF), r"[a-z ]+[:=] ?[0-9]+"),
                   "vllm": (ConstraintSpec("regex", VLLM_REGEX), VLLM_REGEX)}[which]
    c = compile_for_pair(spec, pair)
    naive = regex.compile(naive)
    texts = [tok.convert_tokens_to_string([tok.convert_ids_to_tokens(t)]) for t in range(pair.vocab_size)]
    special = set(tok.all_special_ids)
    for prefix in ["", " paris", " paris:", " paris: 2", " paris: 2100,", " paris: 2100, ly"]:
        ids = tuple(tok.encode(prefix)) if prefix else ()
        if c.first_violation(ids) is not None:
            continue  # (the llama-server grammar has no list)
        want = {t for t in range(pair.vocab_size)
                if t not in special and texts[t] and naive.fullmatch(prefix + texts[t], partial=True)}
        assert set(c.allowed(ids).nonzero().flatten().tolist()) - special == want, prefix
    forced = compile_for_pair(gbnf_spec('root ::= "{\\"a\\": " [0-9]+ "}"'), pair)
    assert not forced.allowed(())[tok.convert_tokens_to_ids("{")]  # '{' starts the forced string, yet masked
