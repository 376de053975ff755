"""The one result format (docs/RESULTS-FORMAT.md): the envelope, its committed JSON Schema, the check report."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from harness.envelope import (
    NOT_RECORDED,
    SCHEMA_PATH,
    Envelope,
    Provenance,
    json_schema,
    read_result,
    write_result,
)
from harness.records import provenance

ROOT = Path(__file__).resolve().parent.parent


def _validator():
    schema = json.loads((ROOT / SCHEMA_PATH).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_committed_schema_is_generated_from_the_dataclasses():
    committed = json.loads((ROOT / SCHEMA_PATH).read_text(encoding="utf-8"))
    assert committed == json_schema(), "regenerate it: python tools/gen_result_schema.py"


@dataclasses.dataclass
class _Config:
    seed: int = 1
    impl: object = None


def test_written_envelope_validates_and_reads_back(tmp_path):
    path = write_result(tmp_path / "r.json", "campaign.example", config=_Config(impl=len),
                        provenance=provenance(seed=1), rows=[{"a": float("nan")}], summary={"ok": True})
    data = json.loads(path.read_text())
    _validator().validate(data)
    assert list(data) == ["schema_version", "kind", "config", "provenance", "rows", "summary"]
    assert data["rows"] == [{"a": None}] and data["config"] == {"seed": 1, "impl": "builtins:len"}
    assert set(data["provenance"]) == {f.name for f in dataclasses.fields(Provenance)}
    assert read_result(path).summary == {"ok": True}


def test_rows_or_report_exactly_one_and_provenance_complete(tmp_path):
    meta = provenance(seed=None)
    with pytest.raises(ValueError, match="exactly one"):
        Envelope("check", {}, meta, {}, rows=[], report={})
    with pytest.raises(ValueError, match="exactly one"):
        Envelope("check", {}, meta, {})
    with pytest.raises(ValueError, match="missing"):
        write_result(tmp_path / "r.json", "check", config={}, provenance={"seed": 0}, report={})
    with pytest.raises(ValueError, match="kind"):
        Envelope("Not A Kind", {}, meta, {}, rows=[])
    unknown = dict(meta, machine=NOT_RECORDED, versions=NOT_RECORDED, seed=NOT_RECORDED)
    _validator().validate(Envelope("check", {}, unknown, {}, report={}).to_dict())
    bad = Envelope("check", {}, unknown, {}, report={}).to_dict()
    bad["provenance"]["seed"] = "guessed"
    with pytest.raises(jsonschema.ValidationError):
        _validator().validate(bad)


def _tracked_results() -> list[str]:
    import subprocess

    out = subprocess.run(["git", "ls-files", "results", "docs/example-demo"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return [p for p in out if p.endswith(".json")]


def test_every_tracked_result_file_is_an_envelope_that_validates():
    """CI: every committed results/**/*.json (and the demo's documented example) against the committed schema.
    JSONL files are journals (resume state, raw per-cell records), not results: docs/RESULTS-FORMAT.md."""
    paths = _tracked_results()
    assert len(paths) > 100
    validator = _validator()
    bad = {}
    for rel in paths:
        data = json.loads((ROOT / rel).read_text(encoding="utf-8"))
        errors = sorted(validator.iter_errors(data), key=lambda e: list(e.path))
        if errors:
            bad[rel] = errors[0].message[:200]
    assert not bad, bad


def _keys(x):
    if isinstance(x, dict):
        for key, value in x.items():
            yield key
            yield from _keys(value)
    elif isinstance(x, list):
        for value in x:
            yield from _keys(value)


def test_no_result_file_uses_alpha_for_two_things():
    """α is the acceptance rate (bench rows: acceptance_rate); a check report's false-alarm rate is false_alarm_rate,
    the zoo's nominal level nominal_rate: no key of any result file, at any depth, is "alpha"."""
    for rel in _tracked_results():
        data = json.loads((ROOT / rel).read_text(encoding="utf-8"))
        assert "alpha" not in set(_keys(data)), rel
        if data["kind"] == "check":
            assert "false_alarm_rate" in data["report"], rel


@pytest.mark.lint
def test_every_json_file_a_command_writes_goes_through_write_result():
    """One writer: no module of harness/ or suites/ writes a JSON file past harness.envelope.write_result."""
    import re

    allowed = {"harness/records.py", "harness/envelope.py",
               "harness/models/smollm2.py",  # writes a model folder's config.json (a checkpoint, not a result)
               "harness/engines/onnxruntime_genai_worker.py"}  # the engine's genai_config.json (a model, not a result)
    # a JSON written by hand: atomic_write_json, or json.dump(s) into a file that ends in .json
    pattern = re.compile(r"atomic_write_json\(|json\.dump\(|\.json\"?\)?\.write_text\(json\.dumps")
    found = []
    for package in ("harness", "suites"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in allowed:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line) and "import" not in line:
                    found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, found


@pytest.mark.parametrize("field,value", [("seed", "guessed"), ("seed", 1.5), ("seed", [1, "2"]), ("versions", "1.0"),
                                         ("device", None), ("utc_time", 0)])
def test_a_provenance_field_of_the_wrong_type_is_refused_before_writing(tmp_path, field, value):
    with pytest.raises(ValueError, match=field):
        write_result(tmp_path / "r.json", "check", config={}, provenance={**provenance(seed=0), field: value},
                     report={})
    assert not (tmp_path / "r.json").exists()


def test_a_pytest_benchmark_record_is_written_as_an_envelope(tmp_path):
    """`nox -s benchmarks` runs pytest --benchmark-json, then suites.bench.record (the file it commits)."""
    from suites.bench.record import main

    raw = {"machine_info": {"node": "box", "machine": "x86_64", "python_version": "3.11.9",
                            "cpu": {"count": 2, "brand_raw": "Some CPU"}},
           "commit_info": {"id": "abc", "dirty": True}, "benchmarks": [{"name": "test_kernel", "stats": {"median": 1.0}}],
           "datetime": "2026-12-01T13:24:00+00:00", "version": "5.1.0"}
    (tmp_path / "raw.json").write_text(json.dumps(raw))
    assert main([str(tmp_path / "raw.json"), str(tmp_path / "benchmarks.json")]) == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    _validator().validate(data)
    assert data["kind"] == "pytest_benchmark" and data["rows"] == raw["benchmarks"]
    assert data["provenance"]["git_commit"] == "abc+dirty" and data["provenance"]["dtype"] == NOT_RECORDED
    assert main([]) == 2
