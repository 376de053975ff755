"""How next-token logits are obtained from a transformers causal LM, for ragged per-row sequences.

Three strategies behind one method, `logits(rows, seqs, n_last)`:
- `CachedRunner`: one KV cache per row. Before each call the cache is cropped to the longest common
  prefix of what it holds and the new sequence, so entries for rejected drafts never survive
  (stale cache entries after a rejection were a real bug: vLLM PR #9730). Rows run one at a time.
- `BatchedRunner`: one KV cache for the whole batch with per-row live columns (specdec_ref/batched.py):
  all rows advance in one forward pass per call; the one-row `CachedRunner` is its oracle.
- `RecomputeRunner`: no cache; all rows in one right-padded batch, every position recomputed.
  Right padding is invisible to a causal model at the real positions. Cheap for short sequences
  (toy models, statistical tests with thousands of rows) and the oracle the cache is tested against.
Both time themselves (device-synchronized) and count calls.
"""

from __future__ import annotations

import functools
import inspect
import time

import torch

from specdec_ref.batched import BatchedCache, batchable
from specdec_ref.errors import SpecDecInputError


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def model_device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


def output_width(model) -> int:
    """Number of logits the model emits per position (its vocabulary as the sampler sees it)."""
    config = getattr(model, "config", None)
    width = getattr(config, "vocab_size", None)
    if width is None and hasattr(config, "get_text_config"):
        width = getattr(config.get_text_config(), "vocab_size", None)
    if width is None:
        raise SpecDecInputError(f"cannot tell the vocabulary size of {type(model).__name__}: config.vocab_size is missing")
    return int(width)


def context_length(model) -> int | None:
    config = getattr(model, "config", None)
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class _TimedRunner:
    def __init__(self, model, name: str):
        self.model = model
        self.name = name
        self.device = model_device(model)
        self.width = output_width(model)
        self.calls = 0  # forward passes of the whole batch (one "model call" in speedup accounting)
        self.seconds = 0.0

    def logits(self, rows: list[int], seqs: list[torch.Tensor], n_last: int) -> torch.Tensor:
        """Logits [len(rows), n_last, V] predicting the token after each of the last n_last positions."""
        _sync(self.device)
        start = time.perf_counter()
        out = self._logits(rows, seqs, n_last)
        _sync(self.device)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return out[..., : self.width]

    def _logits(self, rows, seqs, n_last):  # pragma: no cover - abstract
        raise NotImplementedError


