"""The peers' tests (harness.peers): each passes the reference and fails a gross planted bug; the oracle's
closed forms agree with the exact laws and with simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from harness.check.sampler import default_cases, plan_cases
from harness.mutants.registry import get
from harness.mutants.rule import Rule
from harness.peers import get_peer_test, peer_tests
from harness.peers.oracle import (
    Moments,
    case_moments,
    case_plans,
    law_moments,
    minimax_identity_rows,
    np_power,
    oracle_rows,
    row_llr,
    rule_parts,
    simulate_np,
)
from harness.peers.sampler import chisq_merged, draw_rows, kl_to_histogram, vllm_v1_sizes

REFERENCE = get("reference_verify").fn
ALWAYS_ACCEPT = get("always_accept").fn  # emits q at every draft position: a gross bug


def test_registry_lists_every_peer_test_once():
    names = [t.name for t in peer_tests()]
    assert len(names) == len(set(names)) == 7
    assert {t.level for t in peer_tests()} == {"sampler", "generation"}
    assert get_peer_test("trtllm_kl").own_samples == 50_000


@pytest.mark.parametrize("name", ["vllm_v1_histogram", "trtllm_kl"])
def test_cheap_sampler_tests_pass_the_reference_and_fail_always_accept(name):
    test = get_peer_test(name)
    assert test.run(REFERENCE, seed=0).passed
    bad = test.run(ALWAYS_ACCEPT, seed=0)
    assert not bad.passed and bad.samples == test.own_samples


def test_mrv2_chisq_at_a_small_n_passes_the_reference_and_fails_always_accept():
    test = get_peer_test("vllm_mrv2_chisq")  # 4 × 2,048 rows instead of 4 × 40,960 (the statistic is the same)
    assert test.run(REFERENCE, seed=0, samples=8192).passed
    verdict = test.run(ALWAYS_ACCEPT, seed=0, samples=8192)
    assert not verdict.passed and verdict.statistic > 1


def test_equal_n_sizes_sum_to_the_requested_rows():
    assert vllm_v1_sizes(None) == [10, 100, 1_000, 10_000, 100_000]
    assert sum(vllm_v1_sizes(785_376)) == 785_376


def test_chisq_merges_small_cells_and_kl_of_a_missed_token_is_infinite():
    chi2, df = chisq_merged(np.array([50.0, 50.0, 1.0, 2.0]), np.array([50.0, 50.0, 2.0, 2.0]))
    assert df == 1 and chi2 == 0  # the two small cells are merged into one "other" cell of expected 4 < 5: dropped
    assert kl_to_histogram(np.array([0.5, 0.5]), np.array([0, 0, 0])) == math.inf
    assert math.isnan(kl_to_histogram(np.array([0.5, 0.5]), np.array([-1, 7])))


def test_draw_rows_rejects_a_malformed_output():
    from harness.adapters.calling import ImplementationError

    def wrong(target, draft, tokens, generator):
        return tokens  # [B, γ] instead of [B, γ+1]

    p, q = torch.full((3, 4), 0.25), torch.full((2, 4), 0.25)
    with pytest.raises(ImplementationError):
        draw_rows(wrong, p, q, 8, drafts=torch.Generator().manual_seed(0), generator=torch.Generator(), what="t")


def _toy_pair():
    from harness.pairs import get_pair

    return get_pair("toy-tied")


@pytest.mark.parametrize("name", ["sglang_one_prompt", "transformers_assisted_greedy", "llamacpp_with_without_draft"])
def test_greedy_tests_pass_the_reference_and_fail_a_tie_break_bug(name):
    pair = _toy_pair()
    test = get_peer_test(name)
    assert test.run(get("reference_generate").fn, pair, seed=0).passed
    assert not test.run(get("greedy_tie_last_index").fn, pair, seed=0).passed  # vLLM #7627 class, on tied logits


def test_greedy_tests_are_blind_to_a_sampling_only_bug():
    """The limitation the campaign measures: a bug that only changes sampling never shows at temperature 0."""
    pair = _toy_pair()
    assert get_peer_test("sglang_one_prompt").run(get("target_ignores_sampling_params").fn, pair, seed=0).passed


# ------------------------------------------------------------------------------------------------ the oracle


def _anti_logits():
    return plan_cases([c for c in default_cases() if c.name == "anti-logits"], 0)[0]


def test_the_null_against_itself_has_no_information():
    plan = _anti_logits()
    m0, m1 = case_moments(Rule(), plan.p, plan.q)
    assert m0.rho == pytest.approx(1) and m1.rho == pytest.approx(1)
    assert abs(m0.mean) < 1e-9 and abs(m1.mean) < 1e-9 and m0.var < 1e-12
    assert oracle_rows([(1.0, m0, m1)], limit=1e6) == math.inf


def test_row_moments_match_the_empirical_llr_of_the_reference_rows():
    plan = _anti_logits()
    rule = get("residual_from_p").fn.rule
    alt, null = rule_parts(rule, plan.p, plan.q), rule_parts(Rule(), plan.p, plan.q)
    m0, _ = case_moments(rule, plan.p, plan.q)
    p, q = torch.from_numpy(plan.p).float(), torch.from_numpy(plan.q).float()
    rows = 40_000
    tokens = draw_rows(REFERENCE, p, q, rows, drafts=torch.Generator().manual_seed(3),
                       generator=torch.Generator().manual_seed(4), what="reference")
    drafts = torch.Generator().manual_seed(3)  # the same stream draw_rows drew the drafts from
    x = torch.stack([torch.multinomial(q[j].double(), rows, replacement=True, generator=drafts)
                     for j in range(q.shape[0])], 1).numpy()
    llr = row_llr(alt, null, x, tokens)
    assert np.isfinite(llr).all()  # the null never emits what it cannot
    assert llr.mean() == pytest.approx(m0.mean, abs=4 * math.sqrt(m0.var / rows))


def test_oracle_rows_reach_the_power_in_simulation():
    """The normal approximation, checked on one case: NP power at the oracle's n, by Monte Carlo."""
    rng = np.random.default_rng(0)
    m0, m1 = Moments(1.0, -0.05, 0.1), Moments(1.0, 0.05, 0.1)
    n = oracle_rows([(1.0, m0, m1)], alpha=0.01, power=0.9)
    llr0 = rng.normal(-0.05, math.sqrt(0.1), 50_000)
    llr1 = rng.normal(0.05, math.sqrt(0.1), 50_000)
    assert simulate_np(llr0, llr1, int(n), 0.01, 4000) == pytest.approx(0.9, abs=0.03)
    assert np_power(n, [(1.0, m0, m1)], 0.01) >= 0.9 > np_power(n * 0.8, [(1.0, m0, m1)], 0.01)


