"""Structured outputs under speculation: the llguidance token automata, the reference with a
constraint (exact law = the constrained target law on toy automata), the format check, the structured
mutants (exact TV, caught by the format check where the law tests have no power), bad constraints
(exit 2, one line, before any work) and transformers-style prefix_allowed_tokens_fn."""

import pytest
import torch

from harness.check.exact_laws import continuation_law, total_variation
from harness.check.generation import run_generation_check
from harness.check.settings import Setting, parse_setting
from harness.check.structured import ConstraintSpec, bind_constraints, dead_end, format_problem
from harness.errors import HarnessError
from harness.models.toy_pairs import toy_models, toy_prompts
from harness.mutants import get, implementations
from harness.mutants.generation import exact_output_law
from harness.mutants.structured import ALTERNATION, FORCED_EOS, FREE_THEN_CONSTRAINED, STEP_MUTANTS
from harness.pairs import get_pair
from specdec_ref import SpecDecInputError
from specdec_ref.adapters import generate as reference_generate
from specdec_ref.adapters import verify_masked
from specdec_ref.constraints import GrammarConstraint, toy_tokenizer
from specdec_ref.generate import REFERENCE_HOOKS, default_eos, eos_set
from specdec_ref.processing import History, SamplingParams, process

pytest.importorskip("llguidance")

PROMPTS = toy_prompts()[:2]
TOY_EOS = 5  # toy-eos: EOS = the toy target's favourite first token ('f')
STRUCTURED = [i.name for i in implementations(contract="generation") if i.fn.__module__ == "harness.mutants.structured"]


def _allowed(c, prefix):
    return c.allowed(prefix).nonzero().flatten().tolist()


def test_toy_regex_masks_follow_the_letters_and_allow_eos_only_when_accepting():
    c = GrammarConstraint("regex", "a(b|c)*d", toy_tokenizer(16, eos=15))
    assert _allowed(c, ()) == [0]
    assert _allowed(c, (0,)) == [1, 2, 3]  # b, c, d; no EOS: "a" is not a match
    assert _allowed(c, (0, 2)) == [1, 2, 3]
    assert _allowed(c, (0, 2, 3)) == [15]  # complete, nothing may follow: EOS forced
    assert c.accepting((0, 2, 3)) and not c.accepting((0, 2))
    assert _allowed(c, (0,)) == [1, 2, 3]  # an earlier state is kept (rolling back = keeping it)
    assert c.first_violation([0, 2, 1, 15]) == 3 and c.first_violation([0, 2, 3, 15]) is None


def test_lark_grammar_and_repetition_compile_for_the_toy_tokenizer():
    c = GrammarConstraint("lark", 'start: "f" x | "o" "o"\nx: /[a-c]+/', toy_tokenizer(16))
    assert _allowed(c, ()) == [5, 14] and _allowed(c, (5,)) == [0, 1, 2] and _allowed(c, (14,)) == [14]


def test_a_complete_match_without_eos_is_a_dead_end_found_before_any_work():
    c = GrammarConstraint("regex", "[a-d]{2}", toy_tokenizer(16))  # toy: no EOS id
    assert dead_end(c, 3, set()) == (0, 0) and dead_end(c, 2, set()) is None


