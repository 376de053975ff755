"""One entry point for CLI, pytest plugin and Python users: load, adapt, run, decide."""

from __future__ import annotations

import warnings
from collections.abc import Callable

from harness.adapters.calling import with_timeout
from harness.adapters.loading import batched_generation, batched_sampler, check_signature, load_callable
from harness.check.config import DEFAULT_TV, CheckConfig
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


def contract_of(config: CheckConfig) -> str:
    """The signature an implementation must have: a §1a step, a draft-and-verify step, a tree step, or a
    §1b generate."""
    if config.level == "sampler" and config.family == "tree":
        return "tree"
    if config.level == "sampler" and config.step == "draft_and_verify":
        return "draft_step"
    return config.level


def resolve(impl, level: str) -> Callable:
    if level not in ("sampler", "generation", "tree", "draft_step"):
        raise HarnessError(f"--level must be 'sampler' or 'generation' for an implementation, got {level!r}")
    fn = load_callable(impl) if isinstance(impl, str) else impl
    if not callable(fn):
        raise HarnessError(f"the implementation must be callable, got {type(fn).__name__}")
    check_signature(fn, level, _name(impl))
    return fn


def run_verify(config: CheckConfig, progress: Callable[[int], None] | None = None) -> CheckReport:
    config.validate()
    fn = with_timeout(resolve(config.impl, contract_of(config)), config.timeout_s)
    name = _name(config.impl)
    on_row = getattr(progress, "row", None)  # harness.progress displays: per-row ticks of wrapped B = 1 impls
    notes: list[str] = []
    if contract_of(config) == "tree":
        from harness.check.tree import DEFAULT_TV as TREE_TV
        from harness.check.tree import run_tree_check

        tv = TREE_TV if config.tv == DEFAULT_TV else config.tv  # trees are planned at 0.05 unless --tv is given
        return run_tree_check(fn, impl_name=name, false_alarm_rate=config.false_alarm_rate, tv=tv,
                              power=config.power, seed=config.seed, cases=config.cases, rows=config.samples,
                              max_rows=config.max_rows, stop_on_fail=config.stop_on_fail, progress=progress,
                              inconclusive_tv=config.inconclusive_tv)
    if contract_of(config) == "draft_step":
        from harness.check.draft_step import run_draft_step_check

        return run_draft_step_check(fn, impl_name=name, false_alarm_rate=config.false_alarm_rate, tv=config.tv,
                                    power=config.power, seed=config.seed, cases=config.cases, rows=config.samples,
                                    device=config.device, progress=progress, max_rows=config.max_rows,
                                    stop_on_fail=config.stop_on_fail, inconclusive_tv=config.inconclusive_tv)
    if config.level == "sampler" and config.sequential:
        from harness.check.sequential import run_sampler_check_sequential

        fn = batched_sampler(fn, notes, on_row)
        report = run_sampler_check_sequential(fn, impl_name=name, false_alarm_rate=config.false_alarm_rate,
                                              tv=config.tv, power=config.power, seed=config.seed,
                                              cases=config.cases, max_rows=config.max_rows, device=config.device,
                                              progress=progress)
        report.family, report.notes = config.family, notes + report.notes
        return report
    if config.level == "sampler":
        from harness.check.sampler import run_sampler_check

        fn = batched_sampler(fn, notes, on_row)
        report = run_sampler_check(fn, impl_name=name, false_alarm_rate=config.false_alarm_rate, tv=config.tv,
                                   power=config.power, seed=config.seed, cases=config.cases, rows=config.samples,
                                   device=config.device, progress=progress, family=config.family,
                                   max_rows=config.max_rows, stop_on_fail=config.stop_on_fail,
                                   inconclusive_tv=config.inconclusive_tv)
        report.notes = notes + report.notes
        return report
    from harness.check.generation import DEFAULT_SETTINGS, parse_setting, run_generation_check

    settings = tuple(s for text in config.settings for s in parse_setting(text)) if config.settings else DEFAULT_SETTINGS
    pair = load_pair(config.pair, config.target, config.draft, device=config.device, dtype=config.dtype)
    fn = batched_generation(fn, pair, notes, on_row)
    samples = generation_samples(config, pair.vocab_size)
    if hasattr(progress, "set_total"):
        prompts = min(2, len(pair.prompts or [[0]]))  # run_generation_check's default: 2 prompts
        progress.set_total(samples * prompts * sum(s.temperature > 0 for s in settings))
    report = run_generation_check(fn, pair, impl_name=name, false_alarm_rate=config.false_alarm_rate,
                                  power=config.power, seed=config.seed, samples=samples, gamma=config.gamma,
                                  time_budget_s=config.time_budget_s, progress=progress,
                                  stop_on_fail=config.stop_on_fail, inconclusive_tv=config.inconclusive_tv,
                                  settings=settings, processing_order=config.processing_order, length=config.length,
                                  score_dtype=config.score_dtype)
    report.notes = notes + report.notes
    return report


def generation_samples(config: CheckConfig, vocab: int) -> int:
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


def planned_rows(config: CheckConfig) -> int | None:
    """Total trials the run will draw (for a progress bar), if known in advance."""
    if config.level != "sampler":
        return None
    from harness.check.engine import plan_cell
    from harness.check.sampler import SamplerSource

    if contract_of(config) == "tree":
        return None
    cells = SamplerSource(None).cells(config)
    m = sum(cell.declared_tests() + 1 for cell in cells)
    return sum(min(config.max_rows, config.samples or plan_cell(c, config.false_alarm_rate / m, config.power))
               for c in cells)
