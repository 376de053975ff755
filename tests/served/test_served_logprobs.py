"""Logprobs honesty under speculation (harness.served.logprobs) over HTTP against `specdec serve` on the toy pair.

Planted bugs (harness.mutants.logprobs, served with `specdec serve --logprobs-mutant NAME`): draft logprobs, zeros,
the next position's law, NaN past the first token. The tokens of every mutant are the reference's, so the token
check passes and only the logprobs check fails.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.check.settings import Setting
from harness.errors import HarnessError
from harness.mutants.logprobs import LOGPROBS_MUTANTS
from harness.pairs import get_pair
from harness.served.check import run_engine_check
from harness.served.config import EngineConfig
from harness.served.logprobs import MalformedTrials, Reported, compare, parse_choice
from harness.served.serve import GenerationBackend, LogprobsWriter, Sampling, serving
from specdec_ref.adapters import generate

PAIR = "toy-low"
SETTINGS = (Setting(1.0), Setting(0.7, top_p=0.9))
LOGPROBS = dict(pair=PAIR, checks=("logprobs",), settings=SETTINGS, prompts=2)


@pytest.fixture(scope="module", params=["raw_logprobs", "processed_logprobs"])
def mode(request):
    return request.param


def _check(url: str, **kw):
    return run_engine_check(EngineConfig(endpoint=url + "/v1", **{**LOGPROBS, **kw}))


@pytest.mark.end_to_end
def test_the_reference_server_passes_in_both_modes_with_the_spread_reported(mode):
    with serving(generate, get_pair(PAIR), logprobs_mode=mode) as s:
        report = _check(s.url)
    assert report.verdict == "pass", [t.details for t in report.tests if t.reject]
    cells = [c for c in report.cases if c["name"].startswith("logprobs/")]
    assert len(cells) == 4 and all(c["logprobs_mode"] == mode.split("_")[0] for c in cells)
    assert all(c["compared"] == 16 * 3 and c["max_abs_diff"] < 1e-9 for c in cells)  # float64 on both sides
    assert len(report.tests) == report.declared_tests == 4 * 3  # sampled + top_k + format per cell
    assert any("largest |Δ| measured" in n for n in report.notes)


@pytest.mark.parametrize("mutant", sorted(set(LOGPROBS_MUTANTS) - {"nonfinite"}))
@pytest.mark.stochastic(false_alarm=0.001, seed=3)  # the token check's PASS 0.001; the logprobs check is exact
def test_each_planted_logprob_bug_fails_the_logprobs_check_while_the_token_check_passes(mode, mutant):
    with serving(generate, get_pair(PAIR), logprobs_mode=mode, logprobs_mutant=mutant) as s:
        tokens = run_engine_check(EngineConfig(endpoint=s.url + "/v1", pair=PAIR, samples=1200, prompts=1,
                                               chunk=600, settings=(Setting(0.7, top_p=0.9),), seed=3))
        logprobs = _check(s.url)
    assert tokens.verdict == "pass", [t.name for t in tokens.tests if t.reject]
    assert logprobs.verdict == "fail"
    rejected = {t.name.rsplit("/", 1)[-1] for t in logprobs.tests if t.reject}
    assert "sampled" in rejected
    assert not any(t.reject for t in logprobs.tests if t.name.endswith("/format"))


@pytest.mark.stochastic(false_alarm=0.001, seed=3)  # the token check's PASS 0.001; the logprobs check is exact
def test_a_server_that_cannot_write_its_reply_fails_the_logprobs_check_exit_1_while_the_token_check_passes(capsys):
    """A NaN logprob makes the server's own JSON encoder refuse the reply (specdec serve: HTTP 500, vLLM 0.32: HTTP 400,
    'Out of range float values are not JSON compliant'): the engine broke, so the cell FAILs (exit 1), not retried and
    never reported as a run that could not be done (exit 2)."""
    from harness.cli import main

    with serving(generate, get_pair(PAIR), logprobs_mutant="nonfinite") as s:
        tokens = run_engine_check(EngineConfig(endpoint=s.url + "/v1", pair=PAIR, samples=600, prompts=1,
                                               chunk=600, settings=(Setting(1.0),), seed=3))
        logprobs = _check(s.url, settings=(Setting(1.0),), prompts=1)
        code = main(["verify", "--level", "engine", "--endpoint", s.url + "/v1", "--pair", PAIR, "--engine-checks",
                     "logprobs", "--setting", "T=1", "--prompts", "1", "--contexts", "none"])
    assert tokens.verdict == "pass", [t.name for t in tokens.tests if t.reject]
    assert logprobs.verdict == "fail" and code == 1
    problems = [t.details.get("message", "") for t in logprobs.tests if t.reject]
    assert any("failed to write its reply" in m and "not JSON compliant" in m for m in problems), problems


@pytest.mark.end_to_end
def test_the_speculation_off_server_as_ground_truth_scores_and_catches_draft_logprobs():
    with serving(generate, get_pair(PAIR), speculative=False) as off, \
            serving(generate, get_pair(PAIR)) as good, serving(generate, get_pair(PAIR), logprobs_mutant="draft") as bad:
        kw = dict(checks=("logprobs",), settings=SETTINGS, prompts=1, reference_endpoint=off.url + "/v1",
                  prompt_texts=(" 1 2 3",))
        ok = run_engine_check(EngineConfig(endpoint=good.url + "/v1", **kw))
        broken = run_engine_check(EngineConfig(endpoint=bad.url + "/v1", **kw))
    assert ok.verdict == "pass" and {c.get("truth") for c in ok.cases} == {"score"}
    assert broken.verdict == "fail"


def test_both_checks_in_one_run_only_the_logprob_tests_reject():
    with serving(generate, get_pair(PAIR), logprobs_mutant="zeros") as s:
        report = run_engine_check(EngineConfig(endpoint=s.url + "/v1", pair=PAIR, checks=("tokens", "logprobs"),
                                               samples=1200, chunk=600, prompts=1, settings=(Setting(1.0),), seed=5))
    rejected = [t.name for t in report.tests if t.reject]
    assert report.verdict == "fail" and rejected and all(n.startswith("logprobs/") for n in rejected)


def test_each_planted_logprob_bug_gets_only_its_own_part_wrong():
    """Each zoo entry, asked directly (no HTTP): what it reports against the target's float64 law."""
    import copy

    import numpy as np
    import torch

    pair = get_pair(PAIR)
    seqs, starts, sampling = [[1, 2, 3, 4, 5], [2, 3, 1]], [2, 1], Sampling(1.0)
    correct = GenerationBackend(generate, pair)
    truth = correct.reported_laws(seqs, starts, sampling)
    longer = correct.log_laws([s + [0] for s in seqs], starts, sampling)  # one position more: the shifted law's
    assert type(correct.logprobs_writer) is LogprobsWriter
    assert [law.shape for law in truth] == [(3, pair.vocab_size), (2, pair.vocab_size)]
    got = {name: GenerationBackend(generate, pair, logprobs_mutant=name) for name in LOGPROBS_MUTANTS}
    assert all(isinstance(b.logprobs_writer, LOGPROBS_MUTANTS[n]) for n, b in got.items())
    laws = {name: b.reported_laws(seqs, starts, sampling) for name, b in got.items()}
    assert all(np.all(law == 0.0) and law.shape == t.shape for law, t in zip(laws["zeros"], truth, strict=True))
    assert all(np.allclose(law, t[1:]) for law, t in zip(laws["shifted"], longer, strict=True))
    with torch.inference_mode():
        logits = copy.deepcopy(pair.draft).double()(input_ids=torch.tensor([seqs[0]])).logits[0, :-1, : pair.vocab_size]
    assert np.allclose(laws["draft"][0], torch.log_softmax(logits, -1)[starts[0] - 1 :].numpy())
    assert not np.allclose(laws["draft"][0], truth[0])
    assert all(np.array_equal(law, t) for law, t in zip(laws["nonfinite"], truth, strict=True))  # only written wrong
    entries = {name: b._entries(seqs[0][2:], truth[0], 2, as_ids=True) for name, b in (("correct", correct), *got.items())}
    assert all(np.isfinite(e["logprob"]) for e in entries["correct"])
    assert np.isfinite(entries["nonfinite"][0]["logprob"]) and all(np.isnan(e["logprob"]) for e in entries["nonfinite"][1:])