def test_processing_masks_before_the_cuts_and_greedy_is_the_masked_argmax():
    c = GrammarConstraint("regex", "[b-d]+", toy_tokenizer(16))
    logits = torch.randn(16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    history = History(torch.tensor([[3, 3]]), torch.tensor([1]))
    masked = logits.masked_fill(~c.allowed((3,)), float("-inf"))
    got = process(logits[None], SamplingParams(0.7, top_p=0.8, constraint=c), history)[0]
    want = process(masked[None], SamplingParams(0.7, top_p=0.8))[0]
    assert torch.allclose(got, want) and set(got.nonzero().flatten().tolist()) <= {1, 2, 3}
    greedy = process(logits[None], SamplingParams(0.0, constraint=c), history)[0]
    assert int(greedy.argmax()) == int(masked.argmax())


def _exact_tv(pair_name, setting, hooks=REFERENCE_HOOKS, prompts=PROMPTS):
    target, draft = toy_models({"toy": "0.7", "toy-eos": "eos"}[pair_name], torch.float64)
    eos = eos_set(default_eos(target))
    (bound,) = bind_constraints((setting,), get_pair(pair_name), 3)
    return [total_variation(exact_output_law(target, draft, p, 3, 3, bound, hooks, eos),
                            continuation_law(target, p, 3, bound, 16, eos)) for p in prompts]


@pytest.mark.slow
@pytest.mark.parametrize("pair_name,regex,temperature,top_p", [
    ("toy", FREE_THEN_CONSTRAINED, 1.0, None),  # the state changes inside blocks
    ("toy", ALTERNATION, 0.8, 0.95),  # alternation + repetition, with the cuts after the mask
    ("toy-eos", FORCED_EOS, 1.0, None),  # the automaton forces EOS at the third token
])
def test_reference_output_law_is_the_constrained_target_law(pair_name, regex, temperature, top_p):
    setting = Setting(temperature, top_p=top_p, constraint=ConstraintSpec("regex", regex))
    assert max(_exact_tv(pair_name, setting)) < 1e-9


def test_the_constraint_moves_the_toy_law():
    target, _ = toy_models("0.7", torch.float64)
    (bound,) = bind_constraints((Setting(1.0, constraint=ConstraintSpec("regex", FREE_THEN_CONSTRAINED)),),
                                get_pair("toy"), 3)
    assert total_variation(continuation_law(target, PROMPTS[0], 3, bound, 16, set()),
                           continuation_law(target, PROMPTS[0], 3, Setting(1.0), 16, set())) > 0.1


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in STRUCTURED if get(n).fn.hooks is not None])
def test_structured_mutants_exact_tv(name):
    impl = get(name)
    (setting,) = impl.fn.settings
    tvs = _exact_tv(impl.pair, setting, impl.fn.hooks, PROMPTS[:1])
    assert (tvs[0] < 1e-9) if impl.must_pass else (tvs[0] > 0.1), tvs


@pytest.mark.parametrize("name", ["grammar_state_one_behind", "grammar_not_rolled_back", "mask_first_position_only"])
def test_format_check_fails_mutants_where_the_law_tests_have_no_power(name):
    """60 samples: the format check (no model needed) fails them; the distributional tests cannot yet."""
    impl = get(name)
    report = run_generation_check(impl.fn, get_pair(impl.pair), settings=impl.fn.settings, samples=60, seed=3)
    fmt = [t for t in report.tests if t.name.endswith("constraint_format")]
    # The distributional tests of the joint law (the support tests, and the PIT of a token of probability 0,
    # act as a format check of their own when the target model is at hand in float64).
    law = [t for t in report.tests if t.name.endswith(("pooled_pearson", "pooled_g"))]
    rate = report.false_alarm_rate / report.declared_tests
    assert report.verdict == "fail"
    assert any(t.p_value == 0 for t in fmt) and "not allowed by regex=" in " ".join(t.details.get("message", "")
                                                                                for t in fmt)
    assert all(t.p_value > rate for t in law), [(t.name, t.p_value) for t in law if t.p_value <= rate]


@pytest.mark.end_to_end
def test_reference_and_the_lossless_control_pass_the_format_check():
    for name in ("reference_constrained", "mask_target_not_draft"):
        impl = get(name)
        report = run_generation_check(impl.fn, get_pair(impl.pair), settings=impl.fn.settings, samples=300, seed=1)
        fmt = [t for t in report.tests if t.name.endswith("constraint_format")]
        assert len(fmt) == 2 and all(t.p_value == 1 for t in fmt), name


def test_format_problem_names_the_first_offending_position():
    c = GrammarConstraint("regex", "f[a-c]+", toy_tokenizer(16))
    bad, message = format_problem(c, [0], [[5, 0, 1], [5, 3, 1]])
    assert bad == 1 and "row 1: token 3 at new-token position 1" in message


def test_prefix_allowed_tokens_fn_gives_the_same_tokens_as_the_automaton():
    c = GrammarConstraint("regex", FREE_THEN_CONSTRAINED, toy_tokenizer(16))
    pair = get_pair("toy")
    ids = torch.tensor([PROMPTS[0]] * 50)

    def allowed(batch_id, input_ids):
        return _allowed(c, tuple(input_ids[len(PROMPTS[0]):].tolist()))

    args = dict(max_new_tokens=5, gamma=3, temperature=1.0, top_k=None, top_p=None, seed=4)
    a = reference_generate(pair.target, pair.draft, ids, constraint=c, **args)
    b = reference_generate(pair.target, pair.draft, ids, prefix_allowed_tokens_fn=allowed, **args)
    assert torch.equal(a, b) and all(c.first_violation(r) is None for r in a.tolist())


