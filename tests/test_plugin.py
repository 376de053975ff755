"""The pytest plugin as a user sees it: fixtures, options, header, a failing mutant."""

import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

USER_TESTS = '''
import torch
import pytest
from specdec_ref.adapters import verify


def always_accept(target_probs, draft_probs, draft_tokens, generator):
    """A planted bug: accept every draft, then a bonus token from p."""
    B, gamma = draft_tokens.shape
    bonus = torch.multinomial(target_probs[:, -1].float(), 1, generator=generator)
    return torch.cat([draft_tokens, bonus], dim=1)


@pytest.mark.specdec
def test_reference(assert_lossless):
    report = assert_lossless(verify, cases=["binary-gamma8", "anti-logits"])
    assert report.verdict == "pass"


@pytest.mark.specdec
def test_block_and_tree_fixtures(assert_lossless_block, assert_lossless_tree):
    from specdec_ref.adapters import block_verify, tree_verify_topk

    assert assert_lossless_block(block_verify, cases=["anti-logits"]).family == "block"
    assert assert_lossless_tree(tree_verify_topk, cases=["wr-b3-d2"]).verdict == "pass"


@pytest.mark.specdec
def test_mutant(assert_lossless):
    with pytest.raises(AssertionError, match="is not lossless"):
        assert_lossless(always_accept, cases=["anti-logits"])
'''


@pytest.mark.stochastic(false_alarm=0.003, seed=7)  # three PASS 0.001
def test_plugin_fixtures_options_and_header(pytester):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_inprocess("--specdec-seed", "7", "--strict-markers")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["specdec: seed=7*"])


def test_plugin_does_not_import_torch():
    code = "import harness.pytest_plugin, sys; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


RAISING_TESTS = """
def my_verify(target_probs, draft_probs, draft_tokens, generator):
    raise RuntimeError("user bug in verify")


def my_tree_verify(target_probs, draft_probs, draft_tokens, parents, generator):
    raise RuntimeError("user bug in tree_verify")


def my_generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    raise RuntimeError("user bug in generate")


def test_chain(assert_lossless):
    assert_lossless(my_verify, cases=["anti-logits"])


def test_tree(assert_lossless_tree):
    assert_lossless_tree(my_tree_verify, cases=["wr-b3-d2"])


def test_generation(assert_lossless_generation):
    assert_lossless_generation(my_generate, pair="toy")
"""


def test_fixtures_raise_assertion_error_naming_the_users_file_and_line(pytester):
    """Issue 55: a raising implementation made the fixtures throw an internal exception, not AssertionError.
    Run as a user runs it: `pytest` in a folder of their own, with the plugin its entry point registers."""
    pytester.makepyfile(test_user=RAISING_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    assert "ImplementationError" not in out and "HarnessError" not in out, out
    for what, line in (("verify", 2), ("tree_verify", 6), ("generate", 10)):  # pytester drops the first newline
        result.stdout.fnmatch_lines([f"E * AssertionError: * is not lossless (* level): the implementation raised "
                                     f"RuntimeError during *: user bug in {what} (at test_user.py:{line} in my_{what})"])
    # the header states the plan's detectable TV, never "None" (issue 55)
    result.stdout.fnmatch_lines(["specdec: seed=0, false-alarm rate=0.001, power=0.99, detectable TV planned: "
                                 "0.02 per tested position (0.05 per tested node of a tree)*"])
    assert "TV=None" not in out


def test_the_header_states_an_explicit_tv(pytester):
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("--specdec-tv", "0.03")
    result.stdout.fnmatch_lines(["specdec: *detectable TV planned: 0.03 per tested position or node*"])
