"""The sequential study's criteria: they must flag a miscalibrated control and a slow or missed mutant."""

import pytest

from suites.campaigns.sequential import calibration_ok, power_ok, summarise


def _cal(fails: int, runs: int = 200) -> list[dict]:
    return [{"name": "reference_verify", "purpose": "calibrate", "seed": s, "fail": s < fails, "samples": 100,
             "planned": 100, "stopped_early": False, "fixed_plan": None, "family_anytime_p": 0.5,
             "rejected": ["x/top1"] if s < fails else [], "seconds": 1.0} for s in range(runs)]


def _power(fraction: float, caught: bool = True) -> list[dict]:
    return [{"name": "always_accept", "purpose": "power", "seed": s, "fail": caught, "samples": int(1000 * fraction),
             "planned": 1000, "stopped_early": True, "fixed_plan": 1000, "family_anytime_p": 0.0,
             "rejected": [], "seconds": 1.0} for s in range(20)]


def test_calibration_criterion_is_a_rate_not_zero():
    assert not calibration_ok(summarise(_cal(1))["calibration"])  # 1/200 is consistent with 1e-3
    problems = calibration_ok(summarise(_cal(4))["calibration"])  # 4/200: binomial p ≈ 6e-5
    assert problems and "4/200" in problems[0]
    row = summarise(_cal(1))["calibration"][0]
    assert row["failed_tests"] == ["x/top1"] and row["runs"] == 200


def test_power_criterion_flags_slow_and_missed_mutants():
    assert not power_ok(summarise(_power(0.05))["power"])
    assert power_ok(summarise(_power(0.2))["power"])
    assert power_ok(summarise(_power(0.05, caught=False))["power"])
    assert summarise(_power(0.05))["power"][0]["median_fraction"] == 0.05


@pytest.mark.parametrize("value", ["abc", "0", "1.5"])
def test_bad_calibration_tv_is_a_usage_error(value, capsys):
    from harness.cli import main

    assert main(["campaign", "sequential", "--calibrate", "--calibration-tv", value]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--calibration-tv" in err


@pytest.mark.stochastic(false_alarm=0.001, seed=10000)  # no false FAIL 0.001
def test_sequential_campaign_runs_on_the_cell_runner_and_resumes(tmp_path):
    import json

    from harness.cli import main as specdec

    def main(argv):
        return specdec(["campaign", "sequential", *argv])

    out = tmp_path / "seq"
    args = ["--calibrate", "--calibration-seeds", "1", "--variant-seeds", "0", "--calibration-tv", "0.3",
            "--local-workers", "1", "--out", str(out)]
    assert main(args) == 0
    first = json.loads((out / "runs.json").read_text())["rows"]
    assert len(first) == 1 and not first[0]["fail"] and len((out / "journal.jsonl").read_text().splitlines()) == 1
    assert main([*args, "--budget-s", "0"]) == 0  # nothing starts; the journal holds the run
    assert [r["seed"] for r in json.loads((out / "runs.json").read_text())["rows"]] == [first[0]["seed"]]
    assert main([*args, "--calibration-seeds", "2", "--budget-s", "0"]) == 2  # one planned run not made
    assert "planned runs not made" in (out / "report.md").read_text()