def test_prefix_allowed_tokens_fn_allowing_nothing_is_refused():
    pair = get_pair("toy")
    with pytest.raises(SpecDecInputError, match="allows no token"):
        reference_generate(pair.target, pair.draft, torch.tensor([[1, 2]]), max_new_tokens=3, gamma=2,
                           temperature=1.0, top_k=None, top_p=None, seed=0,
                           prefix_allowed_tokens_fn=lambda b, ids: [] if len(ids) > 3 else [1])


def test_setting_text_takes_the_constraint_last_with_its_commas():
    (s,) = parse_setting("T=0.8,top_p=0.9,regex=[a-c]{1,3}f")
    assert (s.temperature, s.top_p, s.constraint) == (0.8, 0.9, ConstraintSpec("regex", "[a-c]{1,3}f"))
    assert s.label == "T=0.8,top_p=0.9,regex=[a-c]{1,3}f"
    (j,) = parse_setting('T=1,json_schema={"type": "object", "required": ["a", "b"]}')
    assert j.constraint.kind == "json_schema" and j.constraint.source.endswith('["a", "b"]}')


@pytest.mark.parametrize("setting,needle", [
    ("T=1,regex=a(", "regex rejected by llguidance"),
    ("T=1,regex=z+", "allows no token of this vocabulary"),  # accepts nothing over the toy letters
    ('T=1,json_schema={"type": "frob"}', "json_schema rejected by llguidance"),
    ("T=1,json_schema={not json", "not valid JSON"),
    ('T=1,json_schema={"type": "string"}', "allows no token of this vocabulary"),  # '"' is no toy letter
    ("T=1,regex=[a-d]{2}", "no token is allowed after [0, 0]"),  # an all-zero mask at the third position
    ("T=1,regex=", "needs a value"),
    ("T=1,lark=start: (", "lark rejected by llguidance"),
])
def test_bad_constraints_exit_2_with_one_line_before_any_work(setting, needle, capsys):
    from harness.cli import main

    code = main(["verify", "--impl", "specdec_ref.adapters:generate", "--level", "generation", "--pair", "toy",
                 "--setting", setting])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("specdec")]
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err + out and "elapsed" not in err


def test_bind_refuses_a_constraint_object_of_the_wrong_width():
    with pytest.raises(HarnessError, match="masks 8 tokens"):
        from harness.check.settings import supported_settings

        supported_settings(reference_generate, (Setting(1.0, constraint=GrammarConstraint(
            "regex", "[a-c]+", toy_tokenizer(8))),), 16)


# ---------------------------------------------------------------- sampler level: the masked step


def test_masked_step_reference_passes_and_the_automaton_changes_state_inside_blocks():
    from harness.check.structured_step import _plan, draw_inputs
    from harness.check.structured_step import run_constrained_step_check as check
    from suites.catalogues.structured_step import CASES

    report = check(verify_masked, seed=2)
    assert report.verdict == "pass" and report.samples == 40_000
    _, _, _, allowed = draw_inputs(_plan(CASES[0], 2), 200, torch.Generator().manual_seed(0))
    assert (allowed[:, 1:] != allowed[:, :1]).any()  # masks differ between positions of one block


@pytest.mark.parametrize("mutant", STEP_MUTANTS, ids=lambda f: f.__name__)
def test_masked_step_mutants_fail(mutant):
    from harness.check.structured_step import run_constrained_step_check as check

    assert all(check(mutant, seed=s).verdict == "fail" for s in range(5))


def test_masked_step_format_check_names_the_offending_token():
    from harness.check.structured_step import run_constrained_step_check as check

    report = check(STEP_MUTANTS[2], seed=1)  # state one behind
    fmt = [t for t in report.tests if t.name.endswith("constraint_format") and t.p_value == 0]
    assert fmt and "the automaton does not allow; first: row" in fmt[0].details["message"]


# ---------------------------------------------------------------- engine level: request names, specdec serve


@pytest.mark.parametrize("body,kind", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}}}},
     "json_schema"),
    ({"response_format": {"type": "json_object"}}, "json_schema"),
    ({"structured_outputs": {"regex": "[a-c]+"}}, "regex"),
    ({"structured_outputs": {"choice": ["fa", "o"]}}, "regex"),
    ({"guided_regex": "[a-c]+"}, "regex"),
    ({"guided_json": {"type": "integer"}}, "json_schema"),
    ({"json_schema": {"type": "integer"}}, "json_schema"),  # llama.cpp server / SGLang
    ({"grammar": 'root ::= "a" [b-d]+'}, "lark"),  # llama.cpp GBNF
    ({"structured_outputs": {"grammar": 'start: "a" /[b-d]+/'}}, "lark"),
])
def test_request_names_give_the_constraint(body, kind):
    from harness.served.structured import request_constraint

    name, spec = request_constraint(body)
    assert name == next(iter(body)) and spec.kind == kind


