"""One entry point for CLI, pytest plugin and Python users: load, adapt, run, decide."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from harness.adapters.loading import check_signature, load_callable, one_row_at_a_time
from harness.check.engine import CheckConfig
from harness.check.report import CheckReport
from harness.errors import HarnessError


def VerifyConfig(**kwargs) -> CheckConfig:  # noqa: N802 - the old class name, kept for users' scripts
    """Deprecated name of `CheckConfig`; `alpha=` (the false-alarm rate) still works, with a warning."""
    if "alpha" in kwargs:
        warnings.warn("VerifyConfig(alpha=...) is deprecated: use CheckConfig(false_alarm_rate=...)",
                      DeprecationWarning, stacklevel=2)
        kwargs["false_alarm_rate"] = kwargs.pop("alpha")
    return CheckConfig(**kwargs)


def _name(impl) -> str:
    return impl if isinstance(impl, str) else f"{getattr(impl, '__module__', '?')}:{getattr(impl, '__qualname__', impl)}"


def resolve(impl, level: str) -> Callable:
    if level not in ("sampler", "generation"):
        raise HarnessError(f"--level must be 'sampler' or 'generation' for an implementation, got {level!r}")
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


def run_verify(config: CheckConfig, progress: Callable[[int], None] | None = None) -> CheckReport:
    config.validate()
    fn = resolve(config.impl, config.level)
    name = _name(config.impl)
    if config.level == "sampler":
        from harness.check.sampler import run_sampler_check

        notes: list[str] = []
        fn = batched_sampler(fn, notes)
        report = run_sampler_check(fn, impl_name=name, false_alarm_rate=config.false_alarm_rate, tv=config.tv,
                                   power=config.power, seed=config.seed, cases=config.cases, rows=config.samples,
                                   device=config.device, progress=progress, family=config.family,
                                   max_rows=config.max_rows, stop_on_fail=config.stop_on_fail,
                                   inconclusive_tv=config.inconclusive_tv)
        report.notes = notes + report.notes
        return report
    from harness.check.generation import run_generation_check

    pair = load_pair(config.pair, config.target, config.draft, device=config.device, dtype=config.dtype)
    return run_generation_check(fn, pair, impl_name=name, false_alarm_rate=config.false_alarm_rate,
                                power=config.power, seed=config.seed, samples=generation_samples(config, pair),
                                gamma=config.gamma, time_budget_s=config.time_budget_s, progress=progress,
                                stop_on_fail=config.stop_on_fail, inconclusive_tv=config.inconclusive_tv)


def generation_samples(config: CheckConfig, pair) -> int:
    """Samples per prompt and setting: the user's, or the default for the pair's size."""
    return config.samples or (20_000 if pair.vocab_size <= 64 else 200)


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


def planned_rows(config: CheckConfig) -> int | None:
    """Total trials the run will draw (for a progress bar), if known in advance."""
    if config.level != "sampler":
        return None
    from harness.check.engine import plan_cell
    from harness.check.sampler import SamplerSource

    cells = SamplerSource(None).cells(config)
    m = sum(cell.declared_tests() + 1 for cell in cells)
    return sum(min(config.max_rows, config.samples or plan_cell(c, config.false_alarm_rate / m, config.power))
               for c in cells)
