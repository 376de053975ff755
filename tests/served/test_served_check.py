"""End to end over HTTP against `specdec serve` (small samples: CI-fast). Calibration: suites.campaigns.engine."""

from __future__ import annotations

import math

import pytest
import torch

from harness.check.settings import Setting
from harness.mutants.registry import get
from harness.pairs import get_pair
from harness.served.check import run_engine_check
from harness.served.config import EngineConfig
from harness.served.serve import serving
from harness.served.truths import count_tests_for_cell, vacuous
from specdec_ref.adapters import generate

SMALL = dict(samples=1200, prompts=1, chunk=600, settings=(Setting(0.0), Setting(0.7, top_p=0.9)), seed=3)
MUTANT = get("target_ignores_sampling_params").fn


@pytest.fixture(scope="module")
def reference_off():
    with serving(generate, get_pair("toy-low"), speculative=False, logprobs_mode="processed_logprobs",
                 prompt_logprobs_mode="processed_logprobs") as s:  # a scorer of the processed law (not vLLM's)
        yield s.url + "/v1"


@pytest.fixture(scope="module")
def reference_on():
    with serving(generate, get_pair("toy-low")) as s:
        yield s.url + "/v1"


@pytest.fixture(scope="module")
def mutant_on():
    with serving(MUTANT, get_pair("toy-low")) as s:
        yield s.url + "/v1"


@pytest.mark.parametrize("ground_truth", ["local", "score", "two-sample"])
@pytest.mark.stochastic(false_alarm=0.011, seed=3)  # PASS 0.001 + FAIL 0.01
def test_reference_passes_and_mutant_fails_with_every_ground_truth(reference_on, mutant_on, reference_off,
                                                                   ground_truth):
    kw = dict(pair="toy-low", ground_truth=ground_truth, **SMALL)
    if ground_truth == "two-sample":  # half the effective sample size: twice the samples for a TV below the ceiling
        kw["samples"] = 2 * SMALL["samples"]
    if ground_truth != "local":
        kw["reference_endpoint"] = reference_off
    good = run_engine_check(EngineConfig(endpoint=reference_on, **kw))
    bad = run_engine_check(EngineConfig(endpoint=mutant_on, **kw))
    assert good.verdict == "pass", [t.name for t in good.tests if t.reject]
    assert bad.verdict == "fail"
    assert any(t.reject and "T=0.7" in t.name for t in bad.tests)
    enumerate_law = ground_truth == "local"
    # one cell + the greedy cell (its prompt and its format test), all declared to the driver
    assert len(good.tests) == count_tests_for_cell(ground_truth, 3, enumerate_law) + 2 == good.declared_tests
    assert 0 < good.detectable_tv < 0.3


@pytest.mark.stochastic(false_alarm=0.001, seed=3)  # PASS 0.001
def test_the_engine_level_is_a_source_of_the_one_driver(reference_on, monkeypatch):
    """`run_verify` takes an EngineConfig through its source table (as every level): the same verdict and
    p-values as `run_engine_check`, and the driver is run_battery."""
    from harness.check import api, driver

    calls = []
    real = driver.run_battery
    monkeypatch.setattr(driver, "run_battery", lambda *a, **k: calls.append(type(a[0]).__name__) or real(*a, **k))
    config = EngineConfig(endpoint=reference_on, pair="toy-low", **SMALL)
    direct, via_table = run_engine_check(config), api.run_verify(config)
    assert calls == ["EngineSource", "EngineSource"]
    assert api.contract_of(config) == "engine" and via_table.level == "engine"
    assert [t.p_value for t in direct.tests] == [t.p_value for t in via_table.tests]
    assert direct.verdict == via_table.verdict == "pass"


@pytest.mark.end_to_end
def test_greedy_divergence_is_found_and_classified_with_a_local_model():
    tie = get("greedy_tie_last_index")
    with serving(tie.fn, get_pair(tie.pair)) as s:
        report = run_engine_check(EngineConfig(endpoint=s.url, pair=tie.pair, settings=(Setting(0.0),), prompts=4))
    assert report.verdict == "fail"
    divergences = report.cases[0]["divergences"]
    assert divergences and all(d["kind"] == "tie-break (exact tie)" for d in divergences)


@pytest.mark.end_to_end
def test_a_rerun_with_the_same_config_resumes_from_out(reference_on, tmp_path):
    config = dict(endpoint=reference_on, pair="toy-low", out=str(tmp_path), **SMALL)
    first = run_engine_check(EngineConfig(**config))
    second = run_engine_check(EngineConfig(**config))
    assert any("resumed" in n for n in second.notes) and not any("resumed" in n for n in first.notes)
    assert [t.p_value for t in first.tests] == [t.p_value for t in second.tests]


