"""How next-token logits are obtained from a transformers causal LM, for ragged per-row sequences.

Four strategies behind one method, `logits(rows, seqs, n_last)`:
- `CachedRunner`: one KV cache per row. Before each call the cache is cropped to the longest common
  prefix of what it holds and the new sequence, so entries for rejected drafts never survive
  (stale cache entries after a rejection were a real bug: vLLM PR #9730). Rows run one at a time.
- `StatefulRunner`: for caches a crop cannot put back (recurrent / SSM / conv states, sliding windows:
  hybrid, recurrent and sliding-window models). One cache per row, built by the model itself; a snapshot
  (deep copy) is kept at the common prefix of every call, and a call whose sequence leaves the cached one
  restores the latest snapshot at or before the common prefix and recomputes from there (never a state
  that saw a rejected draft: vLLM #39273, mlx-lm #846, ik_llama.cpp #1754).
- `BatchedRunner`: one KV cache for the whole batch with per-row live columns (specdec_ref/batched.py):
  all rows advance in one forward pass per call; the one-row `CachedRunner` is its oracle.
- `RecomputeRunner`: no cache; all rows in one right-padded batch, every position recomputed.
  Right padding is invisible to a causal model at the real positions. Cheap for short sequences
  (toy models, statistical tests with thousands of rows) and the oracle the cache is tested against.
Both time themselves (device-synchronized) and count calls.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
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
def cache_kwarg(model_class) -> str:
    """transformers 5 renamed `past_key_values` to `cache`; pass whichever the model's forward takes."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


@functools.cache
def _accepts_logits_to_keep(model_class) -> bool:
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


def returned_cache(output):
    """The cache a forward pass returned (transformers 5 calls it `cache`, 4 `past_key_values`)."""
    for name in ("cache", "past_key_values", "cache_params"):
        value = getattr(output, name, None)
        if value is not None:
            return value
    return None


@dataclasses.dataclass(frozen=True)
class CacheCapabilities:
    """What a model's own cache can do, probed once per model and dtype (`cache_capabilities`)."""

    layers: tuple[str, ...]  # the cache's layer classes, e.g. ("LinearAttentionLayer", "DynamicLayer")
    croppable: bool  # every layer a full-attention key/value layer: crop() restores it exactly
    multi_token_exact: bool  # a cached forward of several new tokens gives the full forward's logits
    max_error: float  # largest |logit difference| of the probe's cached continuation against the full pass


PROBE_PREFIX, PROBE_NEW = 11, 9  # the probe's prefill and continuation: past an 8-token window or SSM chunk


def _plain_kv_layer(layer) -> bool:
    """A full-attention key/value layer whose crop is exact (no window, no recurrent or conv state)."""
    return (bool(getattr(layer, "is_croppable", True)) and not getattr(layer, "is_sliding", False)
            and not hasattr(layer, "conv_states") and not hasattr(layer, "recurrent_states"))


def _probe_tolerance(dtype: torch.dtype, scale: float) -> float:
    """Logit agreement expected of an exact cached continuation: rounding of the model's dtype, with room
    for kernels that compute internally in float32 (a gated delta rule in float64 agrees to ~3e-5)."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 1e-7
    return max(1e-3, 200 * eps) * (1.0 + scale)


def cache_capabilities(model) -> CacheCapabilities:
    """Probe the model's own cache: build it (no cache passed in), read its layer classes, and compare a cached
    multi-token continuation with the full forward. The fast crop paths are chosen by what this finds, never by
    the model's name. Kept on the model, per dtype."""
    dtype = model.get_input_embeddings().weight.dtype if hasattr(model, "get_input_embeddings") else torch.float32
    known = model.__dict__.setdefault("_specdec_cache_capabilities", {})
    if dtype in known:
        return known[dtype]
    device = model_device(model)
    width = output_width(model)
    n = PROBE_PREFIX + PROBE_NEW
    ids = (torch.arange(n, device=device) * 7 + 3).remainder(width).unsqueeze(0)  # [1, n] a fixed probe
    kwarg = cache_kwarg(type(model))
    with torch.inference_mode():
        full = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, PROBE_PREFIX:].float()
        first = model(input_ids=ids[:, :PROBE_PREFIX], attention_mask=torch.ones_like(ids[:, :PROBE_PREFIX]),
                      use_cache=True)
        cache = returned_cache(first)
        layers = tuple(type(layer).__name__ for layer in getattr(cache, "layers", ()))
        croppable = cache is not None and hasattr(cache, "crop") and all(
            _plain_kv_layer(layer) for layer in getattr(cache, "layers", ()))
        if cache is None:
            error = float("inf")
        else:
            rest = model(input_ids=ids[:, PROBE_PREFIX:], attention_mask=torch.ones_like(ids),
                         position_ids=torch.arange(PROBE_PREFIX, n, device=device).unsqueeze(0), use_cache=True,
                         **{kwarg: cache})
            error = float((rest.logits[0].float() - full).abs().max())
    caps = CacheCapabilities(layers, bool(croppable), error <= _probe_tolerance(dtype, float(full.abs().max())),
                             error)
    known[dtype] = caps
    return caps