def test_an_unknown_logprobs_mutant_is_a_clear_error(capsys):
    from harness.cli import main
    from harness.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="'shifted'"):
        GenerationBackend(generate, get_pair(PAIR), logprobs_mutant="shifed")
    assert main(["serve", "--pair", PAIR, "--port", "0", "--logprobs-mutant", "shifed"]) == 2
    assert "unknown logprobs mutant 'shifed'" in capsys.readouterr().err


def test_a_server_without_logprobs_cannot_be_checked_exit_2():
    with serving(generate, get_pair(PAIR), logprobs=False) as s, pytest.raises(HarnessError, match="no logprobs"):
        _check(s.url)


def test_compare_masks_ties_and_malformed_choices():
    law = [[-0.5, -1.0, -1.0 - 1e-6, float("-inf")]]
    # the listed top-2 takes either of a near-tie; the masked token reported as -9999 equals -inf
    row = Reported([0], [3], [-9999.0], [{0: -0.5, 2: -1.0 - 1e-6}])
    import numpy as np

    stats = compare([row], [np.array(law)], k=2, tol=1e-3)
    assert stats["bad_sampled"] == 0 and stats["bad_top"] == 0
    stats = compare([Reported([0], [0], [-0.5], [{1: -1.0, 2: -1.0}])], [np.array(law)], k=2, tol=1e-3)
    assert stats["bad_top"] == 1 and stats["missing_top"] == 1  # token 0 is clearly in the top 2: left out
    with pytest.raises(MalformedTrials):
        parse_choice({"token_ids": [1, 2], "logprobs": {"token_logprobs": [-1.0], "top_logprobs": [{}]}}, [0])


@pytest.mark.end_to_end
def test_cli_bad_engine_checks_is_exit_2():
    out = subprocess.run([sys.executable, "-m", "harness", "verify", "--level", "engine", "--endpoint",
                          "http://127.0.0.1:9/v1", "--engine-checks", "tokens,bogus"], capture_output=True, text=True)
    assert out.returncode == 2 and "--engine-checks" in out.stderr and "Traceback" not in out.stderr
