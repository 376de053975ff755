"""The ONNX Runtime GenAI adapter: its probe without the engine venv, the transcribed acceptance rule, and (where
$SPECDEC_ORT_GENAI_PYTHON names a venv with onnxruntime-genai) the engine itself on the toy pair."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from harness.engines import onnxruntime_genai as ort
from harness.engines import onnxruntime_genai_rule as rule
from harness.engines.base import Request, Setup


def test_probe_without_the_engine_venv(monkeypatch):
    monkeypatch.delenv(ort.PYTHON_ENV, raising=False)
    probe = ort.OnnxRuntimeGenAI.installed()
    assert not probe.installed and ort.PYTHON_ENV in probe.reason
    monkeypatch.setenv(ort.PYTHON_ENV, "/nonexistent/python")
    assert not ort.OnnxRuntimeGenAI.installed().installed


def test_registered_and_runnable():
    from harness.engines.registry import get

    cls = get("onnxruntime-genai")
    assert cls is ort.OnnxRuntimeGenAI and cls.runnable and cls.capabilities.methods == ("draft", "ngram")


def _laws(batch=64, gamma=3, vocab=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(batch, gamma + 1, vocab, generator=g, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(batch, gamma, vocab, generator=g, dtype=torch.float64) * 2, -1)
    x = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).reshape(batch, gamma)
    return p, q, x, g


def test_rule_keeps_every_draft_when_q_equals_p():
    p, _, x, g = _laws()
    out = rule.verify(p, p[:, :3], x, g)
    assert torch.equal(out[:, :3], x) and (out[:, 3] >= 0).all()


def test_rule_rejects_a_draft_the_target_cannot_emit():
    p, q, x, g = _laws()
    p[:, 0].scatter_(1, x[:, :1], 0.0)
    p[:, 0] /= p[:, 0].sum(-1, keepdim=True)
    out = rule.verify(p, q, x, g)
    assert (out[:, 0] != x[:, 0]).all() and (out[:, 1:] == -1).all()


def test_q_zero_branch_keeps_even_an_impossible_draft():
    p, q, x, g = _laws()
    p[:, 0].scatter_(1, x[:, :1], 0.0)  # the target gives the draft probability 0: it is kept all the same
    out = rule.q_zero_verify(p, q, x, g)
    assert torch.equal(out[:, :3], x)


needs_engine = pytest.mark.skipif(not os.environ.get(ort.PYTHON_ENV) or not Path(os.environ[ort.PYTHON_ENV]).exists(),
                                  reason=f"${ort.PYTHON_ENV} names no venv with onnxruntime-genai")


@needs_engine
def test_engine_on_the_toy_pair(tmp_path):
    """Greedy with a draft model and with n-gram equals the engine's own greedy, rows stop at max_new_tokens (the toy
    has no EOS: the unreachable id V never appears), and sampled rows are reproducible per seed."""
    prompt = (12, 15, 5, 0)
    outputs = {}
    for method in (None, "draft", "ngram"):
        with ort.OnnxRuntimeGenAI(Setup("toy-low", method, 3, tmp_path)) as engine:
            greedy = engine.generate(Request(prompt, max_new_tokens=12, temperature=0.0, method=method)).token_ids
            sampled = [engine.generate(Request(prompt, n=4, max_new_tokens=6, seed=7, method=method)).token_ids
                       for _ in range(2)]
            outputs[method] = greedy[0]
            assert sampled[0] == sampled[1]
            assert all(len(r) == 6 and all(0 <= t < 16 for t in r) for r in sampled[0])
            if method is not None:
                assert engine.stats.get("draft_tokens_proposed", 0) > 0
        assert engine.stop_report == "quit"
    assert outputs["draft"] == outputs[None] == outputs["ngram"] and len(outputs[None]) == 12
