"""TestResult serializes to plain JSON, and the statistics package stays free of torch."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from harness.stats.result import TestResult


def test_to_dict_is_plain_json_with_nonfinite_as_none():
    result = TestResult(
        "pos0/pooled_pearson",
        np.float64(12.5),
        np.float64(float("nan")),
        n=np.int64(5000),
        df=np.int64(3),
        detectable_tv=float("inf"),
        details={"edges": np.array([0.0, 0.5, 1.0]), "flag": np.bool_(True), 3: (np.float32(1.5), -np.inf)},
    )
    record = result.to_dict()
    assert json.loads(json.dumps(record, allow_nan=False)) == record
    assert record["statistic"] == 12.5 and type(record["statistic"]) is float
    assert record["p_value"] is None and record["detectable_tv"] is None
    assert record["n"] == 5000 and type(record["n"]) is int
    assert record["details"] == {"edges": [0.0, 0.5, 1.0], "flag": True, "3": [1.5, None]}
    assert record["reject"] is False


def test_to_dict_refuses_values_without_a_json_form():
    with pytest.raises(TypeError, match="set"):
        TestResult("x", 0.0, 1.0, n=1, details={"bad": {1, 2}}).to_dict()


@pytest.mark.end_to_end
def test_stats_package_imports_without_torch():
    code = "import sys, harness.stats; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
