"""`specdec verify --level engine` / `specdec probe` on the command line: verdicts and exit-2 bad input."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.pairs import get_pair
from harness.served.serve import serving
from harness.served.text import IdTokenizer
from specdec_ref.adapters import generate

FAST = ["--samples", "300", "--prompts", "1", "--chunk", "300"]


def verify(*args) -> list[str]:
    return ["verify", "--level", "engine", *FAST, *args]


def one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specdec: error:") and "\n" not in err and "Traceback" not in err
    return err


@pytest.fixture(scope="module")
def toy_server():
    with serving(generate, get_pair("toy")) as s:
        yield s.url + "/v1"


@pytest.mark.stochastic(false_alarm=0.002, seed=0)  # two PASS 0.001
def test_reference_passes_on_the_command_line(toy_server, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(verify("--endpoint", toy_server, "--pair", "toy", "--json", str(out))) == 0
    report = json.loads(out.read_text())["report"]
    assert report["level"] == "engine" and report["verdict"] == "pass"
    contexts = [c for c in report["cases"] if c["name"].endswith("/contexts")]  # the catalogue: the local default
    assert contexts and all(c["samples"] == 300 for c in contexts)
    assert report["samples"] == 300 * len(contexts) + 600  # and the pair's prompt, 300 per sampling setting
    # --contexts none: the prompt cells only (the token check alone: the default run above ran the API battery)
    assert main(verify("--endpoint", toy_server, "--pair", "toy", "--contexts", "none", "--engine-checks", "tokens",
                       "--json", str(out))) == 0
    assert json.loads(out.read_text())["report"]["samples"] == 600


def test_unreachable_endpoint(capsys):
    err = one_line_error(capsys, verify("--endpoint", "http://127.0.0.1:9/v1", "--pair", "toy", "--retries", "0"))
    assert "is the server running" in err


def test_wrong_model_name(toy_server, capsys):
    err = one_line_error(capsys, verify("--endpoint", toy_server, "--model", "llama", "--pair", "toy"))
    assert "fix --model" in err and "toy" in err


def test_no_ground_truth(toy_server, capsys):
    assert "no ground truth" in one_line_error(capsys, verify("--endpoint", toy_server))


def test_server_without_token_ids(capsys):
    with serving(generate, get_pair("toy"), token_ids=False) as s:
        err = one_line_error(capsys, verify("--endpoint", s.url, "--pair", "toy"))
    assert "no token ids" in err and "two-sample" in err


@pytest.mark.end_to_end
def test_scorer_without_logprobs(toy_server, capsys):
    with serving(generate, get_pair("toy"), speculative=False, logprobs=False) as ref:
        err = one_line_error(capsys, verify("--endpoint", toy_server, "--pair", "toy", "--ground-truth", "score",
                                            "--reference-endpoint", ref.url))
    assert "two-sample" in err


def test_scorer_with_raw_logprobs_cannot_score_temperature(toy_server, capsys):
    with serving(generate, get_pair("toy"), speculative=False, logprobs_mode="raw_logprobs") as ref:
        err = one_line_error(capsys, verify("--endpoint", toy_server, "--pair", "toy", "--ground-truth", "score",
                                            "--reference-endpoint", ref.url))
    assert "prompt scores are raw" in err and "two-sample" in err


def test_tokenizer_differs_between_server_and_local_model(capsys):
    with serving(generate, get_pair("toy"), tokenizer=IdTokenizer(16, offset=1)) as s:
        err = one_line_error(capsys, verify("--endpoint", s.url, "--pair", "toy"))
    assert "tokenizes differently" in err


@pytest.mark.end_to_end
def test_probe_table_and_json(toy_server, capsys):
    assert main(["probe", "--endpoint", toy_server, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)  # a result envelope of kind "probe"
    assert result["kind"] == "probe" and result["provenance"]["seed"] is None and result["config"]["endpoint"]
    info = result["report"]
    # V = 16: asked for 20, the server lists the whole vocabulary
    assert info["token_ids"] and info["top_logprobs_k"] == 16 and info["prompt_scoring"] == "prompt_logprobs"
    assert info["logprobs_mode"] == "raw" and info["seed_honoured"] and info["speculative"] is True
    assert info["scoring_gap"] < 1e-6  # prompt scores = the logprobs reported while sampling
    assert main(["probe", "--endpoint", toy_server]) == 0
    table = capsys.readouterr().out
    assert "ground truths" in table and "T = 1 only" in table


@pytest.mark.stochastic(false_alarm=0.01, seed=0)  # FAIL 0.01
def test_a_lossy_engine_exits_1_with_one_fail_line(capsys):
    """Exit 1 means "not lossless" at the engine level too, with the same one-line summary on stderr."""
    from harness.mutants.registry import get

    with serving(get("greedy_verify_when_sampling").fn, get_pair("toy")) as s:
        assert main(verify("--endpoint", s.url + "/v1", "--pair", "toy")) == 1
    out, err = capsys.readouterr()
    assert "verdict: FAIL" in out
    lines = [line for line in err.splitlines() if line.startswith("specdec")]
    assert len(lines) == 1 and lines[0].startswith("specdec: FAIL:") and "Traceback" not in err


def test_contexts_without_a_local_target_exit_2_before_any_request(capsys):
    err = one_line_error(capsys, verify("--endpoint", "http://127.0.0.1:9/v1", "--contexts", "catalogue"))
    assert "contexts catalogue needs the target" in err


def test_llama_cpp_python_api_without_a_local_tokenizer_exits_2_before_any_request(capsys):
    err = one_line_error(capsys, verify("--endpoint", "http://127.0.0.1:9/v1", "--api", "llama-cpp-python"))
    assert "--api llama-cpp-python recovers token ids" in err and "--pair" in err


def test_llama_cpp_python_api_on_a_pair_without_a_text_tokenizer_exits_2_in_one_line(toy_server, capsys):
    """The toy pairs write ids as numbers: there are no pieces to read, so the run cannot be done (not a FAIL)."""
    err = one_line_error(capsys, verify("--endpoint", toy_server, "--pair", "toy", "--api", "llama-cpp-python"))
    assert "needs the model's own tokenizer" in err


def contract_generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """A generate() with exactly the CONTRACT §1b signature (no min_new_tokens, no **kwargs), as a user writes one."""
    return generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature,
                    top_k=top_k, top_p=top_p, seed=seed)


@pytest.mark.stochastic(false_alarm=0.001, seed=0)  # PASS 0.001
def test_the_readme_engine_command_ends_with_a_verdict_against_a_contract_generate(tmp_path, capsys):
    """The README's engine command against `specdec serve --impl mygen:generate` (issue 55): the server refuses
    min_tokens (the implementation takes no min_new_tokens), so the API check skips min_tokens and lists it with
    why, in the report and the JSON; the run PASSES (it exited 2 before)."""
    out = tmp_path / "report.json"
    with serving(contract_generate, get_pair("toy")) as s:
        code = main(verify("--endpoint", s.url + "/v1", "--pair", "toy", "--contexts", "none", "--api-seeds", "2",
                           "--api-length", "16", "--api-unseeded", "3", "--json", str(out)))
    printed = capsys.readouterr().out
    assert code == 0, printed
    report = json.loads(out.read_text())["report"]
    api = [c for c in report["cases"] if c["name"].startswith("api/")]
    assert report["verdict"] == "pass" and api
    for case in api:
        assert set(case["skipped_tests"]) == {"min_tokens"} and "min_new_tokens" in case["skipped_tests"]["min_tokens"]
    names = {t["name"].rsplit("/", 1)[-1] for t in report["tests"] if t["name"].startswith("api/")}
    assert "min_tokens" not in names and {"stop_strings", "n_independent", "seed_reproducible"} <= names
    assert "tests skipped" in printed and "does not take min_new_tokens" in printed
