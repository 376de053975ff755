"""One KV cache for a whole batch of ragged rows: every active row advances in the same forward pass.

Layout. The cache holds, per layer, keys/values [B, H, W, D] for the B rows the runner last served, and
`valid` [B, W] says which of the W columns are live for each row. A row's live columns, left to right,
hold its tokens at positions 0, 1, 2, ... (RoPE / learned positions are applied when a key is written,
from explicit position ids, so a key's column index carries no meaning; only the mask does).

One call `logits(rows, seqs, n_last)`:
1. each row keeps the longest prefix its cache shares with its new sequence (at most len − n_last
   tokens); its later columns are masked dead — a rejected draft's keys are never attended again;
2. the rows' new tokens (k_b of them) go into one block of width K = max k_b, *left*-padded, so every
   row's last real token sits in the last column and `logits_to_keep = n_last` returns exactly the
   logits the caller wants;
3. an explicit 4-D additive mask lets a real token see its row's live cache columns and the real block
   tokens before it; a pad token sees only itself (a query that sees nothing would give NaN, and
   0 · NaN poisons every row that later masks that column).
Dead columns accumulate (a rejected draft, the pads); when they outnumber the live ones the cache is
compacted (each row's live columns gathered to the right). Rows that leave the batch are dropped from
the cache; a row the cache has not seen (or whose prefix differs from the start) is prefilled.
The first call shares the prefix common to all rows (the prompt, in the harness) by prefilling it
once and copying its keys/values to every row.

The one-row `CachedRunner` (specdec_ref/runners.py) is the oracle this runner is tested against.
Only full-attention models with eager or SDPA attention take a custom 4-D mask the same way; other
models (sliding windows, flash attention, models needing the full context) use `CachedRunner`.
"""

from __future__ import annotations

import torch

COMPACT_SLACK = 8  # dead columns tolerated before compacting, beyond the live width


def batchable(model) -> bool:
    """Can this model take a per-row cache layout through an explicit 4-D mask and position ids?"""
    config = getattr(model, "config", None)
    if config is None or getattr(model, "specdec_needs_full_context", False):
        return False
    if hasattr(config, "get_text_config"):
        config = config.get_text_config(decoder=True)
    if getattr(config, "sliding_window", None) or any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return False
    return getattr(config, "_attn_implementation", None) in ("eager", "sdpa")


