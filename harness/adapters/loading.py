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
from pathlib import Path

import torch

from harness.adapters.calling import ImplementationTimeout, MalformedOutput
from harness.errors import HarnessError

TREE_VERIFY_ARITY = 5  # tree verify(target_probs, draft_probs, draft_tokens, parents, generator)
# positional arguments of each step contract: verify(p, q, x, generator), tree_verify(p, q, x, parents, generator),
# draft_and_verify(p, q, generator), verify_masked(p, q, x, allowed, generator)
CONTRACT_ARITY = {"sampler": 4, "tree": TREE_VERIFY_ARITY, "draft_step": 3, "masked_step": 5}
GENERATE_KEYWORDS = ("max_new_tokens", "gamma", "temperature", "top_k", "top_p", "seed")


def load_callable(spec: str) -> Callable:
    """Import `MODULE:CALLABLE` (dots allowed in CALLABLE for attributes); clear HarnessError otherwise."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise HarnessError(f"--impl must look like MODULE:CALLABLE (e.g. mypkg.spec:verify), got {spec!r}")
    module_name, attr = spec.split(":")
    if _is_file_path(module_name):
        path = Path(module_name)
        stem, folder = path.name.removesuffix(".py"), "" if path.parent == Path(".") else f" ({path.parent})"
        raise HarnessError(f"--impl takes a module name, not a file path: from the folder that holds {stem}.py"
                           f"{folder}, give --impl {stem}:{attr}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise HarnessError(_not_found_message(exc, module_name, spec)) from exc
    except Exception as exc:  # the user's module raised while importing: report it, briefly
        raise HarnessError(f"importing {module_name!r} for --impl {spec} raised {type(exc).__name__}: {exc}") from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = [n for n in dir(module) if not n.startswith("_")]
            raise HarnessError(f"module {module_name!r} has no attribute {attr!r} (it has: {', '.join(public[:20])})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise HarnessError(f"{spec} is not callable (it is of type {type(obj).__name__})")
    return obj


def _is_file_path(module_name: str) -> bool:
    """`./myspec.py`, `src/myspec`, `myspec.py` (an existing file): a path where a module name is due."""
    return ("/" in module_name or "\\" in module_name or module_name.startswith(".")
            or (module_name.endswith(".py") and Path(module_name).is_file()))


def _not_found_message(exc: ModuleNotFoundError, module_name: str, spec: str) -> str:
    """The module itself (or a parent package) is missing, or something the user's module imports."""
    missing = exc.name or ""
    own = module_name == missing or module_name.startswith(missing + ".")
    if own:
        return (f"cannot import module {module_name!r} for --impl {spec}: {exc}. Run specdec from the folder "
                "that contains it, or install it")
    return (f"importing {module_name!r} for --impl {spec} failed: it imports {missing!r}, which is not installed "
            f"in this environment ({exc}); install it (e.g. `pip install {missing.split('.')[0]}`)")


def check_signature(fn: Callable, contract: str, spec: str) -> None:
    """Refuse callables whose signature cannot take the contract's arguments (§1a / §1b)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins / C callables: nothing to check before calling
    try:
        _bind(sig, contract if contract in CONTRACT_ARITY else "generation")
    except TypeError as exc:
        want = {"sampler": "verify(target_probs, draft_probs, draft_tokens, generator)",
                "tree": "tree_verify(target_probs, draft_probs, draft_tokens, parents, generator)",
                "draft_step": "draft_and_verify(target_probs, draft_probs, generator)",
                "masked_step": "verify_masked(target_probs, draft_probs, draft_tokens, allowed, generator)"}.get(
            contract, "generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed)")
        fits = [hint for other, hint in CONTRACT_HINTS.items() if other != contract and _binds(sig, other)]
        advice = f"; it fits {' or '.join(fits)}" if fits else ""
        raise HarnessError(f"{spec} has signature {fn.__name__}{sig}, which cannot be called as the "
                           f"{contract} contract {want}: {exc}{advice}") from exc


# How to check an implementation under each contract (the CLI flag, then the Python API keyword).
CONTRACT_HINTS = {
    "sampler": 'the sampler contract (§1a): check it with --level sampler (Python: level="sampler")',
    "generation": 'the generation contract (§1b): check it with --level generation (Python: level="generation")',
    "tree": 'the tree contract (CONTRACT-tree.md): check it with --family tree (Python: family="tree")',
    "draft_step": 'the draft-and-verify step (§1e): check it with --step draft_and_verify (Python: '
                  'step="draft_and_verify")',
    "masked_step": 'the masked step (docs/STRUCTURED.md): check it with --step masked (Python: step="masked")',
}


def _binds(sig: inspect.Signature, contract: str) -> bool:
    try:
        _bind(sig, contract)
    except TypeError:
        return False
    return True


def _bind(sig: inspect.Signature, contract: str) -> None:
    """sig.bind with the contract's arguments; TypeError when they do not fit."""
    if contract == "generation":
        sig.bind(None, None, None, **dict.fromkeys(GENERATE_KEYWORDS))
    else:
        sig.bind(*([None] * CONTRACT_ARITY[contract]))