PASSES_KEPT = 2048  # StatefulRunner's shared passes (per runner, least recently used out)
PATH_ATTRIBUTE = "_specdec_path"  # on a StatefulRunner cache: the id of the chain of passes that built it


class StatefulRunner(_TimedRunner):
    """One model-built cache per row with snapshot / restore (see the module docstring).

    Each call keeps the longest prefix its row's cached sequence shares with the new one (at most len − n_last
    tokens). If that is all of the cached sequence the cache simply continues; otherwise the latest snapshot at
    or before the common prefix is copied back and the tokens after it are recomputed. A snapshot is taken at
    the common prefix of every call, so the next call's rollback point (never before this call's common prefix:
    accepted tokens stay accepted) always has one. Models whose cached multi-token forward is not exact
    (`CacheCapabilities.multi_token_exact`) are fed one token at a time after the first pass."""

    def __init__(self, model, name: str, n_rows: int, capabilities: CacheCapabilities | None = None):
        super().__init__(model, name)
        self.capabilities = capabilities or cache_capabilities(model)
        self.caches: list = [None] * n_rows
        self.cached: list[torch.Tensor | None] = [None] * n_rows
        self.snapshots: list[dict[int, object]] = [{} for _ in range(n_rows)]
        # Shared passes. A cache's state is a pure function of the forwards that built it (a first pass of these
        # tokens, then these tokens at this position, ...): each distinct chain gets an id (`paths`), carried on
        # the cache as PATH_ATTRIBUTE (deep copies keep it), and the pass's result is kept by that id (`passes`:
        # logits, the cache as the pass left it; each use gets its own copy; least recently used first out). Rows
        # that share a prompt, or a prompt and drafts, then share the forwards: the same numbers, computed once.
        # First passes are shared in every subclass; continuations only in this class (a subclass that changes a
        # cache in place, as the planted bugs do, would be served the unchanged chain's result).
        self.paths: dict[tuple, int] = {}
        self.passes: collections.OrderedDict[int, tuple[torch.Tensor, object]] = collections.OrderedDict()
        self.share_continuations = type(self) is StatefulRunner

    def _logits(self, rows, seqs, n_last):
        return torch.stack([self._row_logits(row, seq, n_last) for row, seq in zip(rows, seqs, strict=True)])

    def _row_logits(self, row: int, seq: torch.Tensor, n_last: int) -> torch.Tensor:  # -> [n_last, V]
        keep = CachedRunner._common_prefix(self, row, seq, limit=len(seq) - n_last)
        start, cache = self._resume(row, keep)
        snapshots = {s: c for s, c in self.snapshots[row].items() if start <= s <= keep}
        if start < keep:  # advance to the common prefix first, so the snapshot sits exactly there
            cache = self._feed(cache, seq[:keep], start)[1]
            start = keep
        if start > 0 and start not in snapshots:
            snapshots[start] = copy.deepcopy(cache)
        logits, cache = self._feed(cache, seq, start)
        self.caches[row], self.cached[row], self.snapshots[row] = cache, seq, snapshots
        return logits[-n_last:]

    def _resume(self, row: int, keep: int) -> tuple[int, object]:
        """(length, cache) to continue from: the live cache when it holds exactly the common prefix, else a
        copy of the latest snapshot at or before it (0, None: start over)."""
        cached = self.cached[row]
        if cached is not None and len(cached) == keep and self.caches[row] is not None:
            return keep, self.caches[row]
        usable = [s for s in self.snapshots[row] if s <= keep]
        if not usable:
            return 0, None
        start = max(usable)
        return start, copy.deepcopy(self.snapshots[row][start])

    def _feed(self, cache, seq: torch.Tensor, start: int) -> tuple[torch.Tensor, object]:
        """Run seq[start:] on top of `cache` (which holds seq[:start]) -> (logits [len − start, V], cache)."""
        if start == 0 or cache is None:
            return self._first_pass(seq)
        step = len(seq) - start if self.capabilities.multi_token_exact else 1
        outs = []
        for begin in range(start, len(seq), step):
            cache, logits = self._forward(cache, seq, begin, min(begin + step, len(seq)))
            outs.append(logits)
        return torch.cat(outs), cache

    def _first_pass(self, seq: torch.Tensor) -> tuple[torch.Tensor, object]:
        """The model's own forward of all of seq with no cache -> (logits [len, V], the cache it built)."""
        path = self.paths.setdefault(("first", tuple(seq.tolist())), len(self.paths))
        known = self._recall(path)
        if known is not None:
            return known
        ids = seq.unsqueeze(0)
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
        cache = returned_cache(out)
        if cache is not None:
            self._remember(path, out.logits[0], cache)
        return out.logits[0], cache

    def _forward(self, cache, seq: torch.Tensor, begin: int, end: int) -> tuple[object, torch.Tensor]:
        """One cached forward of seq[begin:end] -> (cache, logits [end − begin, V]); explicit positions (a hybrid
        cache's first layer may not count tokens the way the attention layers need)."""
        parent = getattr(cache, PATH_ATTRIBUTE, None) if self.share_continuations else None
        path = None
        if parent is not None:
            path = self.paths.setdefault((parent, begin, tuple(seq[begin:end].tolist())), len(self.paths))
            known = self._recall(path)
            if known is not None:
                return known[1], known[0]
        device = seq.device
        with torch.inference_mode():
            out = self.model(input_ids=seq[begin:end].unsqueeze(0),
                             attention_mask=torch.ones(1, end, dtype=torch.long, device=device),
                             position_ids=torch.arange(begin, end, device=device).unsqueeze(0), use_cache=True,
                             **{cache_kwarg(type(self.model)): cache})
        cache = returned_cache(out) or cache
        if path is not None:
            self._remember(path, out.logits[0], cache)
        elif hasattr(cache, PATH_ATTRIBUTE):
            delattr(cache, PATH_ATTRIBUTE)  # no longer the chain it names
        return cache, out.logits[0]

    def _remember(self, path: int, logits: torch.Tensor, cache) -> None:
        setattr(cache, PATH_ATTRIBUTE, path)
        self.passes[path] = (logits, copy.deepcopy(cache))
        if len(self.passes) > PASSES_KEPT:
            self.passes.popitem(last=False)

    def _recall(self, path: int):
        """(logits, a copy of the cache) of a pass already made, or None."""
        known = self.passes.get(path)
        if known is None:
            return None
        self.passes.move_to_end(path)
        return known[0], copy.deepcopy(known[1])