class BatchedCache:
    """Per-row bookkeeping around one DynamicCache for a batch (see the module docstring)."""

    def __init__(self):
        self.cache = None  # transformers DynamicCache, layers [B, H, W, D]
        self.order: list[int] = []  # row id held in each batch slot
        self.tokens: list[torch.Tensor] = []  # per slot: the tokens whose keys are live
        self.valid: torch.Tensor | None = None  # [B, W] bool

    def select(self, rows: list[int], device) -> None:
        """Make the batch slots exactly `rows` (dropping rows that left, adding empty slots for new ones)."""
        if rows == self.order:
            return
        slot = {r: i for i, r in enumerate(self.order)}
        empty = len(self.order)  # index of an all-dead slot appended below
        index = torch.tensor([slot.get(r, empty) for r in rows], device=device)
        if self.cache is not None:
            self._gather_batch(index)
            self.valid = torch.cat([self.valid, self.valid.new_zeros(1, self.valid.shape[1])])[index]
        self.tokens = [self.tokens[slot[r]] if r in slot else seq_empty(device) for r in rows]
        self.order = list(rows)

    def _gather_batch(self, index: torch.Tensor) -> None:
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)  # [B, H, W, D]
                setattr(layer, name, torch.cat([t, t.new_zeros(1, *t.shape[1:])])[index])

    def keep(self, seqs: list[torch.Tensor], n_last: int) -> torch.Tensor:
        """Per row, how many leading tokens of its new sequence the cache already holds -> [B]."""
        out = []
        for cached, seq in zip(self.tokens, seqs, strict=True):
            n = min(len(cached), len(seq) - n_last)
            differ = (cached[:n] != seq[:n]).nonzero() if n > 0 else None
            out.append(0 if n <= 0 else (int(differ[0]) if len(differ) else n))
        return torch.tensor(out, dtype=torch.long)

    def truncate(self, keep: torch.Tensor) -> None:
        """Kill every live column after each row's first keep[b]; compact if the dead ones dominate."""
        if self.valid is None:
            return
        keep = keep.to(self.valid.device)
        self.valid &= self.valid.cumsum(1) <= keep.unsqueeze(1)
        live = int(self.valid.sum(1).max()) if len(keep) else 0
        if self.valid.shape[1] > 2 * live + COMPACT_SLACK:
            self.compact(live)

    def compact(self, width: int) -> None:
        """Gather each row's live columns to the right end of a [B, width] layout."""
        n_live = self.valid.sum(1, keepdim=True)  # [B, 1]
        # stable sort puts dead columns first, live ones after in their original order
        order = torch.sort(self.valid.to(torch.int8), dim=1, stable=True).indices[:, -width:] if width else \
            self.valid.new_zeros(len(self.valid), 0, dtype=torch.long)
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)  # [B, H, W, D]
                idx = order[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3])
                setattr(layer, name, t.gather(2, idx))
        self.valid = torch.arange(width, device=self.valid.device).unsqueeze(0) >= width - n_live

    def share_prefix(self, model, seqs: list[torch.Tensor], n_last: int, forward) -> None:
        """Empty cache, several rows: prefill their common prefix once and copy it to every row."""
        if self.cache is not None or len(seqs) < 2:
            return
        limit = min(len(s) for s in seqs) - n_last
        first = seqs[0][:limit]
        same = torch.stack([s[:limit] == first for s in seqs]).all(0) if limit > 0 else first.new_zeros(0, dtype=torch.bool)
        n = int(same.logical_not().nonzero()[0]) if (~same).any() else int(limit)
        if n < 2:
            return
        self.cache = forward(first[:n].unsqueeze(0), None)
        B = len(seqs)
        for layer in self.cache.layers:
            layer.keys = layer.keys.expand(B, -1, -1, -1).contiguous()
            layer.values = layer.values.expand(B, -1, -1, -1).contiguous()
        self.valid = torch.ones(B, n, dtype=torch.bool, device=first.device)
        self.tokens = [first[:n]] * B

    def append_block(self, seqs: list[torch.Tensor], keep: torch.Tensor):
        """-> (input ids [B, K], position ids [B, K], block validity [B, K]) for the new tokens, left-padded."""
        device = seqs[0].device
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        new = lengths - keep
        K = int(new.max())
        ids = torch.zeros(len(seqs), K, dtype=torch.long, device=device)
        for b, seq in enumerate(seqs):
            ids[b, K - int(new[b]):] = seq[int(keep[b]):]
        col = torch.arange(K).unsqueeze(0)  # [1, K]
        real = col >= (K - new).unsqueeze(1)  # [B, K]
        positions = (keep.unsqueeze(1) + col - (K - new).unsqueeze(1)).clamp_min(0)
        return ids, positions.to(device), real.to(device)

    def mask(self, real: torch.Tensor, dtype) -> torch.Tensor:
        """Additive mask [B, 1, K, W + K]: cache columns live for the row, causal real block tokens;
        a pad query sees only itself."""
        B, K = real.shape
        past = self.valid if self.valid is not None else real.new_zeros(B, 0)
        causal = torch.ones(K, K, dtype=torch.bool, device=real.device).tril()
        block = causal.unsqueeze(0) & real.unsqueeze(1) & real.unsqueeze(2)  # real query sees real keys <= it
        block |= torch.eye(K, dtype=torch.bool, device=real.device).unsqueeze(0) & ~real.unsqueeze(2)
        seen_past = past.unsqueeze(1) & real.unsqueeze(2)  # [B, K, W]
        allowed = torch.cat([seen_past, block], dim=2).unsqueeze(1)
        return torch.zeros(allowed.shape, dtype=dtype, device=real.device).masked_fill(~allowed, torch.finfo(dtype).min)

    def record(self, seqs: list[torch.Tensor], real: torch.Tensor) -> None:
        self.valid = real if self.valid is None else torch.cat([self.valid, real], dim=1)
        self.tokens = list(seqs)


def seq_empty(device) -> torch.Tensor:
    return torch.zeros(0, dtype=torch.long, device=device)
