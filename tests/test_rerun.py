"""`specdec run --config FILE` reruns what a result file records (docs/RESULTS-FORMAT.md)."""

from __future__ import annotations

import json

from harness.cli import main


def _strip(envelope: dict) -> dict:
    """What a rerun must reproduce: everything but the time-dependent provenance fields and timings."""
    report = {k: v for k, v in envelope["report"].items() if k not in ("seconds", "notes")}
    return {"kind": envelope["kind"], "config": envelope["config"], "seed": envelope["provenance"]["seed"],
            "report": report, "verdict": envelope["summary"]["verdict"]}


def test_a_check_report_reruns_from_its_config_to_the_same_report(tmp_path):
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    assert main(["verify", "--impl", "specdec_ref.adapters:verify", "--cases", "binary-gamma8", "--samples", "400",
                 "--seed", "7", "--json", str(first)]) == 0
    assert main(["run", "--config", str(first), "--out", str(again)]) == 0
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    assert _strip(a) == _strip(b)  # same config, seed, tests, p-values and verdict
    assert a["config"]["impl"] == "specdec_ref.adapters:verify" and a["config"]["samples"] == 400


def test_a_bare_kind_and_config_reruns_and_a_failing_one_exits_1(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"kind": "check", "config": {"impl": "harness.mutants.sampler:always_accept",
                                                           "cases": ["binary-gamma8"], "samples": 400}}))
    assert main(["run", "--config", str(path)]) == 1
    assert "specdec: FAIL" in capsys.readouterr().err


def test_what_cannot_rerun_is_exit_2_in_one_line(tmp_path, capsys):
    cases = {"missing.json": None,
             "converted.json": {"kind": "check", "config": {"not_recorded": "converted", "impl": "x:y"}},
             "unknown_field.json": {"kind": "check", "config": {"impl": "x:y", "bogus": 1}},
             "bench.json": {"kind": "bench", "config": {}},
             "nokind.json": {"config": {}}}
    for name, data in cases.items():
        if data is not None:
            (tmp_path / name).write_text(json.dumps(data))
        assert main(["run", "--config", str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("specdec: error:") and "Traceback" not in err[0], (name, err)


def test_a_campaign_on_the_runner_reruns_from_its_result_file(tmp_path, capsys):
    """`specdec run --config OUT/calibration.json` runs the families campaign again with the recorded Config into
    another folder: the same cells (its journal), the same rates."""
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["campaign", "families", "--names", "draft_noise_reused", "--seeds", "1", "--rows", "2000",
                 "--cases", "q-zero-where-p-positive", "--out", str(first)]) == 0
    assert main(["run", "--config", str(first / "calibration.json"), "--out", str(again)]) == 0
    a, b = (json.loads((d / "calibration.json").read_text()) for d in (first, again))
    assert a["kind"] == b["kind"] == "campaign.families" and a["config"] == b["config"]
    assert a["config"]["names"] == ["draft_noise_reused"] and a["config"]["rows"] == 2000
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in a["rows"]] == \
        [{k: v for k, v in r.items() if k != "seconds"} for r in b["rows"]]
    keys = [[json.loads(line)["key"] for line in (d / "journal.jsonl").read_text().splitlines()] for d in (first, again)]
    assert keys[0] == keys[1] and len(keys[0]) == 1