class CachedRunner(_TimedRunner):
    """One KV cache per row (the model's own), cropped to the common prefix before every call."""

    def __init__(self, model, name: str, n_rows: int):
        super().__init__(model, name)
        self.caches: list = [None] * n_rows
        self.cached: list[torch.Tensor | None] = [None] * n_rows  # tokens whose keys/values are cached

    def _logits(self, rows, seqs, n_last):
        outs = []
        for row, seq in zip(rows, seqs, strict=True):
            keep = self._common_prefix(row, seq, limit=len(seq) - n_last)
            cache = self.caches[row]
            if cache is None or keep == 0:
                keep, cache = 0, None  # the model builds its own cache on the first pass
            elif cache.get_seq_length() > keep:
                cache.crop(keep - cache.get_seq_length())  # negative: number of tokens to drop
            new = seq[keep:].unsqueeze(0)  # [1, L - keep]
            attention_mask = torch.ones(1, len(seq), dtype=torch.long, device=seq.device)
            past = {} if cache is None else {cache_kwarg(type(self.model)): cache}
            with torch.inference_mode():
                result = self.model(input_ids=new, attention_mask=attention_mask, use_cache=True, **past)
            self.caches[row] = returned_cache(result) or cache  # updated in place by the forward pass
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
                             **{cache_kwarg(type(self.model)): self.state.cache}, **kwargs)
        return out.logits[:, -n_last:]


STRATEGIES = ("batched", "cache", "recompute")


def make_runner(model, name: str, n_rows: int, strategy: str) -> _TimedRunner:
    """strategy: 'batched' (one cache for the batch), 'cache' (one KV cache per row) or 'recompute'.
    Models that need the full context every call (attribute `specdec_needs_full_context`, e.g. an
    n-gram draft) always recompute; models whose own cache a crop cannot restore (cache_capabilities: recurrent,
    conv or sliding-window layers) get `StatefulRunner` whatever the strategy; 'batched' falls back to per-row
    caches for models whose attention cannot take the batched layout (specdec_ref.batched.batchable) and for a
    single row."""
    if strategy not in STRATEGIES:
        raise SpecDecInputError(f"cache strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if strategy == "recompute" or getattr(model, "specdec_needs_full_context", False):
        return RecomputeRunner(model, name)
    capabilities = cache_capabilities(model)
    if not capabilities.croppable:  # recurrent, conv or windowed state: snapshot / restore
        return StatefulRunner(model, name, n_rows, capabilities)
    if strategy == "batched" and n_rows > 1 and batchable(model):
        return BatchedRunner(model, name)
    return CachedRunner(model, name, n_rows)