@pytest.mark.end_to_end
def test_a_server_label_resumes_against_a_server_restarted_on_another_port(tmp_path):
    """Without a label the kept responses are keyed by the endpoint (a free port changes on restart); with
    --server-label they are keyed by the label, so the rerun against the new port resumes every request."""
    runs, urls = {}, []
    for attempt in ("first", "restarted"):
        with serving(generate, get_pair("toy-low")) as s:
            urls.append(s.url)
            for label in (None, "toy-low-reference"):
                runs[attempt, label] = run_engine_check(EngineConfig(endpoint=s.url, pair="toy-low", out=str(tmp_path),
                                                                     server_label=label, **SMALL))
    resumed = {key: any("resumed" in n for n in r.notes) for key, r in runs.items()}
    assert resumed == {("first", None): False, ("first", "toy-low-reference"): False,
                       ("restarted", None): urls[0] == urls[1], ("restarted", "toy-low-reference"): True}
    assert ([t.p_value for t in runs["first", "toy-low-reference"].tests]
            == [t.p_value for t in runs["restarted", "toy-low-reference"].tests])


def test_two_sample_works_on_text_when_the_server_returns_no_ids():
    with serving(generate, get_pair("toy-low"), token_ids=False) as a, \
            serving(generate, get_pair("toy-low"), token_ids=False, speculative=False) as b:
        report = run_engine_check(EngineConfig(endpoint=a.url, reference_endpoint=b.url, ground_truth="two-sample",
                                               prompt_texts=("1 2 3",), samples=300, prompts=1, length=3,
                                               settings=(Setting(1.0),)))
    # 300 samples against 300 cannot promise a TV below the ceiling: not failed, and honestly not a PASS
    assert report.verdict == "inconclusive" and report.samples == 300 and not any(t.reject for t in report.tests)


@pytest.mark.stochastic(false_alarm=0.011, seed=4)  # PASS 0.001 + FAIL 0.01
def test_sampling_parameters_reach_the_server_and_a_parameter_bug_is_caught_over_http():
    """Sampling parameters over HTTP: min_p and logit_bias are sent (OpenAI / vLLM request names), the served reference
    honours them and passes; a server whose draft alone sees the logit bias fails."""
    setting = Setting(0.8, min_p=0.05, logit_bias=((5, 1.5),))
    kw = dict(pair="toy-low", ground_truth="local", samples=1200, prompts=1, chunk=600, settings=(setting,), seed=4)
    with serving(generate, get_pair("toy-low")) as good, serving(get("logit_bias_draft_only").fn, get_pair("toy-low")) as bad:
        ok = run_engine_check(EngineConfig(endpoint=good.url + "/v1", **kw))
        broken = run_engine_check(EngineConfig(endpoint=bad.url + "/v1", **kw))
    assert ok.verdict == "pass", [t.name for t in ok.tests if t.reject]
    assert broken.verdict == "fail"
    assert "min_p=0.05" in ok.cases[0]["name"]


def _constant(target, draft, input_ids, *, max_new_tokens, **_):
    """A generate() whose every continuation is the same: nothing a sampler could get wrong shows."""
    return torch.full((input_ids.shape[0], max_new_tokens), 3, dtype=torch.long)


def test_a_cell_whose_continuations_are_all_identical_is_inconclusive_never_pass():
    """Two endpoints agreeing on one constant continuation: the homogeneity tests pass with a tiny detectable
    TV, but the cell tested nothing; the run must say INCONCLUSIVE (and name the cell)."""
    pair = get_pair("toy")
    with serving(_constant, pair) as a, serving(_constant, pair) as b:
        report = run_engine_check(EngineConfig(endpoint=a.url, reference_endpoint=b.url, ground_truth="two-sample",
                                               samples=400, prompts=1, chunk=400, settings=(Setting(1.0),)))
    assert not any(t.reject for t in report.tests)
    assert report.verdict == "inconclusive" and report.detectable_tv == math.inf
    assert report.cases[-1].get("vacuous") and any("vacuous cells" in n for n in report.notes)


def test_vacuous_means_every_continuation_equal_on_each_side():
    assert vacuous([[1, 2], [1, 2]]) and vacuous([[1, 2]], [[3], [3]])
    assert not vacuous([[1, 2], [1, 3]]) and not vacuous([[1, 2], [1, 2]], [[1, 2], [2, 2]])


