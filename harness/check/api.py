"""One entry point for CLI, pytest plugin and Python users: load, adapt, run, decide."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from harness.adapters.loading import check_signature, load_callable, one_row_at_a_time
from harness.check.report import CheckReport
from harness.errors import HarnessError


@dataclasses.dataclass
class VerifyConfig:
    """Settings of `specdec verify` (the CLI flags are built from these fields)."""

    impl: str | Callable  # MODULE:CALLABLE or the callable itself
    level: str = "sampler"  # "sampler" (§1a verify step) or "generation" (§1b generate)
    pair: str = "toy"  # generation level: registered pair name
    target: str | None = None  # generation level: checkpoint pair (with draft)
    draft: str | None = None
    alpha: float = 1e-3  # suite false-alarm rate (family-wise, Holm)
    tv: float = 0.02  # sampler level: detectable total variation planned at `power`
    power: float = 0.99
    seed: int = 0
    samples: int | None = None  # sampler: rows per case (default: planned); generation: per prompt × setting
    cases: list[str] | None = None  # sampler cases to run (default: all)
    gamma: int = 3  # generation level
    device: str = "cpu"
    dtype: str | None = None  # generation level: model dtype (float32 on CPU by default; "bfloat16", ...)
    time_budget_s: float | None = None  # generation level: stop sampling early (noted in the report)
    settings: list[str] | None = None  # generation level: `--setting` texts (harness.check.generation.parse_setting)
    processing_order: str = "standard"  # generation level: declared convention (specdec_ref.processing.ORDERS)


def _name(impl) -> str:
    return impl if isinstance(impl, str) else f"{getattr(impl, '__module__', '?')}:{getattr(impl, '__qualname__', impl)}"


def resolve(impl, level: str) -> Callable:
    if level not in ("sampler", "generation"):
        raise HarnessError(f"--level must be 'sampler' or 'generation', got {level!r}")
    fn = load_callable(impl) if isinstance(impl, str) else impl
    if not callable(fn):
        raise HarnessError(f"the implementation must be callable, got {type(fn).__name__}")
    check_signature(fn, level, _name(impl))
    return fn


def batched_sampler(fn: Callable, notes: list[str]) -> Callable:
    """Probe with B = 2; an implementation that only handles B = 1 is wrapped (and the report says so)."""
    g = torch.Generator().manual_seed(0)
    p = torch.full((2, 2, 4), 0.25)
    q = torch.full((2, 1, 4), 0.25)
    x = torch.zeros(2, 1, dtype=torch.long)
    try:
        out = fn(p, q, x, g)
        if isinstance(out, torch.Tensor) and out.shape[0] == 2:
            return fn
    except Exception:  # noqa: BLE001 - any failure at B = 2 means "try one row at a time"
        pass
    try:
        fn(p[:1], q[:1], x[:1], g)
    except Exception:  # noqa: BLE001 - fails at B = 1 too: let the real run report it in context
        return fn
    notes.append("the implementation handles one row at a time (B = 1): rows were run one by one")
    return one_row_at_a_time(fn, "sampler")


def run_verify(config: VerifyConfig, progress: Callable[[int], None] | None = None) -> CheckReport:
    fn = resolve(config.impl, config.level)
    name = _name(config.impl)
    if config.level == "sampler":
        from harness.check.sampler import run_sampler_check

        notes: list[str] = []
        fn = batched_sampler(fn, notes)
        report = run_sampler_check(fn, impl_name=name, false_alarm_rate=config.alpha, tv=config.tv,
                                   power=config.power, seed=config.seed, cases=config.cases, rows=config.samples,
                                   device=config.device, progress=progress)
        report.notes = notes + report.notes
        return report
    from harness.check.generation import DEFAULT_SETTINGS, parse_setting, run_generation_check

    settings = tuple(s for text in config.settings for s in parse_setting(text)) if config.settings else DEFAULT_SETTINGS
    pair = load_pair(config.pair, config.target, config.draft, device=config.device, dtype=config.dtype)
    samples = config.samples or (20_000 if pair.vocab_size <= 64 else 200)
    return run_generation_check(fn, pair, impl_name=name, false_alarm_rate=config.alpha, power=config.power,
                                seed=config.seed, samples=samples, gamma=config.gamma,
                                time_budget_s=config.time_budget_s, progress=progress, settings=settings,
                                processing_order=config.processing_order)


def load_pair(pair: str, target: str | None = None, draft: str | None = None, *, device: str = "cpu",
              dtype=None):
    """A registered pair by name, or `--target/--draft` checkpoints (both or neither)."""
    if target or draft:
        if not (target and draft):
            raise HarnessError("give both --target and --draft (or neither, and --pair)")
        from harness.models.hf_pair import pair_from_checkpoints

        return pair_from_checkpoints(target, draft, device=device, dtype=dtype)
    from harness.pairs import get_pair

    return get_pair(pair, device=device, dtype=dtype)


def planned_rows(config: VerifyConfig) -> int | None:
    """Total trials the run will draw (for a progress bar), if known in advance."""
    if config.level != "sampler":
        return None
    from harness.check.sampler import _plan_cases, _select, plan_rows

    plans = _plan_cases(_select(config.cases), config.seed)
    plan_rows(plans, tv=config.tv, alpha=config.alpha, power=config.power, max_rows=400_000)
    return sum(config.samples or p.rows for p in plans)
