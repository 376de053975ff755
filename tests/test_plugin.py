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


@pytest.mark.statistical
def test_plugin_fixtures_options_and_header(pytester):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_inprocess("--specdec-seed", "7", "--strict-markers")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["specdec: seed=7*"])


def test_plugin_does_not_import_torch():
    code = "import harness.pytest_plugin, sys; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
