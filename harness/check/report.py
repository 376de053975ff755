"""The result of a losslessness check: tests, verdict, plan; `write_json` writes it as a result envelope."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

from harness.defaults import INCONCLUSIVE_TV
from harness.records import provenance
from harness.stats import TestResult, holm


@dataclasses.dataclass
class CheckReport:
    impl: str
    level: str  # "sampler" | "generation"
    false_alarm_rate: float  # family-wise, Holm over every gating test
    target_tv: float  # the discrepancy the plan aims to detect at `power`
    power: float
    seed: int
    tests: list[TestResult] = dataclasses.field(default_factory=list)  # gating: decide the verdict
    advisories: list[TestResult] = dataclasses.field(default_factory=list)  # reported, never gating
    cases: list[dict] = dataclasses.field(default_factory=list)  # per configuration: plan, acceptance, notes
    notes: list[str] = dataclasses.field(default_factory=list)
    samples: int = 0
    seconds: float = 0.0
    device: str = "cpu"
    family: str = "chain"  # verifier family of a sampler-level implementation
    declared_tests: int = 0  # gating tests the battery declared (the Holm plan); tests may be fewer after a stop
    inconclusive_tv: float = INCONCLUSIVE_TV  # an achieved detectable TV above this makes a non-failing run INCONCLUSIVE
    processing_order: str = "standard"  # generation level: the processing convention the ground truth used
    coverage: dict = dataclasses.field(default_factory=dict)  # generation level: parameters that acted / no-ops
    responses: str | None = None  # engine level: the resumable record of every response (under --out)
    config: Any = None  # the CheckConfig / EngineConfig the run was asked with (the result file's `config`)

    def decide(self) -> CheckReport:
        """Holm across the gating tests; sets each test's `reject`."""
        self.tests = holm(self.tests, self.false_alarm_rate) if self.tests else []
        return self

    @property
    def verdict(self) -> str:
        """fail: a gating test rejects; inconclusive: nothing rejects but the achieved detectable TV is above
        the ceiling (the run could not have seen a useful error); pass otherwise."""
        if any(t.reject for t in self.tests):
            return "fail"
        tv = self.detectable_tv
        return "inconclusive" if not math.isnan(tv) and tv > self.inconclusive_tv else "pass"

    @property
    def headline(self) -> dict:
        """The run's headline guarantee: the weakest (largest) detectable TV among the gating omnibus tests that
        see one law each (a position at the sampler level, a prompt's continuation at the generation level), or,
        only where the plan has none, among the pooled tests that carry the headline, labelled as pooled.
        Positions the implementation itself reaches too rarely to test are left out (reported in the notes).
        Keys: detectable_tv, test, scope ("one law" | "pooled" | None when no test states a TV), meaning."""
        tv_tests = [t for t in self.tests if t.detectable_tv is not None
                    and t.details.get("detectable_metric", "").startswith("TV") and not math.isnan(t.detectable_tv)
                    and t.details.get("rarely_reached") is None and t.details.get("headline", True)]
        one_law = [t for t in tv_tests if t.details.get("scope", "one law") == "one law"]
        chosen = one_law or tv_tests  # inf counts: too few draws to promise anything
        if not chosen:
            return {"detectable_tv": math.nan, "test": None, "scope": None, "meaning": "no test states a TV"}
        worst = max(chosen, key=lambda t: t.detectable_tv)
        scope = "one law" if one_law else "pooled"
        default = ("TV between the emitted and the target law at each tested position" if scope == "one law" else
                   "TV between binned PIT laws pooled over many contexts: not a per-position TV")
        return {"detectable_tv": worst.detectable_tv, "test": worst.name, "scope": scope,
                "meaning": worst.details.get("guarantee", default)}

    @property
    def detectable_tv(self) -> float:
        """The headline's detectable TV (`headline`)."""
        return self.headline["detectable_tv"]

    def failure_summary(self) -> list[str]:
        """A few lines that say where the rejections are (which cell, position, kind of test)."""
        lines = summarize_rejections([t.name for t in self.tests if t.reject], self.cases)
        return lines + convention_lines(self.cases) if lines else lines

    def conventions(self) -> list[str]:
        """Processing conventions under which every failed cell's outputs fit the target (generation level)."""
        return fitting_conventions(self.cases)

    def verdict_line(self) -> str:
        """The verdict with the processing order it was judged under when one was declared."""
        order = f" under --processing-order {self.processing_order}" if self.processing_order != "standard" else ""
        return f"{self.verdict.upper()}{order}"

    @property
    def estimates(self) -> list[dict]:
        """`--estimate`: the TV estimates of every cell, position and law, with the cell's name (cell key "case")."""
        return [{"case": c["name"], **e} for c in self.cases for e in c.get("tv_estimates", [])]

    def failed_cells(self) -> set[str]:
        """Names of the cells with a rejected test (a cell's tests are named CELL/…; a cell name may hold '/')."""
        names = [c["name"] for c in self.cases]
        return {n for n in names for t in self.tests if t.reject and t.name.startswith(n + "/")}

    def estimate_lines(self, limit: int = 8) -> list[str]:
        """"TV 0.031 [0.026, 0.036] at position 2 (case, n; exact 0.030)" — failed cells first, largest first."""
        failed = self.failed_cells()
        rows = sorted(self.estimates, key=lambda e: (e["case"] not in failed, -(e["estimate"] or 0)))
        lines = []
        for e in rows[:limit]:
            where = ("over the whole continuation (joint law)" if e["position"] == "joint" else
                     f"at position {e['position']}" + (" (the bonus token)" if e.get("bonus") else ""))
            law = f", {e['law'].split('/', 1)[1]}" if "/" in e["law"] else ""
            exact = f"; exact {e['exact_tv']:.3f}" if e.get("exact_tv") is not None else ""
            lines.append(f"TV {e['estimate']:.3f} [{e['low']:.3f}, {e['high']:.3f}] {where} ({e['case']}{law}, "
                         f"n = {e['n']:,}, {e['cells']} cells{exact})")
        if len(rows) > limit:
            lines.append(f"… {len(rows) - limit} more estimates in the JSON report (\"estimates\")")
        return lines

    @property
    def wasteful(self) -> list[dict]:
        return [c for c in self.cases if c.get("wasteful")]

    def to_dict(self) -> dict:
        """The report's body (the result file's `report`); provenance and configuration are the envelope's."""
        return {
            "verdict": self.verdict,
            "impl": self.impl,
            "level": self.level,
            "tests": [t.to_dict() for t in self.tests],
            "advisories": [t.to_dict() for t in self.advisories],
            "samples": self.samples,
            "false_alarm_rate": self.false_alarm_rate,  # CONTRACT §2: the family-wise false-alarm rate
            "detectable_tv": self.detectable_tv,
            "headline": self.headline,
            "target_tv": self.target_tv,
            "power": self.power,
            "seconds": self.seconds,
            "cases": self.cases,
            "wasteful": [c["name"] for c in self.wasteful],
            "notes": self.notes,
            "family": self.family,
            "declared_tests": self.declared_tests,
            "inconclusive_tv": self.inconclusive_tv,
            "failure_summary": self.failure_summary(),
            "processing_order": self.processing_order,
            "consistent_conventions": self.conventions(),
            "coverage": self.coverage,
            "estimates": self.estimates,
        }

    def summary(self) -> dict:
        """The result file's `summary`: the verdict and the numbers that qualify it."""
        return {"verdict": self.verdict, "detectable_tv": self.detectable_tv, "samples": self.samples,
                "tests": len(self.tests), "declared_tests": self.declared_tests,
                "rejected": sum(bool(t.reject) for t in self.tests), "seconds": self.seconds}

    def provenance(self) -> dict:
        dtype = getattr(self.config, "dtype", None) or "float64"  # the statistics' dtype where no model dtype
        return provenance(seed=self.seed, device=self.device, dtype=dtype)

    def write_json(self, path: str | os.PathLike) -> Path:
        """The report as a result envelope of kind "check" (docs/RESULTS-FORMAT.md)."""
        from harness.envelope import config_dict, write_result

        config = config_dict(self.config)
        level = getattr(type(self.config), "level", None)  # EngineConfig's tier is a class constant, not a field
        if isinstance(level, str) and "level" not in config:
            config = {"level": level, **config}  # so `specdec run --config` knows which config it holds
        return write_result(path, "check", config=config, provenance=self.provenance(), report=self.to_dict(),
                            summary=self.summary())


