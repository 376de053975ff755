"""Load an implementation named `MODULE:CALLABLE` and adapt it to the harness.

Like uvicorn/gunicorn, MODULE is imported from the current working directory or the environment.
Implementations that only handle one row (B = 1) are wrapped: rows are run one at a time and the
outputs stacked with -1 padding (slower, still correct).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable

import torch

from harness.errors import HarnessError

VERIFY_PARAMS = ("target_probs", "draft_probs", "draft_tokens", "generator")
GENERATE_KEYWORDS = ("max_new_tokens", "gamma", "temperature", "top_k", "top_p", "seed")


def load_callable(spec: str) -> Callable:
    """Import `MODULE:CALLABLE` (dots allowed in CALLABLE for attributes); clear HarnessError otherwise."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise HarnessError(f"--impl must look like MODULE:CALLABLE (e.g. mypkg.spec:verify), got {spec!r}")
    module_name, attr = spec.split(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise HarnessError(f"cannot import module {module_name!r} for --impl {spec}: {exc}. Run specdec from "
                           "the folder that contains it, or install it") from exc
    except Exception as exc:  # the user's module raised while importing: report it, briefly
        raise HarnessError(f"importing {module_name!r} for --impl {spec} raised {type(exc).__name__}: {exc}") from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = [n for n in dir(module) if not n.startswith("_")]
            raise HarnessError(f"module {module_name!r} has no attribute {attr!r} (it has: {', '.join(public[:20])})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise HarnessError(f"{spec} is not callable (it is a {type(obj).__name__})")
    return obj


def check_signature(fn: Callable, level: str, spec: str) -> None:
    """Refuse callables whose signature cannot take the contract's arguments (§1a / §1b)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins / C callables: nothing to check before calling
    try:
        if level == "sampler":
            sig.bind(*([None] * 4))
        elif level == "draft_step":
            sig.bind(*([None] * 3))
        else:
            sig.bind(None, None, None, **dict.fromkeys(GENERATE_KEYWORDS))
    except TypeError as exc:
        want = {"sampler": "verify(target_probs, draft_probs, draft_tokens, generator)",
                "draft_step": "draft_and_verify(target_probs, draft_probs, generator)"}.get(
            level, "generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed)")
        raise HarnessError(f"{spec} has signature {fn.__name__}{sig}, which cannot be called as the "
                           f"{level}-level contract {want}: {exc}") from exc


def pad_rows(rows: list[torch.Tensor], width: int | None = None) -> torch.Tensor:
    """Stack 1-D token rows into [B, N] with -1 padding."""
    n = width if width is not None else max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), n), -1, dtype=torch.long)
    for b, r in enumerate(rows):
        out[b, : len(r)] = r[:n].to(torch.long).cpu()
    return out


def one_row_at_a_time(fn: Callable, level: str) -> Callable:
    """Wrap a B = 1 implementation so it accepts B >= 1 (rows are independent trials)."""
    if level == "sampler":
        def wrapped(target_probs, draft_probs, draft_tokens, generator):
            rows = [fn(target_probs[b : b + 1], draft_probs[b : b + 1], draft_tokens[b : b + 1], generator)[0]
                    for b in range(draft_tokens.shape[0])]
            return pad_rows(rows, draft_tokens.shape[1] + 1)
    else:
        def wrapped(target, draft, input_ids, *, seed, **kwargs):
            rows = [fn(target, draft, input_ids[b : b + 1], seed=seed * 100_003 + b, **kwargs)[0]
                    for b in range(input_ids.shape[0])]
            return pad_rows(rows)
    wrapped.__name__ = f"one_row_at_a_time({getattr(fn, '__name__', 'impl')})"
    wrapped.specdec_wrapped_b1 = True
    return wrapped