@functools.cache
def _cache_kwarg(model_class) -> str:
    """transformers 5 renamed `past_key_values` to `cache`; pass whichever the model's forward takes."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


@functools.cache
def _accepts_logits_to_keep(model_class) -> bool:
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


class CachedRunner(_TimedRunner):
    """One DynamicCache per row, cropped to the common prefix before every call."""

    def __init__(self, model, name: str, n_rows: int):
        super().__init__(model, name)
        self.caches: list = [None] * n_rows
        self.cached: list[torch.Tensor | None] = [None] * n_rows  # tokens whose keys/values are cached

    def _logits(self, rows, seqs, n_last):
        from transformers import DynamicCache

        outs = []
        for row, seq in zip(rows, seqs, strict=True):
            keep = self._common_prefix(row, seq, limit=len(seq) - n_last)
            cache = self.caches[row]
            if cache is None or keep == 0:
                cache = DynamicCache()
            elif cache.get_seq_length() > keep:
                cache.crop(keep - cache.get_seq_length())  # negative: number of tokens to drop
            new = seq[keep:].unsqueeze(0)  # [1, L - keep]
            attention_mask = torch.ones(1, len(seq), dtype=torch.long, device=seq.device)
            with torch.inference_mode():
                result = self.model(input_ids=new, attention_mask=attention_mask, use_cache=True,
                                    **{_cache_kwarg(type(self.model)): cache})
            self.caches[row] = cache  # updated in place by the forward pass
            self.cached[row] = seq
            outs.append(result.logits[0, -n_last:])
        return torch.stack(outs)

    def _common_prefix(self, row: int, seq: torch.Tensor, limit: int) -> int:
        cached = self.cached[row]
        if cached is None:
            return 0
        n = min(len(cached), len(seq), limit)
        if n <= 0:
            return 0
        differ = (cached[:n] != seq[:n]).nonzero()
        return int(differ[0]) if len(differ) else n


class RecomputeRunner(_TimedRunner):
    """No cache: one right-padded batch, full recomputation every call."""

    def _logits(self, rows, seqs, n_last):
        lengths = torch.tensor([len(s) for s in seqs], device=self.device)
        width = int(lengths.max())
        batch = torch.zeros(len(seqs), width, dtype=torch.long, device=self.device)
        mask = torch.zeros_like(batch)
        for i, seq in enumerate(seqs):
            batch[i, : len(seq)] = seq
            mask[i, : len(seq)] = 1
        # Only the last `keep` positions are needed: models that accept `logits_to_keep` skip the LM
        # head elsewhere (a [B, W, V] logits tensor is most of the cost for a big vocabulary).
        keep = width - int(lengths.min()) + n_last
        extra = {"logits_to_keep": keep} if _accepts_logits_to_keep(type(self.model)) else {}
        with torch.inference_mode():
            logits = self.model(input_ids=batch, attention_mask=mask, use_cache=False, **extra).logits  # [B, W', V]
        # position L_b - n_last + j predicts the token after the (L_b - n_last + j)-th real token
        offset = width - logits.shape[1]  # logits cover positions offset..width-1
        index = (lengths - n_last - offset).unsqueeze(1) + torch.arange(n_last, device=self.device)  # [B, n_last]
        return logits.gather(1, index.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))


class BatchedRunner(_TimedRunner):
    """All rows in one forward per call over one shared cache (layout: specdec_ref/batched.py)."""

    def __init__(self, model, name: str):
        super().__init__(model, name)
        self.state = BatchedCache()
        self.dtype = model.get_input_embeddings().weight.dtype

    def _logits(self, rows, seqs, n_last):
        state = self.state
        state.select(list(rows), self.device)
        state.share_prefix(self.model, seqs, n_last, self._prefill)
        keep = state.keep(seqs, n_last)
        state.truncate(keep)
        ids, positions, real = state.append_block(seqs, keep)  # [A, K] each
        logits = self._forward(ids, positions, state.mask(real, self.dtype), n_last)
        state.record(seqs, real)
        return logits

    def _prefill(self, ids: torch.Tensor, _mask) -> object:  # ids [1, n]
        from transformers import DynamicCache

        self.state.cache = DynamicCache()
        self._forward(ids, None, torch.ones_like(ids), 1)
        return self.state.cache

    def _forward(self, ids, positions, mask, n_last) -> torch.Tensor:
        """ids/positions [A, K], mask [A, 1, K, W+K] additive (or 2-D ones) -> logits [A, n_last, V]."""
        from transformers import DynamicCache

        if self.state.cache is None:
            self.state.cache = DynamicCache()
        kwargs = {"logits_to_keep": n_last} if _accepts_logits_to_keep(type(self.model)) else {}
        if positions is not None:
            kwargs["position_ids"] = positions
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, use_cache=True,
                             **{_cache_kwarg(type(self.model)): self.state.cache}, **kwargs)
        return out.logits[:, -n_last:]


STRATEGIES = ("batched", "cache", "recompute")


def make_runner(model, name: str, n_rows: int, strategy: str) -> _TimedRunner:
    """strategy: 'batched' (one cache for the batch), 'cache' (one KV cache per row) or 'recompute'.
    Models that need the full context every call (attribute `specdec_needs_full_context`, e.g. an
    n-gram draft) always recompute; 'batched' falls back to per-row caches for models whose attention
    cannot take the batched layout (specdec_ref.batched.batchable) and for a single row."""
    if strategy not in STRATEGIES:
        raise SpecDecInputError(f"cache strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if strategy == "recompute" or getattr(model, "specdec_needs_full_context", False):
        return RecomputeRunner(model, name)
    if strategy == "batched" and n_rows > 1 and batchable(model):
        return BatchedRunner(model, name)
    return CachedRunner(model, name, n_rows)
