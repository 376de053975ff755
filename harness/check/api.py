"""One entry point for CLI, pytest plugin and Python users: load, adapt, run, decide."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from harness.adapters.calling import with_timeout
from harness.adapters.loading import batched_generation, batched_sampler, check_signature, load_callable
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
    timeout_s: float | None = None  # one implementation call longer than this fails the run (hangs are bugs)


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


def run_verify(config: VerifyConfig, progress: Callable[[int], None] | None = None) -> CheckReport:
    if config.samples is not None and config.samples < 1:
        raise HarnessError(f"--samples must be >= 1, got {config.samples}")
    fn = with_timeout(resolve(config.impl, config.level), config.timeout_s)
    name = _name(config.impl)
    on_row = getattr(progress, "row", None)  # harness.progress displays: per-row ticks of wrapped B = 1 impls
    notes: list[str] = []
    if config.level == "sampler":
        from harness.check.sampler import run_sampler_check

        fn = batched_sampler(fn, notes, on_row)
        report = run_sampler_check(fn, impl_name=name, false_alarm_rate=config.alpha, tv=config.tv,
                                   power=config.power, seed=config.seed, cases=config.cases, rows=config.samples,
                                   device=config.device, progress=progress)
        report.notes = notes + report.notes
        return report
    from harness.check.generation import run_generation_check

    pair = load_pair(config.pair, config.target, config.draft, device=config.device, dtype=config.dtype)
    fn = batched_generation(fn, pair, notes, on_row)
    samples = generation_samples(config, pair.vocab_size)
    if hasattr(progress, "set_total"):
        from harness.check.generation import DEFAULT_SETTINGS

        prompts = min(2, len(pair.prompts or [[0]]))  # run_generation_check's default: 2 prompts
        progress.set_total(samples * prompts * sum(s.temperature > 0 for s in DEFAULT_SETTINGS))
    report = run_generation_check(fn, pair, impl_name=name, false_alarm_rate=config.alpha, power=config.power,
                                  seed=config.seed, samples=samples,
                                  gamma=config.gamma, time_budget_s=config.time_budget_s, progress=progress)
    report.notes = notes + report.notes
    return report


def generation_samples(config: VerifyConfig, vocab: int) -> int:
    """Samples per (prompt, sampling setting): the exact joint law of a toy pair affords many."""
    return config.samples or (20_000 if vocab <= 64 else 200)


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
        return None  # known once the pair is loaded: run_verify sets it (progress.set_total)
    from harness.check.sampler import _plan_cases, _select, plan_rows

    plans = _plan_cases(_select(config.cases), config.seed)
    plan_rows(plans, tv=config.tv, alpha=config.alpha, power=config.power, max_rows=400_000)
    return sum(config.samples or p.rows for p in plans)
