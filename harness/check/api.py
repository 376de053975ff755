"""One entry point for CLI, pytest plugin and Python users: load, adapt, run, decide."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

from harness.adapters.calling import with_timeout
from harness.adapters.loading import batched_generation, batched_sampler, check_signature, load_callable
from harness.check.config import CheckConfig
from harness.check.report import CheckReport
from harness.errors import HarnessError


def _name(impl) -> str:
    return impl if isinstance(impl, str) else f"{getattr(impl, '__module__', '?')}:{getattr(impl, '__qualname__', impl)}"


def contract_of(config) -> str:
    """The signature an implementation must have: a §1a step, a draft-and-verify step, a tree step, or a
    §1b generate; "engine" for a served engine (no implementation: its HTTP API)."""
    if config.level == "sampler" and config.family == "tree":
        return "tree"
    if config.level == "sampler" and config.step == "draft_and_verify":
        return "draft_step"
    if config.level == "sampler" and config.step == "masked":
        return "masked_step"
    return config.level


def resolve(impl, contract: str) -> Callable:
    if contract not in ("sampler", "generation", "tree", "draft_step", "masked_step"):
        raise HarnessError(f"--level must be 'sampler' or 'generation' for an implementation, got {contract!r}")
    fn = load_callable(impl) if isinstance(impl, str) else impl
    if not callable(fn):
        raise HarnessError(f"the implementation must be callable, got {type(fn).__name__}")
    check_signature(fn, contract, _name(impl))
    return fn


def _implementation(config: CheckConfig, contract: str):
    """The implementation under test, loaded, its signature checked, wrapped in the call timeout."""
    return with_timeout(resolve(config.impl, contract), config.timeout_s)


def _sampler_source(config: CheckConfig, notes: list[str], progress, stack):
    from harness.check.sampler_source import SamplerSource

    fn = batched_sampler(_implementation(config, "sampler"), notes, getattr(progress, "row", None))
    return SamplerSource(fn, device=config.device), config, _name(config.impl)


def _draft_step_source(config: CheckConfig, notes: list[str], progress, stack):
    from harness.check.draft_step import DraftStepSource

    return DraftStepSource(_implementation(config, "draft_step"), device=config.device), config, _name(config.impl)


def _tree_source(config: CheckConfig, notes: list[str], progress, stack):
    from harness.check.tree import TreeSource

    return TreeSource(_implementation(config, "tree")), config, _name(config.impl)


def _masked_step_source(config: CheckConfig, notes: list[str], progress, stack):
    from harness.check.structured_step import ConstrainedStepSource

    return ConstrainedStepSource(_implementation(config, "masked_step")), config, _name(config.impl)


def _generation_source(config: CheckConfig, notes: list[str], progress, stack):
    from harness.check.generation import GenerationSource, generation_samples
    from harness.check.settings import parse_setting

    fn = _implementation(config, "generation")
    settings = tuple(s for text in config.settings for s in parse_setting(text)) if config.settings else None
    pair = load_pair(config.pair, config.target, config.draft, device=config.device, dtype=config.dtype)
    contexts = None
    if config.contexts in ("catalogue", "auto"):  # auto: the generation level's default is the catalogue
        from harness.contexts import plan

        contexts = plan(pair, seed=config.seed)
    source = GenerationSource(batched_generation(fn, pair, notes, getattr(progress, "row", None)), pair,
                              length=config.length, settings=settings, processing_order=config.processing_order,
                              contexts=contexts)
    if contexts is None:  # without the catalogue every cell runs one fixed n (the old plan)
        config = dataclasses.replace(config, samples=generation_samples(config, source.vocab))
    if hasattr(progress, "set_total"):
        progress.set_total(source.planned_samples(config))
    return source, config, _name(config.impl)


# The trial source of each contract (contract_of): every verdict, at every level, comes from run_battery over
# one of these. A builder takes (config, notes, progress, stack: closes what it opens, **options) and returns
# (source, the driver's CheckConfig, the implementation's name). The engine level is named by its path: the
# served-engine package sits above the check package (it is a trial source built on it), so the check package
# does not import it.
SOURCES = {"sampler": _sampler_source, "draft_step": _draft_step_source, "tree": _tree_source,
           "generation": _generation_source, "masked_step": _masked_step_source,
           "engine": "harness.served.check:engine_source"}
REPORT_LEVEL = {"sampler": "sampler", "draft_step": "draft_step", "tree": "tree", "generation": "generation",
                "masked_step": "sampler", "engine": "engine"}


def run_verify(config, progress: Callable[[int], None] | None = None, **options) -> CheckReport:
    """Validate `config` (a CheckConfig, or harness.served.config.EngineConfig for a served engine), build the
    trial source of its contract from the table and run the one driver on it (every mode — fixed n, early
    stop, reach top-up, sequential — is the driver's). `options` go to the source's builder (the engine
    level: `client=`, an adapter replacing the one `--api` names)."""
    from harness.check.driver import run_battery

    config.validate()
    contract = contract_of(config)
    build = SOURCES[contract]
    if isinstance(build, str):
        build = load_callable(build)
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        source, driver, name = build(config, notes, progress, stack, **options)
        report = run_battery(source, driver, impl_name=name, progress=progress)
    report.level = REPORT_LEVEL[contract]
    report.notes = notes + report.notes
    if contract == "engine":  # the result file records what was asked (endpoint, served impl, ...), not the driver's
        report.config = config
    return report


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
    from harness.check.driver import plan_cell
    from harness.check.sampler_source import SamplerSource

    if contract_of(config) in ("tree", "masked_step"):
        return None
    cells = SamplerSource(None).cells(config)  # an upper bound in sequential mode (it may stop earlier)
    m = sum(cell.declared_tests() + 1 for cell in cells)
    return sum(min(config.max_rows, config.samples or plan_cell(c, config.false_alarm_rate / m, config.power))
               for c in cells)
