"""The draft step contract (specdec_ref/draft_step.py) and its check (harness/check/draft_step.py):
references pass, drafting bugs are caught, the battery's declared test count equals what it emits."""

import numpy as np
import pytest
import torch

from harness.check.draft_step import (
    count_draft_law_tests,
    draft_law_tests,
    run_draft_step_check,
)
from harness.check.sampler import plan_cases, select_cases
from harness.mutants.laws import exact_tvs
from harness.mutants.registry import get
from harness.stats import holm
from specdec_ref.adapters import block_draft_and_verify, draft_and_verify

CASES = ["anti-logits", "binary-gamma8"]


def _laws(gamma, V, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(gamma + 1, V, generator=g, dtype=torch.float64) ** 2
    q = torch.rand(gamma, V, generator=g, dtype=torch.float64) ** 2
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


@pytest.mark.parametrize("impl", [draft_and_verify, block_draft_and_verify], ids=["chain", "block"])
def test_references_pass_and_declared_count_matches(impl):
    report = run_draft_step_check(impl, impl_name="ref", seed=0, cases=CASES)
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]
    assert len(report.tests) == report.declared_tests  # the engine's plan: what the battery declared
    plans = plan_cases(select_cases(CASES), 0)
    assert sum(t.name.split("/")[1].startswith("draft") for t in report.tests) == \
        sum(count_draft_law_tests(plan.q) for plan in plans)
    assert report.level == "draft_step" and report.samples > 0


def test_reference_returns_drafts_from_q_and_its_own_accepted_prefix():
    p, q = _laws(3, 6, 0)
    B = 100_000
    drafts, tokens = draft_and_verify(p.expand(B, -1, -1), q.expand(B, -1, -1), torch.Generator().manual_seed(1))
    assert drafts.shape == (B, 3) and drafts.dtype == torch.int64 and tokens.shape == (B, 4)
    for i in range(3):
        freq = torch.bincount(drafts[:, i], minlength=6).double() / B
        assert float((freq - q[i]).abs().sum()) / 2 < 0.01
    n = (tokens >= 0).sum(1)
    prefix = torch.arange(3) < (n - 1).unsqueeze(1)
    assert bool((tokens[:, :3][prefix] == drafts[prefix]).all())


def test_draft_law_tests_catch_drafts_not_from_q_and_pass_drafts_from_q():
    rng = np.random.default_rng(0)
    q = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    good = np.stack([rng.choice(3, 20_000, p=q[i]) for i in range(2)], 1)
    bad = good.copy()
    bad[:, 1] = np.argmax(q[1])  # greedy drafter at position 1
    rate = 1e-3 / count_draft_law_tests(q)
    assert not any(t.reject for t in holm(draft_law_tests(good, q, rate, 0.99, "x"), 1e-3))
    rejected = [t.name for t in holm(draft_law_tests(bad, q, rate, 0.99, "x"), 1e-3) if t.reject]
    assert rejected and all(name.startswith("x/draft1") for name in rejected)
    assert len(draft_law_tests(good, q, rate, 0.99, "x")) == count_draft_law_tests(q)


def test_accepted_positions_must_equal_the_returned_drafts():
    def lies_about_drafts(target_probs, draft_probs, generator):
        drafts, tokens = draft_and_verify(target_probs, draft_probs, generator)
        return (drafts + 1) % draft_probs.shape[-1], tokens

    report = run_draft_step_check(lies_about_drafts, seed=0, cases=["binary-gamma8"])
    assert report.verdict == "fail"
    fmt = [t for t in report.tests if t.name.endswith("/format")][0]
    assert fmt.reject and "not the draft token" in fmt.details["message"]


def test_malformed_output_fails_format():
    report = run_draft_step_check(lambda t, d, g: d.argmax(-1), seed=0, cases=["binary-gamma8"])
    assert report.verdict == "fail" and "expected a pair" in report.tests[0].details["message"]


@pytest.mark.parametrize("name", ["argmax_drafts_softmax_q", "draft_noise_reused"])
def test_draft_step_mutants_are_caught(name):
    impl = get(name)
    report = run_draft_step_check(impl.fn, impl_name=name, seed=0, cases=CASES, stop_on_fail=False)
    assert report.verdict == "fail"


def test_argmax_drafts_are_caught_by_the_draft_law_cross_check():
    report = run_draft_step_check(get("argmax_drafts_softmax_q").fn, seed=0, cases=["anti-logits"])
    assert any(t.reject and "/draft" in t.name for t in report.tests)


def test_noise_reuse_exact_law_matches_simulation():
    impl = get("draft_noise_reused")
    p, q = _laws(2, 5, 3)
    B = 400_000
    _, tokens = impl.fn(p.expand(B, -1, -1), q.expand(B, -1, -1), torch.Generator().manual_seed(0))
    laws = impl.position_laws(p, q)
    n = (tokens >= 0).sum(1)
    for j in range(2):
        col = tokens[n >= j + 1, j]
        freq = torch.bincount(col, minlength=5).double() / len(col)
        assert float((freq - laws[j]).abs().sum()) / 2 < 0.006, j
    accept = impl.exact_acceptance(p, q)
    assert abs(float((n >= 2).double().mean()) - float(accept[0])) < 0.004
    assert max(exact_tvs(impl, p, q)) > 0.02  # and it is lossy on these laws


def test_argmax_exact_law_is_the_greedy_drafter_rule():
    impl = get("argmax_drafts_softmax_q")
    p, q = _laws(2, 4, 1)
    laws = impl.position_laws(p, q)
    B = 200_000
    _, tokens = impl.fn(p.expand(B, -1, -1), q.expand(B, -1, -1), torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens[:, 0], minlength=4).double() / B
    assert float((freq - laws[0]).abs().sum()) / 2 < 0.006


def test_calibration_entry_point_counts_failures(tmp_path, capsys):
    import json

    from harness.cli import main

    argv = ["campaign", "families", "--names", "draft_noise_reused", "draft_step_reference", "--seeds", "2",
            "--rows", "20000", "--cases", "q-zero-where-p-positive", "--out", str(tmp_path)]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["draft_noise_reused"]["failed"] == 2 and result["draft_step_reference"]["failed"] == 0
    rows = json.loads((tmp_path / "calibration.json").read_text())["rows"]
    assert {r.pop("name"): r for r in rows} == result
    # a rerun resumes from OUT/journal.jsonl: the same rates, nothing run again
    assert main([*argv, "--report-only"]) == 0
    assert json.loads(capsys.readouterr().out) == result