@pytest.mark.end_to_end
def test_an_engine_that_dies_mid_run_is_a_finding_never_a_pass():
    """The server is killed after two answered requests: the cell in flight and every later one fail their
    format test with the reason, the verdict is FAIL and the notes carry the finding."""
    setting = (Setting(0.0), Setting(1.0), Setting(0.7, top_p=0.9))
    with serving(generate, get_pair("toy-low")) as served:
        answered = []

        def kill_after_two(_):
            answered.append(1)
            if len(answered) == 2:
                served.stop()

        report = run_engine_check(EngineConfig(endpoint=served.url, pair="toy-low", samples=600, prompts=1, chunk=150,
                                               concurrency=1, retries=1, timeout_s=5, settings=setting),
                                  progress=kill_after_two)
    assert report.verdict == "fail"
    assert report.cases[0]["name"] == "greedy" and not report.cases[0]["format_problems"]  # before the crash
    finding = [n for n in report.notes if n.startswith("FINDING: the engine stopped answering mid-run")]
    assert finding
    # the cell in flight when it died, and every later one that ran, fail their format test (the server may
    # still answer a request or two on an open connection while it shuts down: which cell that is can vary)
    names = [c["name"] for c in report.cases]
    died = next(i for i, name in enumerate(names) if f"(during {name})" in finding[0])
    assert died >= 1 and all(any(t.name == f"{name}/format" and t.reject for t in report.tests) for name in names[died:])


def test_the_time_budget_stops_before_the_next_cell_and_says_which_cells_did_not_run(reference_on):
    report = run_engine_check(EngineConfig(endpoint=reference_on, pair="toy-low", samples=200, prompts=1, chunk=200,
                                           settings=(Setting(0.0), Setting(1.0)), time_budget_s=1e-6))
    assert [c["name"] for c in report.cases] == ["greedy"]
    assert any(n.startswith("time budget reached: cells not run: T=1/prompt0") for n in report.notes)


@pytest.mark.stochastic(false_alarm=0.001, seed="none: unseeded requests, the engine's own draws")  # PASS 0.001
def test_unseeded_requests_carry_no_seed_and_the_reference_still_passes(reference_on, monkeypatch):
    """`seeded=False` (`--unseeded`): no sampling request has a seed field; the draws are the engine's own."""
    import harness.served.draws as draws
    from harness.served.requests import sampling_request

    assert "seed" not in sampling_request("m", [1], 2, 3, Setting(1.0), None) and sampling_request("m", [1], 2, 3, Setting(1.0), 5)["seed"] == 5
    sent = []
    monkeypatch.setattr(draws, "sampling_request", lambda *a, **k: sent.append(sampling_request(*a, **k)) or sent[-1])
    report = run_engine_check(EngineConfig(endpoint=reference_on, pair="toy-low", ground_truth="local", seeded=False,
                                           **SMALL))
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]
    assert sent and not any("seed" in body for body in sent)


@pytest.mark.stochastic(false_alarm=0.001, seed=3)  # PASS 0.001
def test_the_engine_level_honours_inconclusive_tv_from_the_command_line(reference_on, tmp_path):
    """`specdec verify --level engine --inconclusive-tv EPS`: a run that rejects nothing but whose detectable TV is
    above EPS is INCONCLUSIVE (exit 3), and the report carries EPS; the same run with the default bar passes."""
    import json

    from harness.cli import main

    common = ["verify", "--level", "engine", "--endpoint", reference_on, "--pair", "toy-low", "--ground-truth",
              "local", "--samples", "400", "--prompts", "1", "--chunk", "400", "--setting", "T=1", "--seed", "3",
              "--contexts", "none", "--engine-checks", "tokens"]  # the headline: the prompt's joint law (detectable
    # TV ≈ 0.2 at 400 rows); the token check alone: the API battery has no part in the bar
    assert main([*common, "--json", str(tmp_path / "a.json")]) == 0
    first = json.loads((tmp_path / "a.json").read_text())["report"]
    assert first["verdict"] == "pass" and first["inconclusive_tv"] == 0.25 and first["detectable_tv"] > 0.02
    assert main([*common, "--inconclusive-tv", "0.02", "--json", str(tmp_path / "b.json")]) == 3
    second = json.loads((tmp_path / "b.json").read_text())["report"]
    assert second["verdict"] == "inconclusive" and second["inconclusive_tv"] == 0.02
    assert second["detectable_tv"] == first["detectable_tv"]


@pytest.mark.parametrize("bar", ["0", "-1", "1.5"])
def test_an_inconclusive_tv_outside_0_1_is_a_usage_error_before_any_request(bar, capsys):
    """Exit 2 with one line naming the flag, before the (here unreachable) endpoint is contacted."""
    from harness.cli import main

    code = main(["verify", "--level", "engine", "--endpoint", "http://127.0.0.1:9/v1", "--pair", "toy-low",
                 "--inconclusive-tv", bar])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--inconclusive-tv must be in (0, 1)" in err[0]
