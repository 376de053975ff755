"""Greedy (temperature 0) and its numerics: token equality with the target's own greedy output; at the first
divergence the target's logit margin there tells a near-tie numerics divergence (reported) from a logic bug
(failed). `NEAR_TIE` is the numerics margin the PIT's boundary relaxation shares (harness.check.pit)."""

from __future__ import annotations

import torch

from harness.adapters.calling import MalformedOutput, call_impl
from harness.check.exact_laws import target64
from harness.check.report import deterministic_result
from harness.pairs import ModelPair
from harness.stats import TestResult
from specdec_ref.generate import autoregressive_generate, default_eos

NEAR_TIE = 1e-3  # logit margin below which a greedy divergence is attributed to numerics


def _tokens(row: torch.Tensor) -> list[int]:
    return [t for t in row.detach().cpu().tolist() if t >= 0]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix); None if equal."""
    if a == b:
        return None
    return next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def greedy_target(pair: ModelPair, prompt: list[int], max_new_tokens: int) -> list[int]:
    """The target's own greedy continuation (the ground truth at temperature 0)."""
    ids = torch.tensor([prompt], device=next(pair.target.parameters()).device)
    return _tokens(autoregressive_generate(pair.target, ids, max_new_tokens=max_new_tokens, temperature=0,
                                           eos_token_id=default_eos(pair.target)).tokens[0])


def greedy_impl(impl, pair: ModelPair, prompt: list[int], *, max_new_tokens: int, gamma: int, seed: int) -> list[int]:
    """The implementation's greedy continuation of one prompt."""
    ids = torch.tensor([prompt], device=next(pair.target.parameters()).device)
    out = call_impl(impl, pair.target, pair.draft, ids, what="greedy generation", max_new_tokens=max_new_tokens,
                    gamma=gamma, temperature=0.0, top_k=None, top_p=None, seed=seed)
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 1 or out.is_floating_point():
        got = f"{out.dtype} tensor of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise MalformedOutput(f"the implementation returned {got} during greedy generation, expected an int64 "
                              "tensor [B = 1, N] of new tokens")
    return _tokens(out[0])


def greedy_tests(impl, pair: ModelPair, prompts: list[list[int]], *, gamma: int, max_new_tokens: int,
                 seed: int, prefix: str) -> tuple[list[TestResult], list[TestResult], list[dict]]:
    """Token equality with the target's own greedy output; divergences classified by logit margin."""
    gating, advisory, findings = [], [], []
    for i, prompt in enumerate(prompts):
        want = greedy_target(pair, prompt, max_new_tokens)
        got = greedy_impl(impl, pair, prompt, max_new_tokens=max_new_tokens, gamma=gamma, seed=seed)
        pos = first_difference(want, got)
        if pos is None:
            gating.append(deterministic_result(f"{prefix}/prompt{i}", True, n=len(want)))
            continue
        finding = classify_divergence(pair, prompt, want, got, pos)
        findings.append({"prompt": i, **finding})
        result = deterministic_result(f"{prefix}/prompt{i}", False, n=len(want), **finding)
        if finding["kind"] == "numerics (near-tie)":  # reported, and the prompt's gating test passes
            advisory.append(result)
            result = deterministic_result(f"{prefix}/prompt{i}", True, n=len(want), **finding)
        gating.append(result)
    return gating, advisory, findings


LOW_PRECISION = (torch.bfloat16, torch.float16)


def classify_divergence(pair, prompt, want, got, pos) -> dict:
    """Target logit margin at the first divergence: a near-tie is numerics, a clear margin is a bug.

    float32/float64 targets: the gap of the emitted token below the argmax, in the target's own
    arithmetic; 0 < gap ≤ NEAR_TIE·scale is numerics, gap = 0 a tie broken the wrong way (logic).
    bfloat16/float16 targets: rounding moves every logit, so ties and near-ties are common and differ
    between a one-token and a multi-position pass. The divergence is numerics when the *exact* gap
    between the expected and the emitted token (the same weights in float64) is at most twice the
    largest logit error of the low-precision target at that context (one full pass vs float64);
    anything wider cannot be explained by rounding and is logic."""
    context = torch.tensor([list(prompt) + want[:pos]], device=next(pair.target.parameters()).device)
    inputs = {"input_ids": context, "attention_mask": torch.ones_like(context)}
    with torch.inference_mode():
        logits = pair.target(**inputs).logits[0, -1, : pair.vocab_size].double().cpu()
    top2 = torch.topk(logits, 2).values
    margin = float(top2[0] - top2[1])
    want_tok = want[pos] if pos < len(want) else None
    got_tok = got[pos] if pos < len(got) else None
    gap = float(logits.max() - logits[got_tok]) if got_tok is not None and got_tok < len(logits) else float("inf")
    extra: dict = {}
    if pair.target.dtype in LOW_PRECISION and want_tok is not None and got_tok is not None and got_tok < len(logits):
        with torch.inference_mode():
            exact = target64(pair)(**inputs).logits[0, -1, : pair.vocab_size].double().cpu()
        rounding = float((logits - exact).abs().max())
        gap64 = float(exact[want_tok] - exact[got_tok])
        kind = "numerics (near-tie)" if abs(gap64) <= 2 * rounding else "logic"
        extra = {"exact_gap_expected_minus_got": gap64, "rounding_error_max": rounding,
                 "tolerance": 2 * rounding, "dtype": str(pair.target.dtype).removeprefix("torch.")}
        detail = f"exact gap {gap64:.3g} vs tolerance {2 * rounding:.3g} ({extra['dtype']} rounding)"
    else:
        # gap == 0: an exact tie broken differently from argmax's first index (vLLM #7627 class) is logic;
        # 0 < gap <= tolerance: the implementation's numerics (e.g. batch-variant kernels) flipped a near-tie.
        near = 0 < gap <= NEAR_TIE * max(1.0, float(logits.abs().max()))
        kind = "numerics (near-tie)" if near else ("tie-break (exact tie)" if gap == 0 else "logic")
        detail = f"target logit gap {gap:.3g}, margin {margin:.3g}"
    return {"position": pos, "expected_token": want_tok, "got_token": got_tok,
            "target_margin_top1_top2": margin, "logit_gap_of_got_token": gap, "kind": kind, **extra,
            "message": f"diverges at new token {pos}: expected {want_tok if want_tok is not None else 'end'}, "
                       f"got {got_tok} ({detail}) -> {kind}"}