def test_impossible_rows_decide_alone():
    """always_accept never stops early: a row of the null that stops early is impossible under it."""
    plan = _anti_logits()
    m0, m1 = case_moments(get("always_accept").fn.rule, plan.p, plan.q)
    assert m0.rho < 0.01 and oracle_rows([(1.0, m0, m1)]) <= 3


def test_law_oracle_of_algorithm1_is_uninformative_and_of_a_mutant_finite():
    plan = _anti_logits()
    p, q = torch.from_numpy(plan.p), torch.from_numpy(plan.q)
    reach = np.concatenate([[1.0], np.cumprod(Rule().acceptance(p, q).numpy())])
    m0, m1 = law_moments(Rule().position_laws(p, q).numpy(), plan.p, reach)
    assert abs(m1.mean) < 1e-9 and abs(m0.mean) < 1e-9
    impl = get("residual_temperature")
    mut0, mut1 = law_moments(impl.position_laws(p, q).numpy(), plan.p, reach)
    assert mut1.mean > 0 > mut0.mean and 10 < oracle_rows([(1.0, mut0, mut1)]) < 1e6


def test_case_plans_hold_every_law_of_a_mixed_case():
    case = next(c for c in default_cases() if c.laws > 1)
    plans = case_plans(case, 0)
    assert len(plans) == case.laws and not np.allclose(plans[0].p, plans[1].p)


def test_minimax_rate():
    assert minimax_identity_rows(100, 0.02) == pytest.approx(25_000)
