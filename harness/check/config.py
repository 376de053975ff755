"""`CheckConfig`: the one description of a losslessness check (light: no torch, numpy or scipy on import).

`specdec verify` builds its flags from these fields and the pytest plugin its `--specdec-*` options
(harness.configs), so the CLI, the plugin and the Python API share every default.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.configs import option
from harness.defaults import (  # noqa: F401 - re-exported: their one home
    DEFAULT_FALSE_ALARM_RATE,
    DEFAULT_POWER,
    INCONCLUSIVE_TV,
)
from harness.errors import HarnessError, UnknownNameError

DEFAULT_TV = 0.02  # chain / block / draft-and-verify: detectable total variation per tested position
DEFAULT_TREE_TV = 0.05  # tree family: per tested node (trees are wide; `--tv` overrides it like any default)
DEFAULT_MAX_ROWS = 400_000  # cap on the trials of one cell (a rarely reached position keeps sampling up to this)
MIN_REACH = 0.1  # chain positions reached with lower probability are reported, not in the headline TV
MIN_NODE_REACH = 0.05  # tree nodes reached with lower probability (by the reference) are not law-tested
DEFAULT_GAMMA = 3
LEVELS = ("sampler", "generation", "engine")  # --level
PROCESSING_ORDERS = ("standard", "top_p_before_temperature", "top_k_after_top_p", "penalties_after_temperature",
                     "llama_cpp")
FAMILIES = ("chain", "block", "tree")
STEPS = ("verify", "draft_and_verify", "masked")  # masked: the step receives the allowed-token masks (structured)


def _rate(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise HarnessError(f"the false-alarm rate must be in (0, 1), got {text}")
    return value


# The CheckConfig fields the pytest plugin exposes as --specdec-* options (the fixtures' defaults); kept here so
# that rendering them (the docs) needs no pytest.
PYTEST_OPTION_FIELDS = ("false_alarm_rate", "tv", "power", "seed", "samples")


@dataclasses.dataclass
class CheckConfig:
    """Everything a losslessness check depends on; `specdec verify` flags and the pytest options are built
    from these fields (harness.configs)."""

    impl: Any = option(None, "--impl", "MODULE:CALLABLE, e.g. specdec_ref.adapters:verify (the implementation "
                       "under test)", metavar="MODULE:CALLABLE", group='what to check')
    level: str = option("sampler", "--level", "sampler: one verification step (contract §1a); generation: a "
                        "whole generate() (§1b); engine: a served engine over HTTP", choices=LEVELS, group='what to check')
    family: str = option("chain", "--family", "verifier family of a sampler-level implementation: chain "
                         "(token by token), block (block verification), tree", choices=FAMILIES, group='what to check')
    step: str = option("verify", "--step", "sampler level: what the implementation does in one step — verify "
                       "(the harness draws the drafts, contract §1a), draft_and_verify (it draws its own drafts from "
                       "q and verifies them, §1e) or masked (structured outputs: a verify step that also receives "
                       "the allowed-token mask of every position, verify_masked(target_probs, draft_probs, "
                       "draft_tokens, allowed, generator), docs/STRUCTURED.md)", choices=STEPS,
                       group='what to check')
    pair: str = option("toy", "--pair", "generation level: model pair (see `specdec pairs`)", metavar="NAME", group="generation level (--level generation; the engine level's local ground truth too)")
    target: str | None = option(None, "--target", "generation level: target checkpoint (hub id or local path), "
                                "with --draft", metavar="PATH", group="generation level (--level generation; the engine level's local ground truth too)")
    draft: str | None = option(None, "--draft", "generation level: draft checkpoint, with --target", metavar="PATH", group="generation level (--level generation; the engine level's local ground truth too)")
    false_alarm_rate: float = option(DEFAULT_FALSE_ALARM_RATE, "--false-alarm-rate", "family-wise false-alarm "
                                     "rate: a correct implementation fails with probability <= this", _rate, "A", group='statistics: false alarms, power, sample size (every level)')
    tv: float | None = option(None, "--tv", f"sampler level: smallest total variation to detect at --power at "
                              f"every tested position (default {DEFAULT_TV:g}; tree family {DEFAULT_TREE_TV:g})",
                              float, "EPS", group='statistics: false alarms, power, sample size (every level)')
    power: float = option(DEFAULT_POWER, "--power", "probability of detecting a discrepancy of --tv", float, "P", group='statistics: false alarms, power, sample size (every level)')
    seed: int = option(0, "--seed", "seed of every random draw of the run", int, "S", group='statistics: false alarms, power, sample size (every level)')
    samples: int | None = option(None, "--samples", "override the planned trials (per case / per prompt and "
                                 "setting)", int, "N", group='statistics: false alarms, power, sample size (every level)')
    cases: list[str] | None = option(None, "--cases", "sampler level: run only these configurations", metavar="CASE",
                                     nargs="+")
    gamma: int = option(DEFAULT_GAMMA, "--gamma", "generation level: drafted tokens per step (engine level: the "
                        "server's, for the exact law of --served-impl)", int, "G", group="generation level (--level generation; the engine level's local ground truth too)")
    length: int | None = option(None, "--length", "generation and engine levels: new tokens per sample (default "
                                "3 for V <= 64, where the exact joint law is enumerated, else 16)", int, "N", group="generation level (--level generation; the engine level's local ground truth too)")
    device: str = option("cpu", "--device", "torch device (cpu, cuda, cuda:1, ...)", metavar="DEV", group='running')
    dtype: str | None = option(None, "--dtype", "generation level: model dtype, e.g. bfloat16 (default float32 on "
                               "CPU); greedy divergences are then classified against that dtype's rounding",
                               metavar="DT", group="generation level (--level generation; the engine level's local ground truth too)")
    time_budget_s: float | None = option(None, "--time-budget", "generation level: stop sampling after this many "
                                         "seconds (the achieved detectable TV is reported)", float, "SECONDS", group="generation level (--level generation; the engine level's local ground truth too)")
    max_rows: int = option(DEFAULT_MAX_ROWS, "--max-rows", "sampler level: cap on the rows of one case (a position reached "
                           "less often than planned keeps sampling up to this)", int, "N", group='statistics: false alarms, power, sample size (every level)')
    inconclusive_tv: float = option(INCONCLUSIVE_TV, "--inconclusive-tv", "a run whose achieved detectable TV is "
                                    "above this is INCONCLUSIVE (exit 3), not PASS", float, "EPS", group='statistics: false alarms, power, sample size (every level)')
    settings: list[str] | None = option(None, "--setting", "generation level: a sampling setting, e.g. "
                                        "'T=0.8,top_p=0.95,min_p=0.05,repetition_penalty=1.2,logit_bias=5:+1' (repeatable), "
                                        "or 'battery' / 'default' (greedy, T=0.7/top-p 0.9, T=1)", action="append", group="generation level (--level generation; the engine level's local ground truth too)")
    # The processing conventions of specdec_ref.processing.ORDERS (written out: this module stays torch-free).
    processing_order: str = option("standard", "--processing-order", "generation level: the processing "
                                   "convention the implementation declares", choices=PROCESSING_ORDERS, group="generation level (--level generation; the engine level's local ground truth too)")
    # "auto" (the default): the catalogue at the generation level, where its plan (pooled TV 0.0195 on the toy pair)
    # took 0.97x the prompt-only plan's time (TV 0.037) with the KV-cached reference (results/contexts/README.md) and a
    # generate() that recomputes every position took 25 s per setting; the catalogue at the engine level too wherever
    # a local target scores the outputs (--pair or --target, ground truth local), the prompts only otherwise.
    contexts: str = option("auto", "--contexts", "generation level: 'catalogue' adds cells that pool the PIT "
                           "over many contexts (suites/catalogues/contexts.py: spread prompt lengths, long continuations, the "
                           "model's own samples; at the engine level too, with --pair or --target); 'none': the pair's "
                           "prompts only; 'auto' (default): the catalogue, except at the engine level against a reference "
                           "endpoint (no local target: the prompts only)",
                           choices=("auto", "catalogue", "none"),
                           group="generation level (--level generation; the engine level's local ground truth too)")
    score_dtype: str = option("float64", "--score-dtype", "generation level: precision of the ground truth the "
                              "outputs are scored against: float64 (a float64 copy of the target, exact; twice "
                              "its memory) or model (the target as loaded: cheaper, the precision it runs in)",
                              choices=("float64", "model"), group="generation level (--level generation; the engine level's local ground truth too)")
    timeout_s: float | None = option(None, "--timeout", "one implementation call longer than this fails the run "
                                     "(a hang is a bug: exit 1)", float, "SECONDS", group='running')
    sequential: bool = option(False, "--sequential", "anytime-valid early stopping (e-processes, Ville's "
                              "inequality): stop at the first crossing, else decide at the planned n (levels without "
                              "e-processes run their fixed-n plan and say so)",
                              action="store_true", group='statistics: false alarms, power, sample size (every level)')
    estimate: bool = option(False, "--estimate", "also estimate how far the emitted law is from the target: a "
                            "bias-corrected TV with a 95%% confidence interval at every tested position (sampler "
                            "level), of the whole continuation and of each position at a prompt (generation level, "
                            "and engine level with a local toy pair: pairs with an exact joint law); beside the exact "
                            "TV for a zoo entry with an exact law (engine level: --served-impl); in the report and the "
                            "JSON (docs/ESTIMATES.md)", action="store_true",
                            group='statistics: false alarms, power, sample size (every level)')
    fail_estimate: bool = option(True, "--no-fail-estimate", "do not estimate the TV in the cells that fail (by "
                                 "default a FAIL report carries, for each failing cell, the --estimate lines: 'TV "
                                 "0.031 [0.026, 0.036] at position 2'; cells that pass cost nothing)",
                                 action="store_false",
                                 group='statistics: false alarms, power, sample size (every level)')
    stop_on_fail: bool = option(True, "--no-early-stop", "draw every planned sample even after the verdict is "
                                "decided", action="store_false", group='statistics: false alarms, power, sample size (every level)')

    def __post_init__(self):
        if self.tv is None:  # the family's default; an explicit --tv is kept whatever the family
            self.tv = DEFAULT_TREE_TV if self.family == "tree" else DEFAULT_TV

    @classmethod
    def build(cls, config: CheckConfig | None = None, **fields) -> CheckConfig:
        """`config` with `fields` replaced (or a new config from `fields`)."""
        if config is None:
            return cls(**fields)
        return dataclasses.replace(config, **fields) if fields else config

    def validate(self) -> CheckConfig:
        """Raise HarnessError naming the bad setting; return self."""
        if self.impl is None and self.level != "engine":
            raise HarnessError("give the implementation under test: --impl MODULE:CALLABLE "
                               "(e.g. specdec_ref.adapters:verify)")
        if self.step not in STEPS:
            raise HarnessError(f"--step must be one of {', '.join(STEPS)}, got {self.step!r}")
        if self.family == "tree" and self.step != "verify":
            raise HarnessError("--family tree takes --step verify (the harness draws the tree's nodes)")
        if self.length is not None and self.length < 1:
            raise HarnessError(f"--length must be >= 1, got {self.length}")
        if self.level not in LEVELS:
            raise HarnessError(f"--level must be one of {', '.join(LEVELS)}, got {self.level!r}")
        if self.family not in FAMILIES:
            raise UnknownNameError("verifier family (--family)", self.family, list(FAMILIES))
        for flag, value in (("--false-alarm-rate", self.false_alarm_rate), ("--tv", self.tv),
                            ("--power", self.power), ("--inconclusive-tv", self.inconclusive_tv)):
            if not (isinstance(value, (int, float)) and 0 < value < 1):
                raise HarnessError(f"{flag} must be in (0, 1), got {value}")
        for flag, value in (("--samples", self.samples), ("--gamma", self.gamma), ("--max-rows", self.max_rows)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise HarnessError(f"{flag} must be >= 1 (an integer), got {value}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise HarnessError(f"--timeout must be > 0 seconds, got {self.timeout_s}")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise HarnessError(f"--time-budget must be > 0 seconds, got {self.time_budget_s}")
        if bool(self.target) != bool(self.draft):
            raise HarnessError("give both --target and --draft (or neither, and --pair)")
        return self


@dataclasses.dataclass
class VerifyOptions:
    """`specdec verify`'s own options: what it prints and writes, and its exit code (not the check's settings)."""

    allow_inconclusive: bool = option(False, "--allow-inconclusive", "exit 0 on an INCONCLUSIVE verdict",
                                      action="store_true")
    json: str | None = option(None, "--json", "write the machine-readable report here", metavar="PATH")
    verbose: bool = option(False, "--verbose", "print every test, not only rejections", action="store_true",
                           aliases=("-v",))


_MATRIX = "a matrix of configurations (harness.check.matrix)"


@dataclasses.dataclass
class MatrixOptions:
    """`specdec verify --vary`: the cross product of configurations, here or on dask workers."""

    vary: list[str] | None = option(None, "--vary", "run the cross product of these values of a verify field "
                                    "(repeatable), e.g. --vary impl=a:f,b:g --vary gamma=1,3; one --vary setting=... "
                                    "per sampling setting", metavar="FIELD=V1,V2", action="append", group=_MATRIX)
    scheduler: str | None = option(None, "--scheduler", "with --vary: run the cells on this dask scheduler's workers",
                                   metavar="ADDRESS", group=_MATRIX)
    workers: int | None = option(None, "--workers", "with --vary: run the cells on a local dask cluster", int, "N",
                                 group=_MATRIX)
    matrix_out: str | None = option(None, "--matrix-out", "with --vary: report.md, matrix.json and the cell journal "
                                    "journal.jsonl, whose finished cells a rerun keeps (the report marks them) "
                                    "(default: the policy's, suites/outputs.py)", metavar="DIR", group=_MATRIX)
    fresh: bool = option(False, "--fresh", "with --vary: forget --matrix-out's journal, run every cell again",
                         action="store_true", group=_MATRIX)


@dataclasses.dataclass
class NumericsConfig:
    """`specdec numerics`: greedy output with vs without speculation in low precision, divergences classified."""

    impl: str = option("specdec_ref.adapters:generate", "--impl", "MODULE:CALLABLE (generation level)",
                       metavar="MODULE:CALLABLE")
    pair: str = option("smollm2", "--pair", "registered pair (see `specdec pairs`)", metavar="NAME")
    target: str | None = option(None, "--target", "target checkpoint (hub id or local path), with --draft",
                                metavar="PATH")
    draft: str | None = option(None, "--draft", "draft checkpoint, with --target", metavar="PATH")
    dtype: str = option("bfloat16", "--dtype", "the low precision to examine (bfloat16 or float16)", metavar="DT")
    prompts: int = option(20, "--prompts", "prompts of the pair to run", int, "N")
    max_new_tokens: int = option(48, "--max-new-tokens", "new tokens per prompt", int, "N")
    gamma: int = option(4, "--gamma", "drafted tokens per step", int, "G")
    seed: int = option(0, "--seed", "seed of the implementation's draws", int, "S")
    device: str = option("cpu", "--device", "torch device", metavar="DEV")
    out: str | None = option(None, "--out", "results folder (default: the policy's, suites/outputs.py)",
                             metavar="DIR")