def deterministic_result(name: str, ok: bool, *, n: int, message: str = "", **details) -> TestResult:
    """A check with no randomness in its decision (format, support, equality): p = 1 if ok else 0."""
    return TestResult(name, 0.0 if ok else 1.0, 1.0 if ok else 0.0, n=n,
                      details={"message": message, **details} if message or details else {})


# Words for the kinds of tests the batteries emit (the last part of a test name).
_KIND = {"support": "tokens the target never emits", "pooled_pearson": "emitted law ≠ target law",
         "pooled_g": "emitted law ≠ target law", "top1": "probability of the likeliest token",
         "outside_nucleus": "mass outside the 99% nucleus", "above_optimal": "acceptance above what any lossless "
         "rule allows", "above_bound": "acceptance above what any lossless rule allows",
         "above_universal_bound": "acceptance above what any lossless rule allows (the universal bound)",
         "reach_above_bound": "tree node reached more often than any lossless rule allows",
         "rows_independent": "rows not independent", "format": "output breaks the contract",
         "constraint_format": "output the constraint does not allow",
         "pit_uniform": "teacher-forced PIT not uniform", "pit_serial": "consecutive tokens dependent",
         "pit_support": "tokens the target never emits", "joint_support": "continuations the target never emits",
         "joint_pooled_pearson": "joint law of continuations ≠ target", "joint_pooled_g":
         "joint law of continuations ≠ target"}


