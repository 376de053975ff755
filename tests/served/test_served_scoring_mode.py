"""A reference endpoint's *prompt scores* are what ground truth (b) and the logprobs check compare against, and
they need not follow the logprobs it reports for sampled tokens: vLLM 0.32 writes prompt scores raw whatever
its --logprobs-mode ("prompt tokens skip sampling processors", its model runner). A check that asked only the
sampled-token mode took such a server for a scorer of the processed law and failed correct engines at T != 1.
`specdec serve` now writes prompt scores as vLLM does by default (`prompt_logprobs_mode`), the probe asks the
scorer's own mode, and a raw scorer is used only where the raw law is the law sampled."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from harness.check.settings import Setting
from harness.errors import HarnessError
from harness.pairs import get_pair
from harness.served.check import run_engine_check
from harness.served.client import EngineClient
from harness.served.config import EngineConfig
from harness.served.probe import probe, scoring_mode
from harness.served.serve import serving
from harness.served.truths import choose_ground_truth
from specdec_ref.adapters import generate

PAIR = "toy-low"
SMALL = dict(samples=1200, prompts=1, chunk=600, seed=3, pair=PAIR)
NOT_PLAIN = (Setting(0.0), Setting(0.7, top_p=0.9))


@pytest.fixture(scope="module")
def vllm_like():
    """Speculation off, processed sampled-token logprobs, raw prompt scores: how vLLM 0.32 serves with
    --logprobs-mode processed_logprobs."""
    with serving(generate, get_pair(PAIR), speculative=False, logprobs_mode="processed_logprobs") as s:
        yield s.url + "/v1"


@pytest.fixture(scope="module")
def processing_scorer():
    with serving(generate, get_pair(PAIR), speculative=False, logprobs_mode="processed_logprobs",
                 prompt_logprobs_mode="processed_logprobs") as s:
        yield s.url + "/v1"


@pytest.fixture(scope="module")
def engine_on():
    with serving(generate, get_pair(PAIR)) as s:
        yield s.url + "/v1"


def test_prompt_scores_are_raw_by_default_whatever_the_logprobs_mode(vllm_like, processing_scorer):
    def first_score(url, temperature):
        with httpx.Client(timeout=60) as http:
            reply = http.post(url + "/completions", json={"model": PAIR, "prompt": [1, 2, 3, 4], "max_tokens": 1,
                                                          "prompt_logprobs": 1, "temperature": temperature})
        entry = reply.json()["choices"][0]["prompt_logprobs"][1]
        return {k: v["logprob"] for k, v in entry.items()}

    assert first_score(vllm_like, 1.0) == first_score(vllm_like, 0.5)
    assert first_score(processing_scorer, 1.0) != first_score(processing_scorer, 0.5)


@pytest.mark.end_to_end
def test_the_probe_reports_the_scoring_mode_apart_from_the_sampled_token_mode(vllm_like, processing_scorer):
    like, proc = probe(vllm_like), probe(processing_scorer)
    assert like["logprobs_mode"] == proc["logprobs_mode"] == "processed"
    assert like["scoring_mode"] == "raw" and proc["scoring_mode"] == "processed"
    assert "T = 1 only" in like["ground_truths"]["b (scoring endpoint)"]
    assert "T = 1 only" not in proc["ground_truths"]["b (scoring endpoint)"]
    with EngineClient(vllm_like) as client:
        assert scoring_mode(client, PAIR, [1, 2, 3, 4], None) == "unknown"


def test_a_raw_scorer_at_temperature_is_refused_exit_2_not_a_false_fail(engine_on, vllm_like, capsys):
    """Before: the sampled-token mode said 'processed', the raw prompt scores were taken for the processed law,
    and the correct engine FAILed at T = 0.7 / top-p 0.9."""
    from harness.cli import main

    with pytest.raises(HarnessError, match="prompt scores are raw"):
        run_engine_check(EngineConfig(endpoint=engine_on, reference_endpoint=vllm_like, ground_truth="score",
                                      settings=NOT_PLAIN, **SMALL))
    code = main(["verify", "--level", "engine", "--endpoint", engine_on, "--reference-endpoint", vllm_like,
                 "--pair", PAIR, "--ground-truth", "score", "--setting", "T=0.7,top_p=0.9", "--samples", "300",
                 "--prompts", "1", "--contexts", "none"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "prompt scores are raw" in err and "\n" not in err and "Traceback" not in err


@pytest.mark.stochastic(false_alarm=0.011, seed=3)  # PASS 0.001 + FAIL 0.01
def test_a_raw_scorer_scores_the_raw_law_and_catches_a_mutant(engine_on, vllm_like):
    from harness.mutants import get

    plain = (Setting(0.0), Setting(1.0))
    good = run_engine_check(EngineConfig(endpoint=engine_on, reference_endpoint=vllm_like, ground_truth="score",
                                         settings=plain, **SMALL))
    assert good.verdict == "pass", [t.name for t in good.tests if t.reject]
    with serving(get("greedy_verify_when_sampling").fn, get_pair(PAIR)) as bad:
        broken = run_engine_check(EngineConfig(endpoint=bad.url + "/v1", reference_endpoint=vllm_like,
                                               ground_truth="score", settings=plain, **SMALL))
    assert broken.verdict == "fail"


def test_auto_picks_two_sample_where_a_raw_scorer_cannot_score(vllm_like, processing_scorer):
    with EngineClient(vllm_like) as raw, EngineClient(processing_scorer) as processed:
        def pick(settings, reference):
            return choose_ground_truth(EngineConfig(endpoint=vllm_like, settings=settings), None, reference, PAIR)

        assert pick(NOT_PLAIN, raw) == "two-sample"
        assert pick((Setting(0.0), Setting(1.0)), raw) == "score"
        assert pick(NOT_PLAIN, processed) == "score"


@pytest.mark.end_to_end
def test_logprobs_against_a_raw_scorer(vllm_like):
    """Processed engine logprobs against raw prompt scores at T = 0.7: refused (before: a false FAIL); raw engine
    logprobs against the same scorer: compared, and PASS."""
    kw = dict(checks=("logprobs",), prompts=1, reference_endpoint=vllm_like, prompt_texts=(" 1 2 3",))
    with serving(generate, get_pair(PAIR), logprobs_mode="processed_logprobs") as processed, \
            pytest.raises(HarnessError, match="prompt scores are raw"):
        run_engine_check(EngineConfig(endpoint=processed.url + "/v1", settings=(Setting(0.7, top_p=0.9),), **kw))
    with serving(generate, get_pair(PAIR)) as raw:
        ok = run_engine_check(EngineConfig(endpoint=raw.url + "/v1", settings=(Setting(0.7, top_p=0.9),), **kw))
    assert ok.verdict == "pass" and {c.get("truth") for c in ok.cases} == {"score"}


@pytest.mark.stochastic(false_alarm=0.002, seed=3)  # a PASS and an INCONCLUSIVE that rejects nothing, 0.001 each
def test_a_scorer_listing_little_of_the_law_cannot_make_a_pass(engine_on, vllm_like):
    """TV(p, p') <= TV_coarse + p(rest): every detectable TV of (b) carries the mass outside the listed top k, so a
    scorer that lists 1 token of the toy law (16 tokens) leaves a run INCONCLUSIVE where listing them all PASSes."""
    plain = (Setting(1.0),)
    full = run_engine_check(EngineConfig(endpoint=engine_on, reference_endpoint=vllm_like, ground_truth="score",
                                         settings=plain, **SMALL))
    two = run_engine_check(EngineConfig(endpoint=engine_on, reference_endpoint=vllm_like, ground_truth="score",
                                        settings=plain, top_logprobs=1, **SMALL))
    assert full.verdict == "pass" and two.verdict == "inconclusive"
    hidden = [c["hidden_mass"] for c in two.cases if "hidden_mass" in c][0]
    pooled = next(t for t in two.tests if t.name.endswith("/pit_uniform"))
    assert hidden > 0.25 and pooled.detectable_tv == pytest.approx(pooled.details["coarse_detectable_tv"] + hidden)
    assert two.detectable_tv > full.detectable_tv + 0.25 > 0.25


def test_charge_hidden_mass_adds_the_rest_mass_each_test_saw():
    from harness.served.battery import charge_hidden_mass, coarse_masses
    from harness.stats import TestResult

    rest = np.array([coarse_masses(c, 1)[2] for c in ({1: 0.9}, {1: 0.5, 2: 0.3}, {1: 1.0}, {1: 0.6})])
    assert rest == pytest.approx([0.1, 0.2, 0.0, 0.4])
    assert coarse_masses({1: 0.5, 2: 0.3}, 2) == pytest.approx((0.5, 0.3, 0.2))
    assert coarse_masses({1: 0.5, 2: 0.3}, 7) == pytest.approx((0.8, 0.2, 0.2))  # outside the top k: the rest cell
    tests = [TestResult("c/pit_uniform", 1.0, 0.5, n=4, detectable_tv=0.05),
             TestResult("c/pit_uniform/pos1", 1.0, 0.5, n=2, detectable_tv=0.1, details={"position": 1}),
             TestResult("c/pit_support", 0.0, 1.0, n=4, detectable_tv=None)]
    charge_hidden_mass(tests, rest, np.array([0, 1, 0, 1]))
    assert [t.detectable_tv for t in tests[:2]] == pytest.approx([0.05 + 0.175, 0.1 + 0.3])
    assert tests[2].detectable_tv is None


@pytest.mark.stochastic(false_alarm=0.001, seed=3)  # PASS 0.001
def test_scoring_in_small_requests_gives_the_same_test(engine_on, vllm_like, monkeypatch):
    """A wide top k is scored a few rows per request (SCORE_ENTRIES listed values at most), a few requests at a
    time: the same p-values as one request per chunk."""
    from harness.served import draws

    config = EngineConfig(endpoint=engine_on, reference_endpoint=vllm_like, ground_truth="score",
                          settings=(Setting(1.0),), **{**SMALL, "samples": 300, "chunk": 300})
    whole = run_engine_check(config)
    posted = []
    monkeypatch.setattr(draws, "SCORE_ENTRIES", 21 * 8 * 7)  # 7 rows of ~8 positions at k = 20 per request
    real = EngineClient.run_all
    monkeypatch.setattr(EngineClient, "run_all", lambda self, path, jobs, *a, **kw: posted.append(len(jobs)) or real(
        self, path, jobs, *a, **kw))
    split = run_engine_check(config)
    assert [t.p_value for t in split.tests] == [t.p_value for t in whole.tests] and split.verdict == "pass"
    assert len(posted) > 10 and max(posted[1:]) <= 4  # the sampling request, then scoring groups of ≤ concurrency


@pytest.mark.end_to_end
def test_the_scorer_record_keeps_three_numbers_per_token_not_the_reply(engine_on, vllm_like, tmp_path):
    """--out keeps what the test reads (a scorer's top 1000 at every prompt position is ~3 MB of JSON per sequence;
    kept whole in memory it killed a run): a rerun resumes from those numbers to the same p-values."""
    import json

    config = EngineConfig(endpoint=engine_on, reference_endpoint=vllm_like, ground_truth="score",
                          settings=(Setting(1.0),), out=str(tmp_path), **{**SMALL, "samples": 300, "chunk": 300})
    first = run_engine_check(config)
    records = [json.loads(line) for path in tmp_path.glob("engine-*.jsonl") for line in path.read_text().splitlines()]
    scored = [r["response"] for r in records if r["key"].startswith("score-masses/")]
    assert scored and all(set(r) == {"masses"} for r in scored)
    rows = [m for r in scored for m in r["masses"]]
    assert len(rows) == 300 and all(len(triple) == 3 for m in rows for triple in m)  # per token: 3 numbers
    again = run_engine_check(config)
    assert [t.p_value for t in again.tests] == [t.p_value for t in first.tests]
