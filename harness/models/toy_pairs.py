"""Toy pairs: tiny real transformers models with exact, enumerable laws (see specdec_ref.toy).

- `toy` (α ≈ 0.7), `toy-high` (α ≈ 0.9), `toy-low` (α ≈ 0.2), `toy-anti` (draft LM head = −target's,
  α ≈ 0.06, exercises residual and bonus paths), `toy-same` (draft = target, α = 1);
- `toy-eos` (an EOS id the draft proposes inside blocks), `toy-tied` (exactly tied logits: greedy
  tie-breaks);
- `toy-pieces`: `toy` with a byte-level BPE tokenizer whose text pieces are not all distinct (an id
  sharing its piece with a letter, two lone UTF-8 bytes and a special token all rendering as ""): the pair
  for checking the token-ids-from-text path (`--api llama-cpp-python`, `specdec serve --dialect
  llama-cpp-python`) with an exact law;
- `const-a0.2` … `const-a0.95`: context-free laws with Σ min(p, q) = α exactly (for checking the
  Leviathan token formula); add `synthetic_cost=(target_s, draft_s)` to emulate an accelerator.
Models are built once per process (float64 for exact checks, float32 by default).
"""

from __future__ import annotations

import copy
import functools

import torch

from harness.models.pair import ModelPair, PairSpec, always_available
from specdec_ref import toy

TOY_VOCAB = 16
# Positions the toy pairs accept: room for prompts that straddle a 256-token cache block plus a 40-token
# continuation (harness/contexts.py). Rotary positions have no learned table, so widening the limit leaves
# every logit at the first 64 positions as it was (tests/check/test_contexts.py checks it).
TOY_CONTEXT = 320
CONSTANT_ALPHAS = (0.2, 0.4, 0.6, 0.8, 0.9, 0.95)


@functools.cache
def toy_models(kind: str, dtype: torch.dtype):
    target, draft = _toy_models_64(kind, dtype)
    for model in (target, draft):
        model.config.max_position_embeddings = max(model.config.max_position_embeddings, TOY_CONTEXT)
    return target, draft


@functools.cache
def _toy_models_64(kind: str, dtype: torch.dtype):
    if kind == "eos":  # toy 0.7 whose target stops at its favourite first token: EOS lands inside blocks
        target, draft = (copy.deepcopy(m) for m in _toy_models_64("0.7", torch.float64))
        with torch.inference_mode():
            eos = int(target(input_ids=torch.tensor([toy_prompts()[0]])).logits[0, -1].argmax())
        for model in (target, draft):
            model.config.eos_token_id = eos
            model.generation_config.eos_token_id = eos
        return target.to(dtype), draft.to(dtype)
    if kind == "tied":  # LM-head rows 8..15 copy rows 0..7: every logit has an exact twin (greedy ties)
        target = toy.tiny_llama(TOY_VOCAB, seed=7, dtype=torch.float64)
        with torch.no_grad():
            target.lm_head.weight[TOY_VOCAB // 2 :] = target.lm_head.weight[: TOY_VOCAB // 2]
        return target.to(dtype), toy.tiny_llama(TOY_VOCAB, seed=8, dtype=dtype)
    if kind == "anti":
        target = toy.tiny_llama(TOY_VOCAB, dtype=torch.float64)
        draft = copy.deepcopy(target)
        with torch.no_grad():
            draft.lm_head.weight.neg_()
        return target.to(dtype), draft.to(dtype)
    if kind.startswith("const-a"):
        return toy.constant_alpha_pair(float(kind.removeprefix("const-a")), vocab_size=TOY_VOCAB, dtype=dtype)
    return toy.toy_pair(float(kind), vocab_size=TOY_VOCAB, dtype=dtype)


# toy-pieces: ids 0-9, 14, 15 are letters (one piece each); 10 is "a" + the byte 0xC3 (its piece is "a", like id 0);
# 11 and 12 are the lone bytes 0xC3 and 0xA9 (pieces "": together "é") and 13 a special token (piece "").
PIECES_VOCAB = [*"abcdefghij", "aÃ", "Ã", "©", "<|sep|>", "k", "l"]  # byte-level BPE's alphabet: Ã = 0xC3, © = 0xA9
PIECES_LETTERS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 15]  # ids whose text round-trips alone and in any sequence


@functools.cache
def pieces_tokenizer():
    """The toy-pieces tokenizer (a transformers fast tokenizer: byte-level BPE, one merge "a" + 0xC3)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(vocab={p: i for i, p in enumerate(PIECES_VOCAB)}, merges=[("a", "Ã")]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=bpe, additional_special_tokens=["<|sep|>"])


def toy_prompts(n: int = 8, length: int = 4, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, TOY_VOCAB, (n, length), generator=g).tolist()


def _letter_prompts(n: int = 8, length: int = 4, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [[PIECES_LETTERS[i] for i in row]
            for row in torch.randint(0, len(PIECES_LETTERS), (n, length), generator=g).tolist()]


def _build(name: str, kind: str, description: str, device="cpu", dtype=None, synthetic_cost=None, **options):
    if options:
        raise TypeError(f"pair {name!r} takes no options {sorted(options)}")
    from harness.models.hf_pair import resolve_dtype

    dtype = resolve_dtype(dtype)  # None -> float32; names such as "bf16" accepted; unknown names: clear error
    target, draft = toy_models(kind, torch.float32 if dtype == "auto" else dtype)
    meta = {"kind": kind, "alpha_mean_random_contexts": toy.mean_alpha(target, draft)}
    # Copies, so a caller that adds hooks (synthetic cost) or moves devices never alters the cache.
    target, draft = copy.deepcopy(target).to(device), copy.deepcopy(draft).to(device)
    if synthetic_cost is not None:
        target_s, draft_s = synthetic_cost
        toy.add_synthetic_cost(target, target_s)
        toy.add_synthetic_cost(draft, draft_s)
        meta["synthetic_cost_s"] = {"target": target_s, "draft": draft_s}
    pieces = name == "toy-pieces"
    return ModelPair(name=name, target=target, draft=draft, vocab_size=TOY_VOCAB, description=description,
                     prompts=_letter_prompts() if pieces else toy_prompts(), meta=meta,
                     tokenizer=pieces_tokenizer() if pieces else None)


def _spec(name: str, kind: str, description: str) -> PairSpec:
    return PairSpec(name, functools.partial(_build, name, kind, description), description, always_available, ("toy",))


PAIRS = [
    _spec("toy", "0.7", "1-layer Llama, V=16, draft = noisy copy, mean alpha ~0.7"),
    _spec("toy-high", "0.9", "1-layer Llama, V=16, mean alpha ~0.9"),
    _spec("toy-low", "0.2", "1-layer Llama, V=16, mean alpha ~0.2"),
    _spec("toy-anti", "anti", "1-layer Llama, V=16, draft logits = -target logits (alpha ~0.06)"),
    _spec("toy-same", "1.0", "1-layer Llama, V=16, draft identical to target (alpha = 1)"),
    _spec("toy-eos", "eos", "toy with an EOS id = the target's favourite first token (EOS inside draft blocks)"),
    _spec("toy-pieces", "0.7", "toy with a byte-level tokenizer whose pieces are not all distinct (text-piece ids)"),
    _spec("toy-tied", "tied", "1-layer Llama, V=16, exactly tied logit pairs (greedy tie-breaks)"),
    *(_spec(f"const-a{a}", f"const-a{a}", f"context-free laws with sum min(p,q) = {a} exactly (Llama, V=16)")
      for a in CONSTANT_ALPHAS),
]
