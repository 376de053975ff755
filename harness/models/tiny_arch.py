"""Tiny random-init pairs of any transformers architecture, built offline from a config (no hub).

The target is `AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **config))` with a wide
initialisation (so its laws are neither flat nor one-hot); the draft is the same model with every weight
perturbed by Gaussian noise of `noise` times that weight's own standard deviation, so the two share the
vocabulary and the draft's acceptance is meaningful (neither ≈ 0 nor ≈ 1). Which architectures, configs and
noise levels are built is policy (suites/catalogues/architectures.py); this module only builds them.

MoE models get the eager experts implementation where transformers offers it: the grouped matmul kernel
refuses float64, the eager loop does not (so these pairs can be scored in float64 too).

Notation (Leviathan et al. 2023): p = target, q = draft.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import torch

from harness.models.pair import ModelPair


def _quiet_transformers() -> None:
    """The pure-PyTorch fallback kernels warn once per kernel that they are slow: true, and noise here."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()


def build_model(model_type: str, config: dict, *, seed: int, dtype: torch.dtype = torch.float32):
    """One random-init causal LM of `model_type` (eval mode) from `config` (passed to AutoConfig.for_model)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    _quiet_transformers()
    cfg = AutoConfig.for_model(model_type, **config)
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(cfg, experts_implementation="eager")
    except (ValueError, TypeError):  # not an MoE model, or one without a choice of experts kernel
        model = AutoModelForCausalLM.from_config(cfg)
    return model.to(dtype).eval()


def perturbed(model, *, noise: float, seed: int):
    """A copy of `model` with every floating weight w replaced by w + noise·std(w)·N(0, 1)."""
    draft = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            if param.is_floating_point() and param.numel() > 1:
                scale = float(param.float().std()) or 1.0
                param.add_(torch.randn(param.shape, generator=g, dtype=torch.float64).to(param.dtype) * noise * scale)
    return draft.eval()


@functools.cache
def _models(model_type: str, config_items: str, noise: float, seed: int, dtype: torch.dtype):
    target = build_model(model_type, json.loads(config_items), seed=seed, dtype=torch.float64 if dtype == torch.float64
                         else torch.float32)
    draft = perturbed(target, noise=noise, seed=seed + 1)
    return target.to(dtype), draft.to(dtype)


def _frozen(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def tiny_pair(name: str, model_type: str, config: dict, *, noise: float, seed: int = 0, device: str = "cpu",
              dtype: Any = None, description: str = "", prompts: list[list[int]] | None = None,
              meta: dict | None = None) -> ModelPair:
    """The pair `name`: target and draft of `model_type` built from `config` (models cached per process)."""
    dtype = dtype if isinstance(dtype, torch.dtype) else torch.float32
    target, draft = _models(model_type, _frozen(config), noise, seed, dtype)
    vocab = int(config["vocab_size"])
    return ModelPair(name=name, target=target.to(device), draft=draft.to(device), vocab_size=vocab,
                     description=description, eos_token_id=None, prompts=prompts,
                     meta={"model_type": model_type, "noise": noise, "seed": seed, **(meta or {})})


def wordpiece_tokenizer(vocab: int):
    """A tokenizer whose words t0 … t{vocab−1} are the ids 0 … vocab−1 (WordPiece, unknown = t0, no special tokens
    added): prompts can be given as text ("t1 t2 t3") and an engine given the same vocabulary
    (harness.models.gguf_convert) tokenizes alike."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0")


def save_pair(pair: ModelPair, folder, *, tokenizer: bool = False) -> tuple[str, str]:
    """Write target and draft with save_pretrained under folder/target and folder/draft (for --target/--draft);
    `tokenizer`: with `wordpiece_tokenizer` in both folders."""
    from pathlib import Path

    out = Path(folder)
    paths = []
    for role in ("target", "draft"):
        path = out / role
        getattr(pair, role).save_pretrained(path)
        if tokenizer:
            wordpiece_tokenizer(pair.vocab_size).save_pretrained(path)
        paths.append(str(path))
    return paths[0], paths[1]