def fitting_conventions(cases: list[dict]) -> list[str]:
    """The conventions that fit every cell whose outputs were tested against another convention (the cells
    that failed): the diagnosis is a convention only when it explains each failed cell."""
    found = [c["consistent_conventions"] for c in cases if "consistent_conventions" in c]
    if not found:
        return []
    common = set(found[0]).intersection(*found[1:])
    return [o for o in found[0] if o in common]


def convention_lines(cases: list[dict]) -> list[str]:
    """"consistent with the target under X: declare it with --processing-order X" for each fitting convention."""
    return [f"consistent with the target under {order}: declare it with --processing-order {order} (a processing "
            "convention, not a verification bug)" for order in fitting_conventions(cases)]


def _position_of(parts: list[str]) -> int | None:
    """j of a "posJ" name part (the emitted token at draft position j)."""
    for part in parts:
        if part.startswith("pos") and part[3:].isdigit():
            return int(part[3:])
    return None


def summarize_rejections(names: list[str], cases: list[dict]) -> list[str]:
    """Group rejected test names by kind and position: e.g. "all 6 rejections at position 3 = γ (the bonus
    token): emitted law ≠ target law"."""
    if not names:
        return []
    gammas = {c["name"]: c.get("gamma") for c in cases}
    by_kind: dict[str, list[str]] = {}
    positions: set[str] = set()
    cells: set[str] = set()
    for name in names:
        parts = name.split("/")
        kind = next((k for k in reversed(parts) if k in _KIND), parts[-1].rstrip("0123456789"))
        by_kind.setdefault(kind, []).append(name)
        cells.add(parts[0])
        j = _position_of(parts)
        if j is not None:
            bonus = " = γ (the bonus token)" if gammas.get(parts[0]) == j else ""
            positions.add(f"position {j}{bonus}")
    lines = [f"{len(names)} rejection{'s' * (len(names) > 1)} in {len(cells)} of {len(cases)} cells "
             f"({', '.join(sorted(cells)[:6])}{', …' if len(cells) > 6 else ''})"]
    if len(positions) == 1:
        lines.append(f"every position-law rejection is at {positions.pop()}")
    elif positions:
        lines.append(f"position-law rejections at {len(positions)} positions: {', '.join(sorted(positions))}")
    for kind, members in sorted(by_kind.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"{len(members)} × {_KIND.get(kind, kind)} ({kind})")
    return lines
