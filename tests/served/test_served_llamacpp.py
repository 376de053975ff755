"""llama.cpp's server (llama-cpp-python), started and stopped by the harness. Skipped where it is not installed
(CI: the build takes ~20 min on 2 cores; `nox -s engines` builds it once per venv and runs these)."""

from __future__ import annotations

import httpx
import pytest

from harness.served.llamacpp import llamacpp_available, llamacpp_server
from suites.campaigns.llamacpp import FINDING_PROMPT, NO_TRUNCATION, SAMPLING_PROMPT

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow,
              pytest.mark.skipif(not llamacpp_available()[0], reason=llamacpp_available()[1])]


@pytest.fixture(scope="module")
def off():
    with llamacpp_server(speculative=False) as url:
        yield url


def test_server_starts_answers_and_is_stopped():
    with llamacpp_server(speculative=True) as url:
        assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "smollm2"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/v1/models", timeout=2)


def test_probe_reports_no_token_ids_and_text_only_ground_truth(off):
    from harness.served.probe import probe

    info = probe(off)
    assert not info["token_ids"] and info["seed_honoured"] and info["prompt_scoring"] == "echo"
    assert info["ground_truths"]["c (two samples)"].startswith("possible")


def test_seed_is_honoured_at_temperature_one(off):
    body = {"model": "smollm2", "prompt": FINDING_PROMPT, "max_tokens": 6, "temperature": 1.0, "seed": 5,
            **NO_TRUNCATION}
    texts = [httpx.post(f"{off}/v1/completions", json=body, timeout=120).json()["choices"][0]["text"]
             for _ in range(2)]
    assert texts[0] == texts[1]


def _two_sample_against_itself(off, prompt: str, samples: int = 20, length: int = 4):
    from harness.check.settings import Setting
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig

    return run_engine_check(EngineConfig(endpoint=off, reference_endpoint=off, ground_truth="two-sample",
                                         samples=samples, length=length, prompts=1, prompt_texts=(prompt,), chunk=1,
                                         settings=(Setting(1.0),), extra_body=NO_TRUNCATION))


def test_two_sample_check_runs_end_to_end_against_itself(off):
    """On the campaign's sampling prompt (continuations open at T = 1): a PASS with a stated detectable TV."""
    report = _two_sample_against_itself(off, SAMPLING_PROMPT, samples=500, length=1)  # 200: TV 0.32
    assert report.verdict == "pass" and report.samples == 500, (report.verdict, report.detectable_tv, report.notes)
    assert report.detectable_tv <= 0.25


def test_a_prompt_whose_continuations_are_all_one_text_is_inconclusive_never_pass(off):
    """The counting prompt's 4-token continuations at T = 1 are all ' 6, 7,': a vacuous cell, no power."""
    report = _two_sample_against_itself(off, FINDING_PROMPT)
    assert report.verdict == "inconclusive"
    assert any("vacuous" in n for n in report.notes)
