"""The check driver: declared test counts, rows that differ, reach-following plans, INCONCLUSIVE,
the failure summary, and the CheckConfig-built CLI (harness/check/driver.py, harness/check/config.py)."""

import numpy as np
import pytest

from harness.check.api import run_verify
from harness.check.config import CheckConfig
from harness.check.driver import Cell, Check, TrialSource, run_battery
from harness.check.generation import GenerationSource
from harness.check.sampler import SamplerSource, custom_case, run_sampler_check
from harness.cli import main
from harness.errors import HarnessError, UnknownNameError
from harness.mutants.sampler import always_accept, bonus_wrong_position, row_slip_target, scaled_acceptance
from harness.pairs import get_pair
from specdec_ref.adapters import generate, verify
from suites.catalogues.sampler import CASES

FAST = ["rows-differ", "rows-differ-low-alpha"]


@pytest.mark.end_to_end
def test_sampler_battery_emits_what_it_declares():
    """Every check of every default cell emits exactly the gating tests it declared (the Holm plan is right)."""
    report = run_sampler_check(verify, samples=60, seed=3, inconclusive_tv=0.99)
    assert report.declared_tests == len(report.tests)
    cells = SamplerSource(verify).cells(CheckConfig(impl=verify))
    assert report.declared_tests == sum(c.declared_tests() + 1 for c in cells)
    assert {c.name for c in cells} == {c.name for c in CASES}


def test_generation_battery_emits_what_it_declares():
    pair = get_pair("toy")
    report = run_battery(GenerationSource(generate, pair),
                         CheckConfig(impl="x", level="generation", samples=300), impl_name="ref")
    assert report.declared_tests == len(report.tests) > 10


def test_driver_refuses_a_check_that_emits_other_than_declared():
    class One(TrialSource):
        level = "sampler"

        def cells(self, config):
            lying = Check("lying", lambda cell: 2, lambda cell, t, lv, pw: [])
            return [Cell("c", [lying], None, 0.1)]

        def draw(self, cell, n, progress):
            return np.zeros(n)

    with pytest.raises(AssertionError, match="declared 2 gating tests but emitted 0"):
        run_battery(One(), CheckConfig(impl="x", samples=5), impl_name="x")


@pytest.mark.stochastic(false_alarm=0.012, seed=1)  # two PASS 0.001 (one where the slip is lossless) + FAIL 0.01
def test_rows_that_differ_catch_a_batch_index_slip():
    """Planted bug: row b reads row b+1's target law. Invisible on cases whose rows share laws; failed on the
    rows-differ cases, where the per-row-law tests see it."""
    same = run_sampler_check(row_slip_target, cases=["anti-logits", "gamma8-v100"], seed=1)
    assert same.verdict == "pass"
    mixed = run_sampler_check(row_slip_target, cases=FAST, seed=1, stop_on_fail=True)
    assert mixed.verdict == "fail"
    assert any("/law" in t.name and t.reject for t in mixed.tests)
    assert run_sampler_check(verify, cases=FAST, seed=1).verdict == "pass"


@pytest.mark.stochastic(false_alarm=0.001, seed=2)  # PASS 0.001
def test_wasteful_rule_keeps_sampling_deep_positions():
    """λ-scaled acceptance reaches deep positions less often than the optimal rule: those positions keep
    sampling until they have the rows the plan asked for, instead of being tested on too few."""
    report = run_sampler_check(scaled_acceptance, cases=["gamma8-v100"], seed=2)
    assert report.verdict == "pass"
    deep = [t for t in report.tests if t.name.endswith("pooled_pearson") and "rarely_reached" not in t.details]
    planned = report.cases[0]["planned"]
    assert report.cases[0]["samples"] > planned  # it drew more than the optimal-rule plan
    assert max(t.detectable_tv for t in deep) <= 0.021


def test_tiny_plan_is_inconclusive_not_pass(capsys):
    report = run_sampler_check(verify, cases=["anti-logits"], samples=20)
    assert report.verdict == "inconclusive"
    code = main(["verify", "--impl", "specdec_ref.adapters:verify", "--cases", "anti-logits", "--samples", "20"])
    assert code == 3
    assert "INCONCLUSIVE" in capsys.readouterr().out
    assert main(["verify", "--impl", "specdec_ref.adapters:verify", "--cases", "anti-logits", "--samples", "20",
                 "--allow-inconclusive"]) == 0


def test_failure_summary_localizes_a_bonus_token_bug():
    case = custom_case("high-alpha", np.array([[0.5, 0.3, 0.2], [0.4, 0.4, 0.2], [0.1, 0.1, 0.8]]),
                       np.array([[0.5, 0.3, 0.2], [0.4, 0.4, 0.2]]))
    report = run_sampler_check(bonus_wrong_position, cases=[case], samples=20_000, seed=0)
    assert report.verdict == "fail"
    summary = report.failure_summary()
    assert any("position 2 = γ (the bonus token)" in line for line in summary), summary


def test_failure_summary_names_acceptance_above_the_optimum():
    report = run_sampler_check(always_accept, cases=["anti-logits"], seed=0)
    assert any("acceptance above" in line for line in report.failure_summary())


def test_false_alarm_rate_flag_and_no_alpha(capsys):
    args = ["verify", "--impl", "specdec_ref.adapters:verify", "--cases", "rows-differ"]
    assert main([*args, "--false-alarm-rate", "0.01"]) == 0
    assert "family-wise false-alarm rate 0.01" in capsys.readouterr().out
    assert main([*args, "--alpha", "0.01"]) == 2  # the old name of --false-alarm-rate is gone (CHANGELOG)
    assert "--alpha" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--gamma", "0"], "--gamma must be >= 1"),
    (["--samples", "0"], "--samples must be >= 1"),
    (["--samples", "-3"], "--samples must be >= 1"),
    (["--false-alarm-rate", "1.5"], "false-alarm rate must be in (0, 1)"),
    (["--tv", "0"], "--tv must be in (0, 1)"),
    (["--inconclusive-tv", "1.5"], "--inconclusive-tv must be in (0, 1)"),
    (["--max-rows", "0"], "--max-rows must be >= 1"),
    (["--family", "tree", "--step", "draft_and_verify"], "--family tree takes --step verify"),
    (["--step", "draft"], "invalid choice: 'draft'"),
])
def test_bad_settings_exit_2_with_one_line(argv, message, capsys):
    assert main(["verify", "--impl", "specdec_ref.adapters:verify", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_unknown_family_exit_2(capsys):
    assert main(["verify", "--impl", "specdec_ref.adapters:verify", "--family", "forest"]) == 2
    err = capsys.readouterr().err.strip()
    assert "invalid choice: 'forest'" in err and len(err.splitlines()) == 1


def test_config_validate_names_the_family():
    with pytest.raises(UnknownNameError, match="unknown verifier family"):
        CheckConfig(impl="x", family="forest").validate()


def test_run_verify_validates_before_any_work():
    with pytest.raises(HarnessError, match="give the implementation under test"):
        run_verify(CheckConfig())


def test_config_processing_orders_match_the_reference():
    """config.py spells the conventions out to stay torch-free; they must be the reference's."""
    from harness.check.config import PROCESSING_ORDERS
    from specdec_ref.processing import ORDERS

    assert PROCESSING_ORDERS == ORDERS
