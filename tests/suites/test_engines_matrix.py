"""The engines matrix (suites/engines_matrix.py, results/engines/README.md) is read from records: the battery's
journal and the committed findings; whether an engine is installed where it is regenerated changes nothing."""

from __future__ import annotations

import json

import pytest

import tests.impls.fake_engine  # noqa: F401  (registers "fake-engine")
from harness.engines.battery import CHECKS
from harness.errors import HarnessError
from suites.engines_matrix import matrix_rows, openvino_entries, ortgenai_entries

COLUMNS = ["engine", "method", *CHECKS, "public record"]


def _cells(rows, engine: str, method: str) -> dict[str, str]:
    row = next(r for r in rows if r[:2] == [f"`{engine}`", method])
    return dict(zip(COLUMNS, row, strict=True))


def _refuse_probes(monkeypatch):
    from harness.engines.registry import load

    def refuse(cls):
        raise AssertionError(f"the matrix asked whether {cls.__name__} is installed")

    for cls in load()[0].values():
        monkeypatch.setattr(cls, "installed", classmethod(refuse))


def test_openvino_and_ortgenai_rows_come_from_their_committed_records_not_the_install(monkeypatch):
    _refuse_probes(monkeypatch)  # installed() raises: the rows cannot have come from a probe
    monkeypatch.delenv("SPECDEC_OPENVINO_PYTHON", raising=False)
    monkeypatch.delenv("SPECDEC_ORT_GENAI_PYTHON", raising=False)
    absent = matrix_rows({})
    monkeypatch.setenv("SPECDEC_OPENVINO_PYTHON", "/work/venvs/ov/bin/python")
    monkeypatch.setenv("SPECDEC_ORT_GENAI_PYTHON", "/work/venvs/ortg/bin/python")
    assert matrix_rows({}) == absent  # the same page with the engine venvs named as without them

    ov = _cells(absent, "openvino-genai", "draft")
    # finding.json's T=1,top_k=3 cell: the draft arm FAILs against speculation off (n 150, weakest test TV 0.430)
    assert ("**FAIL** (off, smollm2, top-k 3) · TV 0.430 · n 150 · openvino-genai 2026.4.1.0 · 2026-12-07 · "
            "`results/findings/openvino-genai/finding.json`") in ov["T=1"]
    assert "prefix caching on, 19/150 requests crashed) · TV 0.449 · n 131" in ov["T=1"]
    assert "**INCONCLUSIVE** (off, smollm2) · TV 0.506 · n 100" in ov["T=0.7,top_p=0.9"]
    assert "**PASS** (off, smollm2, 32 tokens) · TV – · 3 prompts" in ov["greedy"]
    assert "#4190" in ov["public record"] and "PR #4490" in ov["public record"]
    ort = _cells(absent, "onnxruntime-genai", "draft")
    assert "**PASS** (local, toy-low) · TV 0.037 · n 40000 · onnxruntime-genai 0.18.0 · 2026-12-07" in ort["T=1"]
    assert "**FAIL** (local, smollm2, int8 draft, speculation off FAILs it too) · TV 0.155 · n 40" in (
        ort["T=0.7,top_p=0.9"])
    assert "**PASS** (off, toy-low) · TV 0.114 · n 12000" in ort["T=1"]
    for engine in ("openvino-genai", "onnxruntime-genai"):
        for method in ("draft", "ngram"):
            cells = _cells(absent, engine, method)
            assert not any("installed" in cells[c] for c in CHECKS), cells
            assert cells["api"].startswith("not run: an in-process engine")


def test_a_battery_cell_joins_the_record_cells_of_its_engine(monkeypatch):
    _refuse_probes(monkeypatch)
    record = {"engine": "openvino-genai", "method": "ngram", "check": "T=1", "truth": "local", "pair": "smollm2",
              "options": [], "verdict": "inconclusive", "detectable_tv": 0.2, "samples": 300,
              "version": "openvino-genai 2026.4.1.0", "utc": "2026-12-08"}
    rows = matrix_rows({"openvino-genai/smollm2/ngram/T=1/local/100/0/0.05": record})
    cell = _cells(rows, "openvino-genai", "ngram")["T=1"]
    assert "**INCONCLUSIVE** (off, smollm2) · TV 1.000 · n 100" in cell  # the campaign's record
    assert ("**INCONCLUSIVE** (local, smollm2) · TV 0.200 · n 300 · openvino-genai 2026.4.1.0 · 2026-12-08 · "
            "`results/engines/openvino-genai.md`") in cell  # the battery's


