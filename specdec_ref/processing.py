"""Logits processing shared by target and draft: logits → temperature → top-k → top-p → softmax.

The same function turns target logits into p and draft logits into q, so the two can never be
processed differently (a real bug class: transformers PR #28166, vLLM #9834).
Semantics follow transformers' logits warpers so that engines built on it are judged against the
law they intend: top-k keeps every logit ≥ the k-th largest (ties kept); top-p keeps the smallest
descending-probability prefix whose mass reaches top_p (the token that crosses it is kept).
Temperature 0 means greedy: an exact one-hot on the argmax (first index on ties), never a tiny
temperature.
"""

from __future__ import annotations

import math

import torch

from specdec_ref.errors import SpecDecInputError


def check_sampling_params(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Raise SpecDecInputError naming the argument if a sampling parameter is out of range."""
    if temperature is None or not isinstance(temperature, (int, float)) or math.isnan(temperature):
        raise SpecDecInputError(f"temperature must be a number >= 0 (0 means greedy), got {temperature!r}")
    if temperature < 0 or math.isinf(temperature):
        raise SpecDecInputError(f"temperature must be finite and >= 0 (0 means greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise SpecDecInputError(f"top_k must be an integer >= 1 or None (no top-k), got {top_k!r}")
    if top_p is not None and (not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0):
        raise SpecDecInputError(f"top_p must be in (0, 1] or None (no top-p), got {top_p!r}")


def check_finite_logits(logits: torch.Tensor, name: str = "logits") -> None:
    """NaN / +inf logits make every downstream probability meaningless: refuse them loudly."""
    bad = torch.isnan(logits) | (logits == math.inf)
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0].tolist())
        raise SpecDecInputError(
            f"{name} contains NaN or +inf (first at index {where}); check the model's numerics "
            "(e.g. fp16 overflow) before verifying"
        )
    if bool((logits == -math.inf).all(dim=-1).any()):
        raise SpecDecInputError(f"{name} has a row where every logit is -inf: no token can be sampled")


def logits_to_probs(
    logits: torch.Tensor,  # [..., V] float
    temperature: float,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    validate: bool = True,
) -> torch.Tensor:  # [..., V] float32 (float64 if logits are float64); rows sum to 1
    """Processed sampling distribution for each row of `logits`."""
    if validate:
        check_sampling_params(temperature, top_k, top_p)
        check_finite_logits(logits)
    work_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    scores = logits.to(work_dtype)
    if temperature == 0:
        # Greedy is exact: one-hot on the argmax; argmax returns the first maximal index on ties.
        return torch.nn.functional.one_hot(scores.argmax(dim=-1), scores.shape[-1]).to(work_dtype)
    scores = scores / temperature
    if top_k is not None and top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]  # [..., 1]
        scores = scores.masked_fill(scores < kth, -math.inf)
    if top_p is not None and top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = sorted_scores.softmax(dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # exclusive prefix mass
        drop_sorted = mass_before >= top_p  # the first token always has mass_before == 0: kept
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, -math.inf)
    return scores.softmax(dim=-1)
