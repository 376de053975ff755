"""The faulty cache runners of the generation zoo (harness.mutants.generation): model runners in the shape of
specdec_ref.runners' that serve the logits a broken KV or prefix cache would. Each recomputes every call
(`RecomputeRunner`) over the content the faulty cache would hold:

- `StaleCacheRunner`: a per-row cache never cropped after a rejection (rejected drafts stay in the context);
- `LateStaleCacheRunner`: one that crops correctly for a row's first calls, then stops;
- `BoundaryStaleRunner`: a stale page entry at every PAGE-token block boundary;
- `PrefixKeyedRunner`: a prefix cache keyed by the first PAGE tokens only.
"""

from __future__ import annotations

import torch

from specdec_ref.runners import RecomputeRunner

Tensor = torch.Tensor

PAGE = 16  # the cache-block size the boundary mutants model


class StaleCacheRunner(RecomputeRunner):
    """A per-row "KV cache" that is never cropped after a rejection.

    Each row keeps the token content its cache would hold: tokens are appended as they are fed and
    rejected drafts are never removed, so later positions attend to them (and are shifted by them).
    A causal model's keys/values for that content equal a recomputation over it, so this is computed
    batched with the reference's RecomputeRunner over the stale content.
    """

    def __init__(self, model, name: str, n_rows: int):
        super().__init__(model, name)
        self.fed: list[Tensor | None] = [None] * n_rows  # the logical sequence last fed, per row
        self.content: list[Tensor | None] = [None] * n_rows  # what the stale cache holds, per row

    def _logits(self, rows, seqs, n_last):
        contents = []
        for row, seq in zip(rows, seqs, strict=True):
            fed, content = self.fed[row], self.content[row]
            common = _common_prefix(fed, seq) if fed is not None else 0
            if content is None or common > len(seq) - n_last:
                content = seq  # first call (or positions to re-score): a fresh fill
            else:
                content = torch.cat([content, seq[common:]])  # the bug: entries past `common` stay
            self.fed[row], self.content[row] = seq, content
            contents.append(content)
        return super()._logits(rows, contents, n_last)


def _common_prefix(a: Tensor, b: Tensor) -> int:
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if len(differ) else n


class BoundaryStaleRunner(RecomputeRunner):
    """At every verified position whose token lands on absolute index t ≡ 0 (mod PAGE) the logits are the
    previous position's (the law of index t − 1): a stale page entry at the block boundary."""

    def _logits(self, rows, seqs, n_last):
        extra = int(min(len(s) for s in seqs) > n_last)  # one more position on the left when there is one
        full = super()._logits(rows, seqs, n_last + extra)  # [A, n_last + extra, V]
        out = full[:, extra:].clone()
        for a, seq in enumerate(seqs):
            for i in range(n_last):
                index = len(seq) - n_last + i + 1  # the absolute index of the token these logits predict
                if index % PAGE == 0 and (extra or i > 0):
                    out[a, i] = full[a, i + extra - 1]
        return out


class LateStaleCacheRunner(StaleCacheRunner):
    """StaleCacheRunner whose rows crop correctly for their first `after` calls, then stop cropping."""

    after = 4

    def __init__(self, model, name: str, n_rows: int):
        super().__init__(model, name, n_rows)
        self.row_calls = [0] * n_rows

    def _logits(self, rows, seqs, n_last):
        for row in rows:
            self.row_calls[row] += 1
            if self.row_calls[row] <= self.after:  # still correct: the cache holds exactly the sequence
                self.fed[row], self.content[row] = None, None
        return super()._logits(rows, seqs, n_last)


class PrefixKeyedRunner(RecomputeRunner):
    """A prefix cache keyed by the first PAGE tokens only: a prompt whose first block equals an earlier
    row's (same length, different later tokens) is served that row's cached prompt."""

    def __init__(self, model, name: str, n_rows: int):
        super().__init__(model, name)
        self.prompt: list[Tensor | None] = [None] * n_rows  # what each row's prompt is served as
        self.length: list[int] = [0] * n_rows
        self.by_key: dict = {}

    def _logits(self, rows, seqs, n_last):
        served = []
        for row, seq in zip(rows, seqs, strict=True):
            if self.prompt[row] is None:  # first call: the prompt is the whole sequence
                key = (len(seq), tuple(seq[:PAGE].tolist())) if len(seq) > PAGE else None
                self.prompt[row] = self.by_key.setdefault(key, seq) if key else seq
                self.length[row] = len(seq)
            served.append(torch.cat([self.prompt[row], seq[self.length[row]:]]))
        return super()._logits(rows, served, n_last)
