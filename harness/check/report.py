"""The result of a losslessness check: tests, verdict, plan, provenance (the `--json` schema)."""

from __future__ import annotations

import dataclasses
import math

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

    def decide(self) -> CheckReport:
        """Holm across the gating tests; sets each test's `reject`."""
        self.tests = holm(self.tests, self.false_alarm_rate) if self.tests else []
        return self

    @property
    def verdict(self) -> str:
        return "fail" if any(t.reject for t in self.tests) else "pass"

    @property
    def detectable_tv(self) -> float:
        """The weakest guarantee among the omnibus distribution tests (largest detectable TV)."""
        values = [t.detectable_tv for t in self.tests if t.detectable_tv is not None
                  and t.details.get("detectable_metric", "").startswith("TV") and math.isfinite(t.detectable_tv)]
        return max(values) if values else math.nan

    @property
    def wasteful(self) -> list[dict]:
        return [c for c in self.cases if c.get("wasteful")]

    def to_dict(self) -> dict:
        meta = provenance(seed=self.seed, device=self.device, dtype="float64")
        return {
            "verdict": self.verdict,
            "impl": self.impl,
            "level": self.level,
            "tests": [t.to_dict() for t in self.tests],
            "advisories": [t.to_dict() for t in self.advisories],
            "samples": self.samples,
            "alpha": self.false_alarm_rate,  # CONTRACT §2: the suite false-alarm rate
            "false_alarm_rate": self.false_alarm_rate,
            "detectable_tv": self.detectable_tv,
            "target_tv": self.target_tv,
            "power": self.power,
            "seed": self.seed,
            "versions": meta["versions"],
            "git_commit": meta["git_commit"],
            "device": meta["device"],
            "utc_time": meta["utc_time"],
            "seconds": self.seconds,
            "cases": self.cases,
            "wasteful": [c["name"] for c in self.wasteful],
            "notes": self.notes,
        }


def deterministic_result(name: str, ok: bool, *, n: int, message: str = "", **details) -> TestResult:
    """A check with no randomness in its decision (format, support, equality): p = 1 if ok else 0."""
    return TestResult(name, 0.0 if ok else 1.0, 1.0 if ok else 0.0, n=n,
                      details={"message": message, **details} if message or details else {})
