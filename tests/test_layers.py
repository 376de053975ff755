"""The layer markers of tests/layers.py on planted tests (pytester): a failing stochastic test's report names its seed
and false-alarm rate, a passing one prints nothing more, and a marker that breaks the rules stops collection."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

PLANTED = '''
import pytest
from hypothesis import given, settings, strategies as st


@pytest.mark.stochastic(false_alarm=0.011, seed=4)
def test_red_by_chance():
    assert 1 + 1 == 3


@pytest.mark.stochastic(false_alarm=0.0037, seed=55)
def test_green():
    pass


@pytest.mark.parametrize("seed", [7])
@pytest.mark.stochastic(false_alarm=0.002)
def test_red_at_a_parameter_seed(seed):
    assert seed == 8


@settings(max_examples=2, derandomize=True, database=None)
@given(seed=st.integers(0, 10))
@pytest.mark.stochastic(false_alarm=0.006)
def test_red_under_hypothesis(seed):
    assert seed < 0


@pytest.mark.end_to_end
def test_red_defect():
    assert False
'''


def _run(pytester, source):
    pytester.makepyfile(test_planted=source)
    # (tests.layers is imported already, by tests/conftest.py: too late for pytest to rewrite its asserts, which it
    # would warn about)
    return pytester.runpytest_inprocess("-p", "tests.layers", "-p", "no:cacheprovider", "--strict-markers",
                                        "-W", "ignore::pytest.PytestAssertRewriteWarning")


def test_a_failing_stochastic_test_prints_its_seed_and_false_alarm_rate_and_a_passing_one_nothing(pytester):
    result = _run(pytester, PLANTED)
    result.assert_outcomes(passed=1, failed=4)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "*_ test_red_by_chance _*",
        "*stochastic test: seed and false-alarm rate*",
        "seed 4, false-alarm rate 0.011: a rerun with another seed says whether this was chance",
    ])
    assert "seed 7, false-alarm rate 0.002: a rerun with another seed says whether this was chance" in out
    assert ("seed drawn by Hypothesis (the falsifying example above names it), false-alarm rate 0.006: a rerun with "
            "another seed says whether this was chance") in out
    assert out.count("a rerun with another seed") == 3  # not for the passing test, nor for the end_to_end failure
    assert "seed 55" not in out and "0.0037" not in out
    defect = out.split("_ test_red_defect _")[1]
    assert "false-alarm rate" not in defect


@pytest.mark.parametrize("marks, why", [
    ("@pytest.mark.stochastic", "needs false_alarm=A with 0 < A < 1"),
    ("@pytest.mark.stochastic(false_alarm=1.5, seed=0)", "needs false_alarm=A with 0 < A < 1"),
    ("@pytest.mark.stochastic(false_alarm=0.01)", "needs seed=S"),
    ("@pytest.mark.stochastic(0.01, seed=0)", "keywords false_alarm= and seed= only"),
    ("@pytest.mark.stochastic(false_alarm=0.01, seed=0)\n@pytest.mark.end_to_end", "one layer marker at most"),
    ("@pytest.mark.lint\n@pytest.mark.end_to_end", "carries end_to_end and lint"),
])
def test_a_marker_that_breaks_the_rules_stops_collection_naming_the_test(pytester, marks, why):
    result = _run(pytester, f"import pytest\n\n\n{marks}\ndef test_planted():\n    pass\n")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "test_planted.py::test_planted: " in result.stderr.str() and why in result.stderr.str()
