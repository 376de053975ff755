"""The sampler-chain convention of llama.cpp (`--processing-order llama_cpp`) at the engine level, over HTTP.

An engine that samples like llama-server (its default truncation, temperature after the cuts) FAILS the
documented order with the diagnosis naming `llama_cpp`, and PASSES once that convention is declared.
"""

from __future__ import annotations

import pytest
import torch

from harness.check.settings import Setting
from harness.pairs import get_pair
from harness.served.check import run_engine_check
from harness.served.config import EngineConfig
from harness.served.serve import serving
from specdec_ref.processing import LLAMA_CPP_DEFAULTS, SamplingParams, process
from tests.impls.llama_cpp_convention import generate as llama_cpp_like

KW = dict(pair="toy", samples=1500, prompts=1, chunk=750, settings=(Setting(0.7),), seed=2)


def test_llama_cpp_order_applies_its_defaults_then_temperature():
    logits = torch.tensor([[4.0, 3.0, 1.0, -2.0, -3.0]], dtype=torch.float64)
    got = process(logits, SamplingParams(0.5), order="llama_cpp")
    cut = process(logits, SamplingParams(1.0, **LLAMA_CPP_DEFAULTS))  # the cuts on the T = 1 law
    kept = cut > 0
    want = torch.where(kept, (logits / 0.5).softmax(-1), torch.zeros_like(logits))
    assert torch.allclose(got, want / want.sum(), atol=1e-12)
    assert int(kept.sum()) < 5  # min-p 0.05 drops the tail here
    # given values are kept (top-p 1 = off is not replaced by the default)
    assert torch.count_nonzero(process(logits, SamplingParams(0.5, top_p=1.0, min_p=0.0), order="llama_cpp")) == 5


@pytest.mark.stochastic(false_alarm=0.011, seed=2)  # FAIL 0.01 + PASS 0.001
def test_undeclared_llama_cpp_sampling_is_named_by_the_diagnosis_and_passes_when_declared():
    with serving(llama_cpp_like, get_pair("toy")) as s:
        undeclared = run_engine_check(EngineConfig(endpoint=s.url + "/v1", **KW))
        declared = run_engine_check(EngineConfig(endpoint=s.url + "/v1", processing_order="llama_cpp", **KW))
    assert undeclared.verdict == "fail"
    notes = " ".join(undeclared.notes)
    assert "convention 'llama_cpp'" in notes and "--processing-order llama_cpp" in notes
    assert declared.verdict == "pass", [t.name for t in declared.tests if t.reject]
