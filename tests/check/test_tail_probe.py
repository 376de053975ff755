"""Deep-tail probe (issue 46): the test, its opt-in case, the RNG-resolution mutants, and --estimate."""

import json

import numpy as np
import pytest

from harness.check.sampler import (
    case_names,
    deep_tail,
    plan_cases,
    run_sampler_check,
    select_cases,
    tail_positions,
)
from harness.check.sampler_tail import _tail_tests
from harness.mutants.registry import get

TAIL = "tail-v131072"


def test_the_tail_case_is_opt_in_and_selectable_by_name():
    assert TAIL not in case_names()
    assert [c.name for c in select_cases(None)] == case_names()
    assert [c.name for c in select_cases([TAIL])] == [TAIL]
    assert [c.name for c in select_cases(["default", TAIL])] == [*case_names(), TAIL]
    assert [c.name for c in select_cases([TAIL, "default"])] == [TAIL, *case_names()]


def test_no_default_case_has_a_deep_tail_so_the_default_plan_is_unchanged():
    for case in select_cases(None):
        if case.laws == 1:
            assert tail_positions(plan_cases([case], 0)[0]) == [], case.name


def test_the_tail_case_puts_its_tail_below_2_to_the_minus_24_of_the_head_at_both_positions():
    plan = plan_cases(select_cases([TAIL]), 0)[0]
    assert tail_positions(plan) == [0, 1]
    for j in (0, 1):
        mask = deep_tail(plan.p[j])
        assert mask.sum() > 100_000 and plan.p[j][mask].max() < 2.0 ** -25
    residual = np.clip(plan.p[0] - plan.q[0], 0, None)
    residual /= residual.sum()
    mask = deep_tail(plan.p[0])
    assert residual[mask].max() / residual.max() < 2.0 ** -24  # the residual draw has a deep tail too


def test_the_deep_tail_test_rejects_a_missing_tail_and_passes_the_expected_count():
    plan = plan_cases(select_cases([TAIL]), 0)[0]
    head0, head1 = int(plan.p[0].argmax()), int(plan.p[1].argmax())
    tail0, tail1 = np.flatnonzero(deep_tail(plan.p[0]))[:50], np.flatnonzero(deep_tail(plan.p[1]))[:50]
    rows = 20000
    tokens = np.full((rows, 2), -1)
    tokens[:, 0] = head0
    tokens[: rows // 2, 1] = head1  # half the rows reach the bonus position
    missing = _tail_tests(tokens, plan, 1e-4, 0.95, "t")
    assert [t.p_value < 1e-8 for t in missing] == [True, True]
    expected = tokens.copy()
    expected[: round(rows * plan.p[0][deep_tail(plan.p[0])].sum()), 0] = tail0[0]
    expected[: round(rows / 2 * plan.p[1][deep_tail(plan.p[1])].sum()), 1] = tail1[0]
    assert all(t.p_value > 0.5 for t in _tail_tests(expected, plan, 1e-4, 0.95, "t"))


def test_estimate_reports_the_tv_with_its_interval_and_the_exact_value(tmp_path):
    impl = get("residual_from_p")
    report = run_sampler_check(impl.fn, impl_name=impl.name, cases=["anti-logits"], samples=20000, estimate=True)
    assert report.verdict == "fail"
    (e,) = report.estimates
    assert e["position"] == 0 and e["low"] <= e["exact_tv"] <= e["high"] and e["high"] - e["low"] < 0.05
    line = report.estimate_lines()[0]
    assert line.startswith(f"TV {e['estimate']:.3f} [{e['low']:.3f}, {e['high']:.3f}] at position 0 (anti-logits")
    assert json.loads(json.dumps(report.to_dict()))["estimates"][0]["exact_tv"] == e["exact_tv"]


def test_without_estimate_the_report_has_none():
    report = run_sampler_check(get("reference_verify").fn, cases=["binary-gamma8"], samples=2000)
    assert report.estimates == [] and report.estimate_lines() == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fp32_exponential_race", "floored_uniform_race", "fp32_cumsum_inverse_cdf"])
def test_rng_resolution_mutants_fail_the_tail_case_by_its_deep_tail_test(name):
    report = run_sampler_check(get(name).fn, impl_name=name, cases=[TAIL], seed=0)
    assert report.verdict == "fail"
    assert any(t.reject and t.name.endswith("/deep_tail") for t in report.tests)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["reference_verify", "fp64_exponential_race"])
def test_float64_implementations_pass_the_tail_case(name):
    assert run_sampler_check(get(name).fn, impl_name=name, cases=[TAIL], seed=0).verdict == "pass"