def test_conflicting_request_names_are_refused():
    from harness.served.structured import request_constraint

    with pytest.raises(HarnessError, match="different constraints"):
        request_constraint({"guided_regex": "a+", "structured_outputs": {"regex": "b+"}})


@pytest.mark.parametrize("field", [{"structured_outputs": {"regex": FREE_THEN_CONSTRAINED}},
                                   {"guided_regex": FREE_THEN_CONSTRAINED},
                                   {"grammar": 'root ::= [a-eg-p]* "f" [a-c]+'}])
def test_specdec_serve_honours_the_constraint_under_each_name(field):
    import httpx

    from harness.served.serve import serving

    c = GrammarConstraint("regex", FREE_THEN_CONSTRAINED, toy_tokenizer(16))
    with serving(reference_generate, get_pair("toy")) as s:
        reply = httpx.post(s.url + "/v1/completions", json={"model": "toy", "prompt": PROMPTS[0], "max_tokens": 4, "n": 40,
                                                             "temperature": 1.0, "seed": 1, "return_token_ids": True,
                                                             **field}, timeout=60).json()
        bad = httpx.post(s.url + "/v1/completions", json={"model": "toy", "prompt": PROMPTS[0], "max_tokens": 4,
                                                           "guided_regex": "a("}, timeout=60)
    rows = [ch["token_ids"] for ch in reply["choices"]]
    assert len(rows) == 40 and all(c.first_violation(r) is None for r in rows)
    assert any(5 in r for r in rows)  # the state changed (the marker 'f' = 5 was emitted) in some rows
    assert bad.status_code == 400 and "regex rejected by llguidance" in bad.json()["error"]["message"]


@pytest.mark.stochastic(false_alarm=0.011, seed=2)  # PASS 0.001 + FAIL 0.01
def test_engine_check_sends_the_constraint_and_catches_a_grammar_bug_over_http():
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig
    from harness.served.serve import serving

    (setting,) = get("grammar_state_one_behind").fn.settings
    kw = dict(pair="toy", ground_truth="local", samples=600, prompts=1, chunk=600, settings=(setting,), seed=2)
    with serving(reference_generate, get_pair("toy")) as good, \
            serving(get("grammar_state_one_behind").fn, get_pair("toy")) as bad:
        ok = run_engine_check(EngineConfig(endpoint=good.url + "/v1", **kw))
        broken = run_engine_check(EngineConfig(endpoint=bad.url + "/v1", **kw))
    assert ok.verdict in ("pass", "inconclusive") and not any(t.reject for t in ok.tests), \
        [t.name for t in ok.tests if t.reject]
    assert broken.verdict == "fail"


def _ignores_constraint(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed,
                        constraint=None, **extra):
    """Accepts the constraint and drops it (what a server that ignores the request field does)."""
    return reference_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                              temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, **extra)


@pytest.mark.end_to_end
def test_probe_reports_which_structured_output_names_are_honoured():
    from harness.served.probe import probe
    from harness.served.serve import serving

    with serving(reference_generate, get_pair("toy")) as good, serving(_ignores_constraint, get_pair("toy")) as bad:
        honoured = probe(good.url + "/v1")["structured_outputs"]
        ignored = probe(bad.url + "/v1")["structured_outputs"]
    assert honoured["structured_outputs.regex (vLLM)"] == "honoured" and honoured["grammar (llama.cpp GBNF)"] == \
        "honoured"
    assert honoured["response_format json_schema (OpenAI)"] == "refused (400)"  # '"' is no toy letter
    assert ignored["structured_outputs.regex (vLLM)"] == "ignored" and ignored["guided_regex (vLLM, older)"] == \
        "ignored"


@pytest.mark.parametrize("impl,code", [("specdec_ref.adapters:verify_masked", 0),
                                       ("harness.mutants.structured:step_state_one_behind", 1),
                                       ("specdec_ref.adapters:verify", 2)])  # the 4-argument step: wrong contract
def test_specdec_verify_step_masked(impl, code, capsys):
    from harness.cli import main

    assert main(["verify", "--impl", impl, "--step", "masked"]) == code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert ("verdict: PASS" in out) if code == 0 else ("verdict: FAIL" in out) if code == 1 else \
        "masked_step contract" in err
