"""User-supplied checkpoints (`--target/--draft`): offline loading, vocabulary reconciliation, clear errors."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from harness.errors import HarnessError
from harness.models.hf_pair import load_causal_lm, output_width, pair_from_checkpoints, reconcile_vocab
from harness.prompts import PROMPT_KINDS, load_prompts

TOKENIZER_SIZE = 60  # the tiny tokenizer below; the models pad their embeddings to 64 and 72


def tiny_llama(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=False, eos_token_id=1, bos_token_id=0, pad_token_id=None)
    return LlamaForCausalLM(config).eval()


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(TOKENIZER_SIZE - 3)]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Directories: t64 / d72 (no tokenizer), tt64 / td72 (same models plus the tiny tokenizer)."""
    root = tmp_path_factory.mktemp("ckpt")
    tok = tiny_tokenizer()
    dirs = {}
    for name, vocab, seed, with_tok in [("t64", 64, 0, False), ("d72", 72, 1, False),
                                        ("tt64", 64, 0, True), ("td72", 72, 1, True)]:
        dirs[name] = root / name
        tiny_llama(vocab, seed).save_pretrained(dirs[name])
        if with_tok:
            tok.save_pretrained(dirs[name])
    return dirs


def logits(model, ids=((0, 5, 7, 9, 11),)) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids)).logits


def test_load_causal_lm_round_trips_a_saved_model(checkpoints):
    model, tokenizer = load_causal_lm(checkpoints["t64"])
    assert tokenizer is None
    assert not model.training
    assert model.dtype == torch.float32
    torch.testing.assert_close(logits(model), logits(tiny_llama(64, seed=0)))


def test_load_causal_lm_passes_device_map_through(checkpoints):
    model, _ = load_causal_lm(checkpoints["t64"], device_map="cpu", dtype="bf16")
    assert model.dtype == torch.bfloat16
    assert model.device.type == "cpu"


def test_pair_from_checkpoints_slices_padding_to_the_tokenizer(checkpoints):
    pair = pair_from_checkpoints(checkpoints["tt64"], checkpoints["td72"], device="cpu", dtype=None)
    assert pair.vocab_size == TOKENIZER_SIZE
    assert logits(pair.target).shape[-1] == logits(pair.draft).shape[-1] == TOKENIZER_SIZE
    assert pair.eos_token_id == 1
    assert pair.prompts and all(isinstance(t, int) for t in pair.prompts[0])


def test_pair_from_checkpoints_without_tokenizer_uses_the_size_argument(checkpoints):
    pair = pair_from_checkpoints(checkpoints["t64"], checkpoints["d72"], tokenizer_size=64)
    assert pair.vocab_size == 64 and pair.tokenizer is None and pair.prompts is None
    assert logits(pair.draft).shape[-1] == 64


def test_reconcile_vocab_keeps_the_real_rows_when_slicing():
    target, draft = tiny_llama(64, 0), tiny_llama(72, 1)
    before = logits(draft)
    assert reconcile_vocab(target, draft, tokenizer_size=64) == 64
    assert output_width(target) == output_width(draft) == 64
    torch.testing.assert_close(logits(draft), before[..., :64])


def test_reconcile_vocab_leaves_equal_widths_alone():
    target, draft = tiny_llama(64, 0), tiny_llama(64, 1)
    assert reconcile_vocab(target, draft, tokenizer_size=None) == 64
    assert output_width(draft) == 64


@pytest.mark.parametrize("tokenizer_size", [None, 68])
def test_reconcile_vocab_rejects_different_vocabularies_naming_both_sizes(tokenizer_size):
    with pytest.raises(HarnessError) as err:
        reconcile_vocab(tiny_llama(64), tiny_llama(72), tokenizer_size=tokenizer_size)
    assert "64" in str(err.value) and "72" in str(err.value)


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(HarnessError, match="pass a local directory"):
        load_causal_lm(tmp_path / "no-such-model")


def test_hub_name_is_not_downloaded(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # belt and braces: the loader itself never goes online
    with pytest.raises(HarnessError, match="no hub access"):
        load_causal_lm("some-org/some-model-that-is-not-cached")


def test_directory_without_a_model_is_a_clear_error(tmp_path):
    with pytest.raises(HarnessError, match="cannot load a causal LM"):
        load_causal_lm(tmp_path)


def test_unknown_dtype_is_a_clear_error(checkpoints):
    with pytest.raises(HarnessError, match="unknown dtype"):
        load_causal_lm(checkpoints["t64"], dtype="float8")


def test_prompt_set_is_well_formed():
    prompts = load_prompts()
    assert len(prompts) >= 16
    assert len({p.id for p in prompts}) == len(prompts)
    assert {p.kind for p in prompts} == set(PROMPT_KINDS)
    assert all(p.text.strip() for p in prompts)
    assert [p.kind for p in load_prompts("code")] == ["code"] * len(load_prompts("code"))


def test_unknown_prompt_kind_is_a_clear_error():
    with pytest.raises(HarnessError, match="unknown prompt kind"):
        load_prompts("poetry")
