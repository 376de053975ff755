"""The configs of the campaigns that are also `specdec` commands (`specdec mutants` is the zoo, `specdec demo` the
demo): their flags are built from these fields (harness.configs.option) when `specdec` builds its parser, so this
module stays light (no torch); the campaigns import them from here. The zoo is a campaign on the runner
(harness.runner): `ZooConfig` is its Config, `CampaignConfig` the plan it resolves to (suites/profiles.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from harness.configs import option
from harness.defaults import DEFAULT_FALSE_ALARM_RATE
from harness.mutants.base import CONTRACTS
from suites.profiles import ZOO


def _names(values) -> tuple[str, ...]:
    return tuple(values or ())


@dataclasses.dataclass
class CampaignConfig:
    """The mutant zoo's plan: every size of a run (defaults: the full profile); `ZooConfig.plan()` builds it from
    `specdec mutants`' flags, `quick()` is suites/profiles.py's quick profile (where the cells run is the runner's:
    --local-workers / --workers / --scheduler)."""

    seeds: int = 20  # seeds per mutant (detection rate)
    control_seeds: int = 200  # seeds per correct control (false-alarm rate)
    gate: float = DEFAULT_FALSE_ALARM_RATE  # family-wise false-alarm rate of every run
    nominal_rate: float = 0.05  # a nominal false-alarm rate the controls are also read at (never called alpha)
    calibration_rows: int = 1_000  # rows per case in calibration runs
    slow_control_rows: int = 300  # ... for pure-Python controls
    curve_rows: tuple[int, ...] = (100, 400, 1_600)
    # Generation level: every fast entry runs the default plan (greedy, the prompt cells, the contexts cells of the
    # catalogue), the regression test of the default plan's power; `compare_plans` also runs each mutant at the
    # previous default (prompt cells only, no contexts), its time and rate beside the default's.
    compare_plans: bool = False
    generation_control_samples: int = 100  # per cell, generation-level controls (their false-alarm runs)
    # A campaign's own generation plan (params, structured): every generation entry at this fixed n per prompt cell,
    # without the contexts cells (None: the default plan above)
    generation_samples: int | None = None
    slow_generation_samples: int = 200  # ... for implementations that run rows one at a time
    slow_generation_seeds: int = 5
    below_resolution_seeds: int = 5  # mutants whose exact TV is below the planned ε: reported, not gated
    generation_control_seeds: int = 10  # runs per generation-level equivalent / wasteful variant
    # tree / draft-and-verify controls at their full default plans (their 200-seed calibrations on small case
    # sets: results/tree, results/families)
    step_control_seeds: int = 20
    generation_pair: str = "toy-low"
    curve_seeds: int = 10  # seeds per point of the detection-vs-samples curve
    only: tuple[str, ...] = ()  # only these implementations
    contracts: tuple[str, ...] = ()  # only the implementations of these contracts (harness.mutants.base.CONTRACTS)
    profile: str = "full"  # the named sizes of suites/profiles.py this plan was built from

    def __post_init__(self):
        self.only, self.contracts = _names(self.only), _names(self.contracts)

    @classmethod
    def quick(cls, **overrides) -> CampaignConfig:
        """The `nox -s lossless` profile (suites/profiles.py ZOO["quick"]): a few minutes. Its rates are a smoke
        test; the published calibration is the full profile (`specdec mutants`)."""
        return cls.of_profile("quick", **overrides)

    @classmethod
    def of_profile(cls, profile: str, **overrides) -> CampaignConfig:
        return cls(**{**ZOO[profile], "profile": profile, **overrides})


ZOO_LOCAL_WORKERS = 2  # the default of `specdec mutants --local-workers`: the runs are independent processes


@dataclasses.dataclass
class ZooConfig:
    """`specdec mutants` (= `specdec campaign zoo`): which entries, the profile, and the sizes given on the command
    line (None: the profile's, suites/profiles.py). The runner adds where it writes, resuming and where the runs go."""

    seeds: int | None = option(None, "--seeds", "seeds per mutant (detection rate; default: the profile's: "
                               f"{CampaignConfig.seeds} full, {ZOO['quick']['seeds']} quick)", int, "N")
    control_seeds: int | None = option(None, "--control-seeds", "seeds per correct control (false-alarm rate; default: "
                                       f"the profile's: {CampaignConfig.control_seeds} full, "
                                       f"{ZOO['quick']['control_seeds']} quick)", int, "N")
    gate: float = option(DEFAULT_FALSE_ALARM_RATE, "--false-alarm-rate", "gate: family-wise false-alarm rate of every "
                         "run", float, "A")
    compare_plans: bool = option(False, "--compare-plans", "generation level: also run each mutant at the previous "
                                 "default plan (no contexts cells) and report its rate and time beside the default "
                                 "plan's", action="store_true")
    only: list[str] = option([], "--only", "run only these implementations", metavar="NAME", nargs="+")
    contracts: list[str] = option([], "--contract", "run only the implementations of these contracts (sampler: §1a "
                                  "verify; generation: §1b generate; tree; draft_step)", choices=CONTRACTS, nargs="+")
    profile: str = option("full", "--profile", "named sizes of suites/profiles.py (quick: the CI profile of `nox -s "
                          "lossless`, minutes)", choices=tuple(ZOO))
    quick: bool = option(False, "--quick", "the quick profile (= --profile quick): fewer seeds, no detection-vs-samples "
                         "curve (minutes)", action="store_true")
    threads: int | None = option(None, "--threads", "accepted for earlier commands: every run uses one torch thread",
                                 int, "N", hidden=True)

    def profile_name(self) -> str:
        return "quick" if self.quick else self.profile

    def plan(self) -> CampaignConfig:
        """The run's sizes: the profile's, with the flags given on the command line over them."""
        given = {k: v for k, v in (("seeds", self.seeds), ("control_seeds", self.control_seeds)) if v is not None}
        return CampaignConfig.of_profile(self.profile_name(), **given, gate=self.gate, compare_plans=self.compare_plans,
                                         only=tuple(self.only), contracts=tuple(self.contracts))


@dataclasses.dataclass
class DemoConfig:
    """`specdec demo` (= `specdec campaign demo`): the demo campaign's Config. The runner adds its options (--out:
    default results/demo, untracked; the documented example lives in docs/example-demo)."""

    JOURNALED: ClassVar[bool] = False  # every number is measured by this run: no --fresh / --report-only
    quick: bool = option(False, "--quick", "smaller samples (a minute or two)", action="store_true")


def specdec_parser(command: str):
    """The parser of `specdec COMMAND` (`specdec campaign demo` is `specdec demo`)."""
    import argparse

    from harness.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]
