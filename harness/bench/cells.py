"""One benchmark cell: the unit that is measured, stored and skipped on a rerun.

Kinds of cell:
- `ar`      — the autoregressive baseline of a group (same pair, sampling, prompts, lengths, seeds, cost);
- `spec`    — the reference's speculative generation at one γ (its speedup is over its group's `ar` cell,
              measured in the same run just before it; with `interleave`, over the autoregressive baseline
              timed inside the cell, in rotation with it, so both see the same minutes of machine load);
- `compare` — reference and transformers assisted generation side by side at one γ, each with its own
              autoregressive baseline, all four timed in rotation within every repeat;
- `tokens`  — counts only (no timing): mean tokens per target call over many batched rows, for checking
              the Leviathan token formula.
A cell's id is a hash of everything that affects its numbers, so a finished cell is recognised by a rerun.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

CELL_KINDS = ("ar", "spec", "compare", "tokens")
_LATER_FIELDS = {"prompt_select": None, "interleave": False}  # added later: their defaults stay out of the id
METHODS = {"ar": ("ar",), "spec": ("ref",), "compare": ("ar", "ref", "hf_ar", "hf"), "tokens": ("ref",)}


@dataclasses.dataclass(frozen=True)
class Cell:
    kind: str  # one of CELL_KINDS
    pair: str  # registered pair name, or "TARGET+DRAFT" for a checkpoint pair
    gamma: int  # drafted tokens per step (0 for the autoregressive baseline)
    temperature: float  # 0 = greedy
    top_k: int | None
    top_p: float | None
    prompts: int  # prompts per repeat, each generated with B = 1 (tokens cells: rows per batch)
    max_new_tokens: int  # new tokens per prompt (clamped to the model's context when measured)
    repeats: int  # timed repeats (tokens cells: 1)
    warmup: int  # untimed runs of every method before the repeats
    synthetic_cost_ms: tuple[float, float] | None  # (target, draft) forward padded to this wall time
    device: str
    dtype: str | None  # None = the pair's default
    seed: int
    threads: int | None  # torch CPU threads while measuring (None = leave torch's setting)
    min_row_steps: int = 0  # tokens cells: stop after this many full-γ row-steps
    checkpoints: tuple[str, str] | None = None  # (target, draft) directories for a checkpoint pair
    prompt_select: tuple[str, ...] | None = None  # kinds or ids of the pair's default prompts (None: all of them)
    interleave: bool = False  # spec cells: time the autoregressive baseline inside the cell, in rotation

    @property
    def methods(self) -> tuple[str, ...]:
        if self.kind == "spec" and self.interleave:
            return ("ar", "ref")
        return METHODS[self.kind]

    @property
    def id(self) -> str:
        """Readable prefix + hash of every field (a changed setting is a different cell). Fields added after
        records were written are hashed only when set, so those records keep their ids."""
        fields = {k: v for k, v in dataclasses.asdict(self).items() if _LATER_FIELDS.get(k, object()) != v}
        blob = json.dumps(fields, sort_keys=True)
        digest = hashlib.sha1(blob.encode()).hexdigest()[:10]
        return f"{self.kind}-{self.pair}-g{self.gamma}-t{self.temperature:g}-{digest}"

    @property
    def label(self) -> str:
        return f"{self.kind} {self.pair} γ={self.gamma} T={self.temperature:g}"

    def baseline(self) -> Cell:
        """The group's autoregressive cell (same everything, γ = 0); an interleaved spec cell is its own."""
        if self.kind == "spec" and self.interleave:
            return self
        return dataclasses.replace(self, kind="ar", gamma=0)

    def group(self) -> tuple:
        """Cells of one group differ only in kind and γ (rows of one curve in the plots)."""
        d = dataclasses.asdict(self)
        d.pop("kind")
        d.pop("gamma")
        return tuple(sorted((k, json.dumps(v)) for k, v in d.items()))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Cell:
        d = dict(d)
        for key in ("synthetic_cost_ms", "checkpoints", "prompt_select"):
            if d.get(key) is not None:
                d[key] = tuple(d[key])
        return cls(**d)


def sampling_label(temperature: float, top_k: int | None, top_p: float | None) -> str:
    parts = ["greedy" if temperature == 0 else f"T={temperature:g}"]
    if temperature != 0 and top_k is not None:
        parts.append(f"top-k {top_k}")
    if temperature != 0 and top_p is not None:
        parts.append(f"top-p {top_p:g}")
    return ", ".join(parts)
