"""Regression tests: verdicts must not depend on the path that produced them (one driver).

Each test here was a wrong verdict once: a row-slip bug passed in sequential mode (its multi-law case
kept one law), a correct wasteful rule failed after a reach top-up (the row -> law cycle restarted in
every draw), a correct rule drawing its uniforms from torch's global RNG failed because the harness
seeded that RNG like the generator it drew the drafts with, and `--tv` was ignored by the tree family."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import harness.check.driver as driver
from harness.check.api import run_verify
from harness.check.config import DEFAULT_TREE_TV, DEFAULT_TV, CheckConfig
from harness.check.sampler import SamplerSource, run_sampler_check
from harness.check.sequential import run_sampler_check_sequential
from harness.check.streams import stream_seed
from harness.mutants import get
from harness.mutants.generated import global_rng_flat_uniforms, global_rng_uniforms, half_acceptance

ROWS_DIFFER = ["rows-differ", "rows-differ-low-alpha"]


def test_sequential_mode_fails_a_row_slip_on_multi_law_cases():
    report = run_sampler_check_sequential(get("row_slip_target").fn, cases=ROWS_DIFFER, seed=0)
    assert report.verdict == "fail"
    assert any("/law" in t.name for t in report.tests if t.reject)
    laws = {t.name.split("/")[1] for t in report.tests if t.name.startswith("rows-differ/law")}
    assert laws == {"law0", "law1", "law2", "law3"}  # every law of the case is monitored


def test_fixed_n_mode_fails_the_same_row_slip():
    assert run_sampler_check(get("row_slip_target").fn, cases=ROWS_DIFFER, seed=0).verdict == "fail"


@pytest.mark.stochastic(false_alarm=0.001, seed=0)  # PASS 0.001
def test_half_acceptance_lossless_rule_passes_rows_differ_at_the_default_plan():
    report = run_sampler_check(half_acceptance, cases=ROWS_DIFFER, seed=0)
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]
    topped = [c for c in report.cases if c["samples"] > c["planned"]]
    assert topped, "the wasteful rule must have been topped up (positions reached less often)"


@pytest.mark.parametrize("residue", [0, 1, 2, 3])
@pytest.mark.stochastic(false_alarm=0.001, seed=1)  # PASS 0.001
def test_half_acceptance_passes_after_a_top_up_at_every_row_count_residue(monkeypatch, residue):
    """The first draw's row count is forced to each residue mod the 4 laws; the top-up draws continue
    the law cycle and carry their labels."""
    real = driver.plan_cell

    def plan(cell, rate, power):
        n = real(cell, rate, power)
        return n - n % 4 + residue + 4

    monkeypatch.setattr(driver, "plan_cell", plan)
    report = run_sampler_check(half_acceptance, cases=["rows-differ"], seed=1)
    assert report.cases[0]["planned"] % 4 == residue
    assert report.cases[0]["samples"] > report.cases[0]["planned"]
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]


def test_every_row_carries_the_law_it_held_across_draws():
    """The source returns each row's law with the row: an implementation that echoes a law-identifying
    token shows the labels are right for draws of every size."""
    def echo_law(target_probs, draft_probs, draft_tokens, generator):
        B, g1, _ = target_probs.shape
        out = torch.full((B, g1), -1, dtype=torch.int64)
        out[:, 0] = target_probs[:, 0].argmax(-1)  # the likeliest token of p_0 identifies the law
        return out

    config = CheckConfig(level="sampler", cases=["rows-differ"], seed=0)
    source = SamplerSource(echo_law)
    cell = source.cells(config)[0]
    top = np.array([plan.p[0].argmax() for plan in cell.data])
    assert len(set(top)) == 4
    trials = source.draw(cell, 7, None)
    for n in (5, 1, 6, 3):
        trials = source.extend(trials, source.draw(cell, n, None))
    assert np.array_equal(top[trials.law], trials.tokens[:, 0])


@pytest.mark.parametrize("impl", [global_rng_uniforms, global_rng_flat_uniforms])
@pytest.mark.parametrize("seed", [3, 4, 5])
@pytest.mark.stochastic(false_alarm=0.001)  # PASS 0.001
def test_rules_drawing_from_the_global_rng_pass_the_rows_differ_cases(impl, seed):
    report = run_sampler_check(impl, cases=ROWS_DIFFER, seed=seed)
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [3, 4])
def test_rules_drawing_from_the_global_rng_pass_every_case(seed):
    for impl in (global_rng_uniforms, global_rng_flat_uniforms):
        report = run_sampler_check(impl, seed=seed)
        assert report.verdict == "pass", [t.name for t in report.tests if t.reject]


def test_the_harness_streams_are_distinct():
    """Drafting, the implementation's generator, the global RNG and the probes never share a state."""
    seeds = {purpose: stream_seed(7, purpose) for purpose in ("drafts", "impl", "global", "laws", "probe", "pit")}
    assert len(set(seeds.values())) == len(seeds)
    assert stream_seed(7, "drafts") == stream_seed(7, "drafts") != stream_seed(8, "drafts")
    source = SamplerSource(None)
    source.cells(CheckConfig(level="sampler", cases=["anti-logits"], seed=7))
    global_first = torch.rand(8, dtype=torch.float64)
    drafts_first = torch.rand(8, generator=source.streams.drafts, dtype=torch.float64)
    impl_first = torch.rand(8, generator=source.streams.impl, dtype=torch.float64)
    assert not torch.equal(global_first, drafts_first) and not torch.equal(impl_first, drafts_first)


@pytest.mark.parametrize("family, impl", [("chain", "specdec_ref.adapters:verify"),
                                          ("block", "specdec_ref.adapters:block_verify"),
                                          ("tree", "specdec_ref.adapters:tree_verify_topk")])
@pytest.mark.end_to_end
def test_tv_is_honoured_by_every_family(family, impl, monkeypatch):
    seen = {}

    def capture(source, config, **kw):
        seen["tv"] = config.tv
        seen["cells"] = [c.tv for c in source.cells(config)]
        raise SystemExit(0)

    monkeypatch.setattr(driver, "run_battery", capture)
    with pytest.raises(SystemExit):
        run_verify(CheckConfig(impl=impl, level="sampler", family=family, tv=0.03))
    assert seen["tv"] == 0.03 and 0.03 in seen["cells"]


def test_family_defaults_when_tv_is_not_given():
    assert CheckConfig(family="tree").tv == DEFAULT_TREE_TV
    assert CheckConfig(family="chain").tv == DEFAULT_TV
    assert CheckConfig(family="tree", tv=DEFAULT_TV).tv == DEFAULT_TV  # an explicit --tv 0.02 is kept


def test_a_generate_that_stops_early_without_eos_fails_its_format_test():
    """The shared full-length rule (prompt cells and contexts cells alike): short rows are malformed output."""
    from specdec_ref.adapters import generate

    def short(target, draft, input_ids, *, max_new_tokens, **kw):
        return generate(target, draft, input_ids, max_new_tokens=max_new_tokens - 1, **kw)

    report = run_verify(CheckConfig(impl=short, level="generation", pair="toy", samples=50, settings=["T=1"], contexts="none"))
    assert report.verdict == "fail"
    assert any(t.name.endswith("/format") and t.reject and "without EOS" in t.details.get("message", "")
               for t in report.tests)
