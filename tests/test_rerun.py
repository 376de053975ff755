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


def test_an_engine_report_reruns_from_its_config_against_the_endpoint_it_names(tmp_path):
    """`specdec verify --level engine ... --json F` records the whole EngineConfig (endpoint, --served-impl, the
    parsed sampling setting, the resolved checks and contexts); `specdec run --config F` reruns that check against
    the same server: the same config, requests (seeded), tests, p-values and verdict."""
    from harness.pairs import get_pair
    from harness.served.serve import serving
    from specdec_ref.adapters import generate

    first, again = tmp_path / "first.json", tmp_path / "again.json"
    with serving(generate, get_pair("toy")) as server:
        url = server.url + "/v1"
        code = main(["verify", "--level", "engine", "--endpoint", url, "--pair", "toy", "--samples", "200",
                     "--prompts", "1", "--chunk", "200", "--contexts", "none", "--engine-checks", "tokens",
                     "--setting", "T=0.8,top_p=0.9,logit_bias=3:+1", "--served-impl", "specdec_ref.adapters:generate",
                     "--seed", "5", "--json", str(first)])
        assert code in (0, 3)  # a tiny plan: PASS or INCONCLUSIVE, never FAIL
        assert main(["run", "--config", str(first), "--out", str(again)]) == code
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    config = a["config"]
    assert config["level"] == "engine" and config["endpoint"] == url and config["pair"] == "toy"
    assert config["served_impl"] == "specdec_ref.adapters:generate" and config["samples"] == 200
    assert [s["temperature"] for s in config["settings"]] == [0.8] and config["settings"][0]["logit_bias"] == [[3, 1.0]]
    assert a["report"]["level"] == b["report"]["level"] == "engine"
    assert _strip(a) == _strip(b)


def test_an_engine_config_without_its_endpoint_is_exit_2_in_one_line(tmp_path, capsys):
    """Engine reports written before the config was complete recorded the driver's settings only: not rerun."""
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"kind": "check", "config": {"level": "engine", "samples": 2000, "seed": 0}}))
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no endpoint" in err[0]


def test_a_dry_run_checks_the_recorded_config_and_runs_nothing(tmp_path, capsys):
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    assert main(["verify", "--impl", "specdec_ref.adapters:verify", "--cases", "binary-gamma8", "--samples", "400",
                 "--seed", "7", "--json", str(first)]) == 0
    capsys.readouterr()
    assert main(["run", "--config", str(first), "--out", str(again), "--dry-run"]) == 0
    assert "would rerun the sampler-level check of specdec_ref.adapters:verify" in capsys.readouterr().out
    assert not again.exists()
    data = json.loads(first.read_text())
    data["config"]["cases"] = ["no-such-case"]
    first.write_text(json.dumps(data))
    assert main(["run", "--config", str(first), "--dry-run"]) == 2  # what the run would refuse before its first row
    assert "no-such-case" in capsys.readouterr().err


def test_a_dry_run_of_a_campaign_prints_its_command_and_creates_no_folder(tmp_path, capsys):
    path, out = tmp_path / "calibration.json", tmp_path / "out"
    path.write_text(json.dumps({"kind": "campaign.families", "config": {"names": ["draft_noise_reused"], "seeds": 1}}))
    assert main(["run", "--config", str(path), "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "would run specdec campaign families --names draft_noise_reused --seeds 1 --out" in printed
    assert not out.exists()


def test_every_committed_result_dry_runs_or_is_refused_in_one_line(capsys):
    """Every tracked results/**/*.json envelope (and the demo's documented example): `specdec run --config F
    --dry-run` either accepts its config (exit 0) or refuses it in one line (exit 2: recorded before configs were
    complete, or a kind that does not rerun), never a traceback. At least the 15 that accept today (12 reports and campaigns, the demo example's 3 sweeps) keep accepting."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    listed = subprocess.run(["git", "ls-files", "results", "docs/example-demo"], cwd=root, capture_output=True,
                            text=True, check=True).stdout.split()
    accepted = 0
    for name in (n for n in listed if n.endswith(".json")):
        data = json.loads((root / name).read_text())
        if not (isinstance(data, dict) and "kind" in data):
            continue
        code = main(["run", "--config", str(root / name), "--dry-run"])
        out, err = capsys.readouterr()
        assert code in (0, 2) and "Traceback" not in out + err, (name, code, err)
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and err.startswith("specdec: error:"), (name, err)
        accepted += code == 0
    assert accepted >= 15


def test_a_bench_result_reruns_into_another_folder(tmp_path, capsys):
    """`specdec run --config OUT/RUN/rows.json --out AGAIN` runs the recorded sweep again into AGAIN/RUN (never into
    the folder it was read from): the same cells."""
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["bench", "--pair", "toy", "--gamma", "2", "--temperature", "1", "--repeats", "1", "--prompts", "1",
                 "--max-new-tokens", "4", "--threads", "1", "--out", str(first), "--run", "tiny", "--no-resume"]) == 0
    assert main(["run", "--config", str(first / "tiny" / "rows.json"), "--out", str(again), "--dry-run"]) == 0
    assert not again.exists() and f"into {again}/tiny" in capsys.readouterr().out
    assert main(["run", "--config", str(first / "tiny" / "rows.json"), "--out", str(again)]) == 0
    a, b = (json.loads((d / "tiny" / "rows.json").read_text()) for d in (first, again))
    assert a["kind"] == b["kind"] == "bench" and b["config"]["out"] == str(again)
    assert {k: v for k, v in a["config"].items() if k != "out"} == {k: v for k, v in b["config"].items() if k != "out"}
    assert [r.get("gamma") for r in a["rows"]] == [r.get("gamma") for r in b["rows"]]
