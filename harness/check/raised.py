"""The report of an implementation that raised, hung or returned no output: a FAIL, never an exception.

`run_verify` lets an `ImplementationError` (harness.adapters.calling) out: the CLI turns it into exit 1 with the
exception and the user's own frame (file:line). The Python API (`specdec.verify`) and the assertion helpers
(harness.testing) go through `verify_reporting`, which returns the same verdict as a report: verdict "fail", one
rejected gating test named "<level>/implementation", and `failure_summary()` giving that one line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from harness.adapters.calling import ImplementationError
from harness.check.report import CheckReport, deterministic_result


@dataclasses.dataclass
class ImplementationFailure(CheckReport):
    """A CheckReport whose run stopped because the implementation raised, hung or returned no output."""

    error: str = ""  # the ImplementationError's one line: what it did, during what, at which file:line

    def failure_summary(self) -> list[str]:
        return [self.error]

    def to_dict(self) -> dict:
        return {**super().to_dict(), "implementation_error": self.error}


def failure_report(config, exc: ImplementationError, seconds: float = 0.0) -> ImplementationFailure:
    """The FAIL report of `config`'s check whose implementation raised `exc`."""
    from harness.check.api import REPORT_LEVEL, contract_of

    level = REPORT_LEVEL.get(contract_of(config), config.level)
    impl = getattr(config, "impl", None)
    name = impl if isinstance(impl, str) else f"{getattr(impl, '__module__', '?')}:{getattr(impl, '__qualname__', impl)}"
    report = ImplementationFailure(
        impl=name, level=level, false_alarm_rate=config.false_alarm_rate,
        target_tv=getattr(config, "tv", None) or 0.0, power=config.power, seed=config.seed,
        family=getattr(config, "family", "chain"), declared_tests=1, seconds=seconds, device=getattr(config, "device", "cpu"),
        inconclusive_tv=config.inconclusive_tv, config=config, error=str(exc),
        tests=[deterministic_result(f"{level}/implementation", False, n=0, message=str(exc))])
    return report.decide()


def verify_reporting(config, progress: Callable | None = None) -> CheckReport:
    """`run_verify(config)`, but an implementation that raises, hangs or returns no output gives a FAIL report."""
    from harness.check.api import run_verify

    started = time.perf_counter()
    try:
        return run_verify(config, progress=progress)
    except ImplementationError as exc:
        return failure_report(config, exc, time.perf_counter() - started)
