"""The record every statistical check returns.

A `TestResult` carries the two numbers of the TFP contract (TensorFlow Probability's
`statistical_testing`): the p-value, judged later against a family-wise level by `holm`, and the
detectable discrepancy at the planned power, so a report can say both "passed" and "what a pass rules
out". Checks never decide `reject` themselves: multiplicity correction owns that decision.
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass, field, fields
from typing import Any

import numpy as np


@dataclass
class TestResult:
    """Outcome of one statistical check.

    name:          stable identifier, e.g. "pos0/pooled_pearson".
    statistic:     the test statistic (larger = further from the null for omnibus tests).
    p_value:       probability under the null of a statistic at least this extreme.
    reject:        set by `multiplicity.holm`; False until then.
    detectable_tv: smallest discrepancy this check catches at the planned power, in the metric the test
                   sees (``details["detectable_metric"]`` names it: TV between the pooled/binned laws for
                   omnibus tests, |shift of the event probability| for event tests). None: no promise.
    n:             number of draws the test used.
    df:            degrees of freedom for chi-square type tests, else None.
    details:       anything else worth reporting (JSON-safe after `to_dict`).
    """

    __test__ = False  # the name starts with "Test"; keep pytest from collecting it

    name: str
    statistic: float
    p_value: float
    _: KW_ONLY
    n: int
    reject: bool = False
    detectable_tv: float | None = None
    df: int | None = None
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python dict for JSON: numpy scalars/arrays converted, nan and inf mapped to None."""
        return {f.name: _json_safe(getattr(self, f.name)) for f in fields(self)}


def _json_safe(value: Any) -> Any:
    # bool before int: bool is an int subclass, and np.bool_ is neither.
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    raise TypeError(f"TestResult.details holds a {type(value).__name__}, which has no JSON form")
