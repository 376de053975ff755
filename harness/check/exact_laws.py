"""Exact laws of a generation (docs/CONTRACT.md §1b): the ground truth by enumeration, on toy pairs (V ≤ 64).

The target alone with the shared processing (specdec_ref.processing), in float64: the exact law of every L-token
continuation of a prompt (`continuation_law`), and the implementation's continuations tested against it
(`joint_law_tests`: support, pooled Pearson and G on the likeliest sequences + the rest). `coarsen` and
`coarsen_law` give a law as an engine that reports only token classes sees it (harness.served.pieces).
"""

from __future__ import annotations

import numpy as np
import torch

from harness.check.sampler_tests import GATE_MIN_EXPECTED
from harness.check.settings import Setting
from harness.pairs import ModelPair
from harness.stats import TestResult, pooled_gtest, pooled_pearson, support_check
from specdec_ref.processing import History, process

MAX_JOINT_CELLS = 64  # joint-law omnibus tests: the 63 likeliest continuations + the rest
ENUMERATION_MAX_VOCAB = 64


def target64(pair: ModelPair):
    """A float64 copy of the target for exact conditionals (cached on the pair); float32 where a kernel refuses
    float64 (harness.models.precision: the reason is kept in pair.meta["score_precision_note"])."""
    if "_target64" not in pair.meta:
        from harness.models.precision import scoring_copy

        pair.meta["_target64"], pair.meta["score_precision_note"] = scoring_copy(pair.target)
    return pair.meta["_target64"]


def next_probs(model, seqs: torch.Tensor, setting: Setting, vocab: int, n_generated: int = 0, eos=(),
                order: str = "standard") -> torch.Tensor:
    """Processed next-token law after each full sequence in seqs [N, L] -> [N, V] float64.

    The last `n_generated` tokens of each sequence are the generated ones (penalties count them)."""
    with torch.inference_mode():
        logits = model(input_ids=seqs, attention_mask=torch.ones_like(seqs)).logits[:, -1, :vocab]
    history = History(seqs.cpu(), torch.full((len(seqs),), n_generated), tuple(sorted(eos)))
    return process(logits.double(), setting, history, order=order)


def continuation_law(model, prompt: list[int], length: int, setting: Setting, vocab: int,
                     eos: set[int], order: str = "standard") -> dict[tuple[int, ...], float]:
    """Exact law of the next `length` tokens (shorter if EOS) by enumeration, float64; the processing at
    each position sees the continuation so far (penalties, bad words, minimum length)."""
    law: dict[tuple[int, ...], float] = {}
    frontier = [((), 1.0)]
    for step in range(length):
        if not frontier:  # every continuation has ended with EOS
            break
        seqs = torch.tensor([list(prompt) + list(prefix) for prefix, _ in frontier], dtype=torch.long)
        probs = next_probs(model, seqs, setting, vocab, step, eos, order).numpy()
        nxt = []
        for (prefix, mass), row in zip(frontier, probs, strict=True):
            for tok in np.nonzero(row)[0]:
                key, m = prefix + (int(tok),), mass * float(row[tok])
                (law.__setitem__(key, law.get(key, 0.0) + m) if int(tok) in eos else nxt.append((key, m)))
        frontier = nxt
    for key, m in frontier:
        law[key] = law.get(key, 0.0) + m
    return law


def total_variation(a: dict, b: dict) -> float:
    """TV between two laws given as {outcome: probability}."""
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def rows_to_keys(tokens: torch.Tensor) -> list[tuple[int, ...]]:
    return [tuple(t for t in row if t >= 0) for row in tokens.tolist()]


def joint_law_tests(keys: list[tuple[int, ...]], law: dict, rate: float, power: float, prefix: str) -> list[TestResult]:
    cells = sorted(law, key=lambda k: -law[k])
    index = {k: i for i, k in enumerate(cells)}
    p = np.array([law[k] for k in cells])
    counts = np.zeros(len(cells) + 1, dtype=np.int64)  # last cell: continuations with zero probability
    for k in keys:
        counts[index.get(k, len(cells))] += 1
    full_p = np.append(p, 0.0)
    out = [support_check(counts, full_p, f"{prefix}/joint_support", power=power)]
    head = min(MAX_JOINT_CELLS - 1, len(cells))
    coarse_counts = np.append(counts[:head], counts[head:-1].sum())
    coarse_p = np.append(p[:head], p[head:].sum())
    if coarse_p[-1] == 0:
        coarse_counts, coarse_p = coarse_counts[:-1], coarse_p[:-1]
    kw = {"rate": rate, "power": power, "min_expected": GATE_MIN_EXPECTED}
    out.append(pooled_pearson(coarse_counts, coarse_p, f"{prefix}/joint_pooled_pearson", **kw))
    out.append(pooled_gtest(coarse_counts, coarse_p, f"{prefix}/joint_pooled_g", **kw))
    for t in out[1:]:
        t.details.update(scope="one law", guarantee=(
            f"TV between the emitted and the target law of the whole continuation at this prompt (its {head} likeliest "
            f"values and the rest) ≥ {t.detectable_tv:.3g} is detected with probability ≥ {power:g}; a position whose "
            "law deviates by TV ε at a prefix of probability π moves it by π·ε"))
    return out


class SupportCount(int):
    """The number of scored tokens with probability 0 under the target; `boundary` more lay just outside a
    truncation cut (`relax_boundary_tokens`) and were scored under the relaxed law instead."""

    boundary: int = 0

    def __new__(cls, off: int, boundary: int = 0):
        obj = super().__new__(cls, off)
        obj.boundary = boundary
        return obj


def coarsen(probs: torch.Tensor, classes: torch.Tensor | None) -> torch.Tensor:
    """probs [..., V] with each class's mass moved onto its representative (classes: [V] representative ids)."""
    if classes is None:
        return probs
    size = probs.shape[-1]
    index = classes[:size].to(probs.device)
    if len(index) < size:  # ids beyond the tokenizer's (a padded vocabulary): each its own class
        index = torch.cat([index, torch.arange(len(index), size, device=probs.device)])
    index = index.expand(probs.shape)
    return torch.zeros_like(probs).scatter_add_(-1, index, probs)


def coarsen_law(law: dict[tuple[int, ...], float], classes: torch.Tensor | None) -> dict[tuple[int, ...], float]:
    """A continuation law (`continuation_law`) as an engine that reports tokens only up to `classes` gives it:
    each continuation up to and including its first token of a class with more than one member, that token
    as its class's representative (the rule of harness.served.pieces.ids_from_pieces)."""
    if classes is None:
        return law
    rep = classes.tolist()
    counts = np.bincount(np.asarray(rep), minlength=len(rep))
    shared = {i for i, r in enumerate(rep) if counts[r] > 1}
    out: dict[tuple[int, ...], float] = {}
    for key, mass in law.items():
        cut = []
        for t in key:
            cut.append(rep[t] if t < len(rep) else t)
            if t in shared:
                break
        out[tuple(cut)] = out.get(tuple(cut), 0.0) + mass
    return out
