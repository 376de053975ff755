"""harness.adapters.llamacpp: llama-cpp-python's `Llama.generate` with prompt-lookup drafts behind §1b.

The first tests need no llama-cpp-python (they run in CI); the rest skip without it (`nox -s engines` builds it)
and run the generation-level check on the embedded SmolLM2: the shipped decoder passes, the planted bug
(drafts kept unverified) fails."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from harness.adapters import llamacpp
from harness.errors import HarnessError, MissingOptionalPackage

HAVE_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
needs_llama_cpp = pytest.mark.skipif(not HAVE_LLAMA_CPP, reason="needs llama-cpp-python (nox -s engines builds it)")
COPY = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,"


def test_unset_truncations_are_switched_off_not_left_to_llama_cpp_defaults():
    """llama.cpp's own defaults truncate (top-k 40, top-p 0.95, min-p 0.05): every unset one is passed as off."""
    assert llamacpp.sampling_arguments(0.7, None, None, None) == {
        "temp": 0.7, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0,
        "frequency_penalty": 0.0, "presence_penalty": 0.0}
    assert llamacpp.sampling_arguments(1.0, 5, 0.9, 0.05) | {} == {**llamacpp.sampling_arguments(1.0, None, None, None), "top_k": 5,
                                                          "top_p": 0.9, "min_p": 0.05}


def test_row_seeds_are_distinct_uint32_and_never_llama_cpp_random_seed():
    seeds = {llamacpp.row_seed(s, b) for s in (0, 1, 7919, 10**9) for b in range(50)}
    assert len(seeds) == 200 and all(0 <= x < 0xFFFFFFFF for x in seeds)


def test_without_llama_cpp_the_adapter_is_a_missing_package_not_a_traceback(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    llamacpp._llama.cache_clear()
    with pytest.raises(MissingOptionalPackage, match="llama-cpp-python"):
        llamacpp._llama("/nonexistent.gguf")
    llamacpp._llama.cache_clear()


def test_a_model_path_that_is_not_a_file_is_a_usage_error(monkeypatch, tmp_path):
    monkeypatch.setenv(llamacpp.MODEL_ENV, str(tmp_path / "missing.gguf"))
    with pytest.raises(HarnessError, match="not a file"):
        llamacpp.model_path()


@pytest.fixture(scope="module")
def smollm2():
    from harness.models.smollm2 import smollm2_available

    ok, why = smollm2_available()
    if not (ok and HAVE_LLAMA_CPP):
        pytest.skip(why or "needs llama-cpp-python")
    from harness.pairs import get_pair

    return get_pair("smollm2")


def _ids(pair, text: str, rows: int) -> torch.Tensor:
    return torch.tensor([pair.tokenizer(text)["input_ids"]] * rows)


@needs_llama_cpp
def test_rows_are_seeded_padded_after_eos_and_the_draft_setting_is_restored(smollm2):
    ids = torch.tensor([smollm2.prompts[0]] * 4)  # an open prompt (the copy prompt's continuation is one text)
    kw = dict(max_new_tokens=12, gamma=4, temperature=1.0, top_k=None, top_p=None)
    a = llamacpp.prompt_lookup_generate(smollm2.target, None, ids, seed=3, **kw)
    b = llamacpp.prompt_lookup_generate(smollm2.target, None, ids, seed=3, **kw)
    c = llamacpp.prompt_lookup_generate(smollm2.target, None, ids, seed=4, **kw)
    assert a.dtype == torch.long and a.shape[0] == 4 and a.shape[1] <= 12
    assert torch.equal(a, b)  # the row seeds are the stream
    assert not torch.equal(a, c)
    assert len({tuple(r.tolist()) for r in a}) > 1  # rows have seeds of their own
    eos = set(llamacpp.eos_list(smollm2.target))
    for row in a.tolist():
        if -1 in row:
            cut = row.index(-1)
            assert row[cut - 1] in eos and set(row[cut:]) == {-1}
    assert llamacpp._llama(str(llamacpp.model_path())).draft_model is None


@needs_llama_cpp
def test_prompt_lookup_really_drafts_gamma_tokens(smollm2, monkeypatch):
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    drafted = []
    original = LlamaPromptLookupDecoding.__call__

    def spy(self, input_ids, *args, **kwargs):
        out = original(self, input_ids, *args, **kwargs)
        drafted.append(len(out))
        return out

    monkeypatch.setattr(LlamaPromptLookupDecoding, "__call__", spy)
    llamacpp.prompt_lookup_generate(smollm2.target, None, _ids(smollm2, COPY, 1), max_new_tokens=16, gamma=5,
                                    temperature=0.0, top_k=None, top_p=None, seed=0)
    assert drafted and max(drafted) == 5  # the copy prompt gives full-length drafts


@needs_llama_cpp
def test_a_model_of_another_vocabulary_is_a_usage_error():
    from harness.pairs import get_pair

    toy = get_pair("toy")
    with pytest.raises(HarnessError, match="vocabulary"):
        llamacpp.prompt_lookup_generate(toy.target, None, torch.tensor([toy.prompts[0]]), max_new_tokens=2, gamma=2,
                                        temperature=1.0, top_k=None, top_p=None, seed=0)


@needs_llama_cpp
@pytest.mark.slow
def test_the_shipped_decoder_passes_and_the_unverified_drafts_fail(smollm2):
    """One cell each at T = 1 on the pair's first prompt: correct code is not failed; the planted bug is."""
    from harness.check.generation import run_generation_check
    from harness.check.settings import Setting
    from harness.mutants.llamacpp import no_verify_generate

    kw = dict(samples=200, length=8, gamma=4, prompts=1, settings=(Setting(temperature=1.0),), seed=1)
    good = run_generation_check(llamacpp.prompt_lookup_generate, smollm2, **kw)
    bad = run_generation_check(no_verify_generate, smollm2, **kw)
    assert good.verdict == "pass", good.failure_summary()
    assert bad.verdict == "fail"
