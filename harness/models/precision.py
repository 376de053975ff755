"""The scoring copy of a target: float64 where the model's kernels allow it, else the most precise dtype they take.

The ground truth of the generation and engine levels is the target's own law, computed in float64 so that the
tests see the model and not its rounding. Some kernels refuse float64: transformers' grouped-matmul MoE experts
(Qwen3-Next, Jamba, gpt-oss) take float32 / bfloat16 / float16 only. There the eager experts loop is tried first
(same weights, any dtype); when a kernel still refuses, the copy is float32, and the run says so in its notes.
A float32 scorer's logits are off by ~1e-6 relative, far below what a check can resolve (its detectable TV is
≥ 1e-2) and far inside the bf16 numerics margin the numerics check allows (harness/check/numerics.py).
"""

from __future__ import annotations

import copy

import torch


def _forward_ok(model) -> str:
    """'' if a short forward runs, else the error in one line."""
    device = next(model.parameters()).device
    ids = torch.zeros(1, 3, dtype=torch.long, device=device)
    try:
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    return ""


def scoring_copy(model) -> tuple[object, str]:
    """(a copy of `model` in the most precise dtype its kernels take, a note: '' for float64, else why not)."""
    copy64 = copy.deepcopy(model).to(torch.float64).eval()
    refused = _forward_ok(copy64)
    if not refused:
        return copy64, ""
    if hasattr(copy64, "set_experts_implementation"):
        try:
            copy64.set_experts_implementation("eager")
        except (ValueError, AttributeError, NotImplementedError):
            pass
        else:
            if not _forward_ok(copy64):
                return copy64, ""
    del copy64
    copy32 = copy.deepcopy(model).to(torch.float32).eval()
    return copy32, (f"ground truth scored in float32, not float64: a kernel of {type(model).__name__} refuses "
                    f"float64 ({refused}); float32 rounding is far below the detectable TV")
