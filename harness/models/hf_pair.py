"""Model pairs built from transformers checkpoints that the user brings (`--target PATH --draft PATH`).

Everything here is offline: checkpoints are local directories (or already in the local Hugging Face
cache); nothing is ever downloaded. Loading failures become one-line `HarnessError`s, not tracebacks
from deep inside transformers.

Notation (Leviathan et al. 2023, https://arxiv.org/abs/2211.17192): p = target, q = draft.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from harness.errors import HarnessError
from harness.models.pair import ModelPair
from harness.prompts import PROMPT_SET, encode_prompts, load_prompts

# Files whose presence means a checkpoint directory carries its own tokenizer.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
           "half": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def resolve_dtype(dtype: Any, *, device: str = "cpu", device_map: Any = None) -> Any:
    """A torch dtype (or "auto") from None / a torch dtype / a name such as "bf16".

    None means float32 on a plain CPU load (half precision is slow on most CPUs) and the checkpoint's
    own dtype ("auto") when loading onto accelerators.
    """
    if dtype is None:
        return torch.float32 if device == "cpu" and device_map is None else "auto"
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    raise HarnessError(f"unknown dtype {dtype!r}; use one of: auto, {', '.join(sorted(_DTYPES))}")


def load_causal_lm(name_or_path: str | Path, *, device: str = "cpu", dtype: Any = None, device_map: Any = None,
                   gguf_file: str | None = None) -> tuple[Any, Any]:
    """Load a causal LM (in eval mode) and its tokenizer (None when the checkpoint has none), offline.

    `device_map` is passed to transformers/accelerate (e.g. "auto" to shard over several GPUs); without
    it the model is moved to `device`. A name that is not a local directory is looked up only in the
    local Hugging Face cache.
    """
    from transformers import AutoModelForCausalLM

    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix == ".gguf" and gguf_file is None:
        path, gguf_file = path.parent, path.name
    elif path.exists() and not path.is_dir():
        raise HarnessError(f"{str(name_or_path)!r} is a file; pass the checkpoint's directory")
    source = str(path) if path.is_dir() else str(name_or_path)
    torch_dtype = resolve_dtype(dtype, device=device, device_map=device_map)
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, device_map=device_map,
                                                     gguf_file=gguf_file, local_files_only=True)
    except Exception as exc:  # any failure here means a bad checkpoint: reported in one line
        if not path.is_dir():
            raise HarnessError(f"cannot load {str(name_or_path)!r}: no such local directory, and it is not in the "
                               "local Hugging Face cache; there is no hub access here: pass a local directory "
                               "(e.g. one written by save_pretrained)") from exc
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise HarnessError(f"cannot load a causal LM from {str(path)!r}: {type(exc).__name__}: {first_line}") from exc
    if device_map is None:
        model = model.to(device)
    return model.eval(), _load_tokenizer(source, path, gguf_file)


def _load_tokenizer(source: str, path: Path, gguf_file: str | None) -> Any:
    from transformers import AutoTokenizer

    if path.is_dir() and gguf_file is None and not any((path / f).exists() for f in _TOKENIZER_FILES):
        return None
    try:
        return AutoTokenizer.from_pretrained(source, gguf_file=gguf_file, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # weights without a usable tokenizer: the pair then runs on token ids only


def output_width(model: Any) -> int:
    """Number of logits the model emits per position (its lm_head rows, padding included)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    width = getattr(head, "out_features", None)  # nn.Linear and torch's quantized Linear both have it
    if width is None and head is not None and isinstance(getattr(head, "weight", None), torch.Tensor):
        width = head.weight.shape[0]
    return int(width if width is not None else model.config.vocab_size)


def reconcile_vocab(target: Any, draft: Any, tokenizer_size: int | None) -> int:
    """Make p and q cover the same token ids; return that common vocabulary size.

    Checkpoints often pad their embedding matrix past the tokenizer (to a multiple of 64 or 128), so a
    target and a draft with the same tokenizer can emit logits of different widths. If both widths are
    at least `tokenizer_size`, the padding rows are cut off (`resize_token_embeddings`, in place) so both
    emit exactly `tokenizer_size` logits. Anything else is a genuinely different vocabulary, and an error.
    Equal widths are left alone (no renormalization of either law).
    """
    w_target, w_draft = output_width(target), output_width(draft)
    if w_target == w_draft:
        return w_target
    sizes = f"target emits {w_target} logits, draft emits {w_draft}"
    if tokenizer_size is None:
        raise HarnessError(f"vocabulary mismatch: {sizes}, and without a tokenizer size embedding padding cannot "
                           "be told apart from a different vocabulary (give the tokenizer size)")
    if min(w_target, w_draft) < tokenizer_size:
        raise HarnessError(f"the models have different vocabularies: {sizes}, but the tokenizer has "
                           f"{tokenizer_size} tokens; speculative decoding needs one shared vocabulary")
    for model, width in ((target, w_target), (draft, w_draft)):
        if width > tokenizer_size:
            model.resize_token_embeddings(tokenizer_size)
    return tokenizer_size


def _check_same_tokenizer(tok_target: Any, tok_draft: Any) -> None:
    if tok_target.get_vocab() == tok_draft.get_vocab():
        return
    v_t, v_d = tok_target.get_vocab(), tok_draft.get_vocab()
    differing = sorted(set(v_t.items()) ^ set(v_d.items()), key=lambda kv: kv[1])[:3]
    raise HarnessError(f"target and draft tokenizers differ ({len(v_t)} vs {len(v_d)} tokens; e.g. "
                       f"{', '.join(f'{t!r}->{i}' for t, i in differing)}): they must share one vocabulary")


def pair_from_checkpoints(target: str | Path, draft: str | Path, *, device: str = "cpu", dtype: Any = None,
                          device_map: Any = None, tokenizer_size: int | None = None) -> ModelPair:
    """The pair for `--target PATH --draft PATH`: both loaded offline, vocabularies reconciled.

    `tokenizer_size` overrides the tokenizer's length (needed only when neither checkpoint ships a tokenizer
    and their widths differ by padding).
    """
    target_model, tok_target = load_causal_lm(target, device=device, dtype=dtype, device_map=device_map)
    draft_model, tok_draft = load_causal_lm(draft, device=device, dtype=dtype, device_map=device_map)
    if tok_target is not None and tok_draft is not None:
        _check_same_tokenizer(tok_target, tok_draft)
    tokenizer = tok_target if tok_target is not None else tok_draft
    if tokenizer_size is None and tokenizer is not None:
        tokenizer_size = len(tokenizer)
    vocab_size = reconcile_vocab(target_model, draft_model, tokenizer_size)
    eos = tokenizer.eos_token_id if tokenizer is not None else target_model.config.eos_token_id
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    return ModelPair(
        name=f"{Path(target).name}+{Path(draft).name}",
        target=target_model,
        draft=draft_model,
        vocab_size=vocab_size,
        description=f"target {target}, draft {draft}",
        tokenizer=tokenizer,
        eos_token_id=eos,
        prompts=encode_prompts(tokenizer, load_prompts()) if tokenizer is not None else None,
        meta={"target_path": str(target), "draft_path": str(draft), "device": device,
              "device_map": None if device_map is None else str(device_map),
              "dtype": str(target_model.dtype), **({"prompt_set": PROMPT_SET} if tokenizer is not None else {})},
    )
