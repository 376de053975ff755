"""`specdec campaign openvino_genai` without OpenVINO: its cells, and its report and exit code from records."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.errors import HarnessError
from suites.campaigns import openvino_genai as campaign
from suites.campaigns._openvino_report import write_report


def test_cells_in_order():
    keys = list(campaign.cells(campaign.Config()))
    assert keys[0].startswith("law/T=1,top_k=3/") and keys[-1].startswith("sampler/specdec_ref")
    assert any(k.startswith("crash/gamma=1/") for k in keys) and any(k.startswith("greedy/") for k in keys)
    assert not any(k.startswith("generation/") for k in campaign.cells(campaign.Config(generation=False)))


def _test(name, p, tv=0.3):
    return {"name": name, "p_value": p, "detectable_tv": tv, "details": {"p_holm": min(1.0, 5 * p)}, "reject": p < 1e-4}


def _law(verdict_draft: str):
    p = 1e-9 if verdict_draft == "fail" else 0.5
    comparisons = {arm: {"verdict": v, "n_arm": 10, "n_off": 10, "plugin_tv": [0.1, 0.5],
                         "tests": [_test(f"{arm}/two_sample/pos0", 0.4), _test(f"{arm}/two_sample/pos1", pp)]}
                   for arm, v, pp in (("off-control", "pass", 0.5), ("draft", verdict_draft, p))}
    arms = {a: {"requests": 10, "crashed": 0, "first_error": None, "seconds": 1.0} for a in ("off", *comparisons)}
    return {"setting": "T=1,top_k=3", "prompt": "x", "arms": arms, "comparisons": comparisons}


@dataclasses.dataclass
class FakeRun:
    out: Path
    done: dict
    cells: dict = dataclasses.field(default_factory=dict)
    config: object = dataclasses.field(default_factory=campaign.Config)
    provenance: dict = dataclasses.field(default_factory=dict)
    seconds: float = 60.0
    command: str = "specdec campaign openvino_genai"

    def write_result(self, name, kind, **kw):
        (self.out / name).write_text(kind)

    def write_text(self, name, text):
        (self.out / name).write_text(text)


def _sampler(impl, verdict):
    return {"impl": impl, "verdict": verdict, "detectable_tv": 0.02, "samples": 100, "family_p": 0.5,
            "failure_summary": [], "seconds": 1.0, "command": "c"}


def test_report_exit_codes(tmp_path):
    planted = _sampler("harness.mutants.openvino:as_read_verify", "fail")
    control = _sampler("specdec_ref.adapters:verify", "pass")
    done = {"law/a": _law("fail"), "sampler/a": planted, "sampler/b": control}
    assert write_report(FakeRun(tmp_path, done)) == 1
    text = (tmp_path / "README.md").read_text()
    assert "| T=1,top_k=3 | draft | **FAIL** |" in text and "#4190" in text
    assert write_report(FakeRun(tmp_path, {**done, "law/a": _law("pass")})) == 0
    with pytest.raises(HarnessError, match="controls"):
        write_report(FakeRun(tmp_path, {**done, "sampler/a": {**planted, "verdict": "pass"}}))