def test_a_cell_no_record_covers_says_why(monkeypatch):
    _refuse_probes(monkeypatch)
    cells = _cells(matrix_rows({}), "fake-engine", "draft")
    assert cells["greedy"].startswith("not run: no run recorded (`specdec campaign engines --engine fake-engine`")
    assert cells["logprobs"].startswith("not run: an in-process engine has no API surface")


def _comparison(verdict: str, tv: float | None, n: int = 200) -> dict:
    return {"verdict": verdict, "n_arm": n, "n_off": n, "plugin_tv": [0.1],
            "tests": [{"detectable_tv": tv, "details": {"p_holm": 1.0}}]}


OV_ENTRY = dict(engine="openvino-genai", reader="openvino", truth="off", pair="smollm2", path="finding.json",
                version="openvino-genai X", arms={"draft": ("draft", None), "off-control": None},
                settings={"T=1": ("T=1", None)})


def test_the_openvino_reader_applies_the_campaigns_verdict_rule():
    from harness.defaults import INCONCLUSIVE_TV

    data = {"provenance": {"utc_time": "2026-12-09T00:00:00+00:00"}, "report": {"cells": {
        "law/T=1/a": {"setting": "T=1", "arms": {"draft": {"requests": 200, "crashed": 0},
                                                 "off-control": {"requests": 200, "crashed": 0}},
                      "comparisons": {"draft": _comparison("pass", INCONCLUSIVE_TV + 0.01),
                                      "off-control": _comparison("pass", 0.1)}},
        "law/T=1/b": {"setting": "T=1", "arms": {"draft": {"requests": 200, "crashed": 3}},
                      "comparisons": {"draft": _comparison("fail", 0.1, 197)}}}}}
    entries = openvino_entries(OV_ENTRY, data)
    assert [(e["verdict"], e["samples"], e["label"]) for e in entries] == [
        ("inconclusive", 200, None), ("fail", 197, "3/200 requests crashed")]  # the control is no matrix cell
    assert {e["utc"] for e in entries} == {"2026-12-09"}
    data["report"]["cells"]["law/T=1/b"]["comparisons"]["draft-new"] = _comparison("pass", 0.1)
    data["report"]["cells"]["law/T=1/b"]["arms"]["draft-new"] = {"requests": 1, "crashed": 0}
    with pytest.raises(HarnessError, match="arm 'draft-new'"):  # an arm the catalogue does not map: said, not dropped
        openvino_entries(OV_ENTRY, data)


def test_the_ortgenai_reader_fails_a_setting_on_its_own_rejections_and_says_where_speculation_off_fails_too():
    def local(impl, rejected):
        return {"kind": "local", "pair": "smollm2", "impl": f"m:{impl}", "verdict": "fail" if rejected else "pass",
                "detectable_tv": 0.15, "settings": {"T=1": {"detectable_tv": None, "samples": 40,
                                                            "rejected": ["T=1/x"] if rejected else []}}}

    entry = dict(engine="onnxruntime-genai", reader="ortgenai", path="campaign.json",
                 impls={"off_generate": None, "draft_generate": ("draft", None)})
    rows = [{"kind": "versions", "onnxruntime_genai": "9.9"}, local("off_generate", True),
            local("draft_generate", True),
            {"kind": "two", "pair": "toy-low", "method": "draft", "setting": "T=1", "settings": ["T=1"],
             "verdict": "fail", "detectable_tv": 0.1, "samples": 400, "scale": 0.85},
            {"kind": "greedy", "pair": "toy-low", "method": "draft", "length": 8, "prompts": 4,
             "spec_vs_transformers_differ": 0, "spec_vs_off_differ": 1}]
    entries = ortgenai_entries(entry, {"rows": rows})
    assert [(e["check"], e["truth"], e["verdict"], e["label"], e["samples"]) for e in entries] == [
        ("T=1", "local", "fail", "speculation off FAILs it too", 40),  # the planted two-sample cell: not a cell
        ("greedy", "local", "pass", "8 tokens", 4), ("greedy", "off", "fail", "8 tokens", 4)]
    assert entries[0]["version"] == "onnxruntime-genai 9.9" and entries[0]["detectable_tv"] == 0.15
    json.dumps(entries)  # plain data