def pad_rows(rows: list[torch.Tensor], width: int | None = None) -> torch.Tensor:
    """Stack 1-D token rows into [B, N] with -1 padding."""
    n = width if width is not None else max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), n), -1, dtype=torch.long)
    for b, r in enumerate(rows):
        out[b, : len(r)] = r[:n].to(torch.long).cpu()
    return out


def _one_row(out, what: str) -> torch.Tensor:
    """Row 0 of a B = 1 output [1, N]; MalformedOutput (not a TypeError from indexing) for anything else."""
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 1:
        got = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise MalformedOutput(f"the implementation returned {got} for one row (B = 1) during {what}, "
                              "expected a torch.Tensor [1, N] of token ids")
    return out[0]


def one_row_at_a_time(fn: Callable, contract: str, on_row: Callable[[], None] | None = None) -> Callable:
    """Wrap a B = 1 implementation so it accepts B >= 1 (rows are independent trials).

    `on_row()` is called after every row, so a progress display moves per row, not per batch."""
    tick = on_row or (lambda: None)
    if contract == "sampler":
        def wrapped(target_probs, draft_probs, draft_tokens, generator):
            # target_probs [B, γ+1, V], draft_probs [B, γ, V], draft_tokens [B, γ] -> [B, γ+1]
            rows = []
            for b in range(draft_tokens.shape[0]):
                rows.append(_one_row(fn(target_probs[b : b + 1], draft_probs[b : b + 1], draft_tokens[b : b + 1],
                                        generator), "a verify call"))
                tick()
            return pad_rows(rows, draft_tokens.shape[1] + 1)
    else:
        def wrapped(target, draft, input_ids, *, seed, **kwargs):
            # input_ids [B, T] -> new tokens [B, N]
            rows = []
            for b in range(input_ids.shape[0]):
                rows.append(_one_row(fn(target, draft, input_ids[b : b + 1], seed=seed * 100_003 + b, **kwargs),
                                     "a generate call"))
                tick()
            return pad_rows(rows)
    wrapped.__name__ = f"one_row_at_a_time({getattr(fn, '__name__', 'impl')})"
    wrapped.__wrapped__ = fn  # error messages look for the user's frames in fn's module
    wrapped.specdec_wrapped_b1 = True
    return wrapped


PROBES = 4  # calls per batch size: one random call misclassifies an implementation that fails only sometimes


def _batch_of(out, B: int) -> bool:
    return isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[0] == B


def _probe(call: Callable[[int, int], object]) -> str:
    """'batched', 'one-row' or 'unknown' from PROBES calls at B = 2 and B = 1 (call(B, seed) -> output).

    batched: some B = 2 call returned a [2, N] tensor (even if others raised: the run will report those);
    one-row: every B = 2 call failed and every B = 1 call returned a [1, N] tensor;
    unknown: anything else, left unwrapped so the real run reports the failure in context."""
    for seed in range(PROBES):
        try:
            if _batch_of(call(2, seed), 2):
                return "batched"
        except ImplementationTimeout:
            raise  # a hang is a verdict already, whatever the batch size
        except Exception:  # noqa: BLE001 - failing at B = 2 is what the probe looks for
            pass
    for seed in range(PROBES):
        try:
            if not _batch_of(call(1, seed), 1):
                return "unknown"
        except ImplementationTimeout:
            raise
        except Exception:  # noqa: BLE001 - fails at B = 1 too: let the real run report it in context
            return "unknown"
    return "one-row"


def batched_sampler(fn: Callable, notes: list[str], on_row: Callable[[], None] | None = None) -> Callable:
    """fn if it takes B >= 1 rows; a B = 1 implementation is wrapped (and `notes` says so)."""
    def call(B: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        p = torch.rand(B, 2, 4, generator=g).softmax(-1)  # [B, γ+1 = 2, V = 4]
        q = torch.rand(B, 1, 4, generator=g).softmax(-1)  # [B, γ = 1, V]
        x = torch.multinomial(q[:, 0], 1, generator=g)  # [B, 1] drafts ~ q
        return fn(p, q, x, g)

    if _probe(call) != "one-row":
        return fn
    notes.append("the implementation handles one row at a time (B = 1): rows were run one by one")
    return one_row_at_a_time(fn, "sampler", on_row)


def batched_generation(fn: Callable, pair, notes: list[str], on_row: Callable[[], None] | None = None) -> Callable:
    """The generation-level twin of batched_sampler: probes fn on `pair` with 2-token continuations."""
    prompt = (pair.prompts or [[0]])[0]
    device = next(pair.target.parameters()).device

    def call(B: int, seed: int):
        ids = torch.tensor([prompt] * B, device=device)  # [B, T]
        return fn(pair.target, pair.draft, ids, max_new_tokens=2, gamma=1, temperature=1.0, top_k=None,
                  top_p=None, seed=seed)

    if _probe(call) != "one-row":
        return fn
    notes.append("the implementation handles one prompt row at a time (B = 1): rows were generated one by one")
    return one_row_at_a_time(fn, "generation", on_row)
