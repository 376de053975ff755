"""Engine-level estimates (issue 46): `specdec verify --level engine --estimate` against `specdec serve` on the toy pair,
the correct server and one with relaxed acceptance planted from the zoo (harness.mutants.generation:
relaxed_acceptance_generate). T = 1 with top-k 3: the toy draft is flatter than the target, so within the top 3 it
over-drafts the second and third tokens, which relaxed acceptance keeps outright (exact joint TV 0.120 at prompt 1)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harness.check.settings import Setting
from harness.mutants.registry import get
from harness.pairs import get_pair
from harness.served.check import run_engine_check
from harness.served.config import EngineConfig
from harness.served.estimate import estimable
from harness.served.serve import serving
from specdec_ref.adapters import generate

RELAXED = "harness.mutants.generation:relaxed_acceptance_generate"
REFERENCE = "specdec_ref.adapters:generate"
SETTING = Setting(1.0, top_k=3)
SMALL = dict(pair="toy", samples=2000, prompts=2, chunk=1000, settings=(SETTING,), seed=5)


@pytest.fixture(scope="module")
def correct():
    with serving(generate, get_pair("toy")) as s:
        yield s.url + "/v1"


@pytest.fixture(scope="module")
def relaxed():
    with serving(get("relaxed_acceptance_generate").fn, get_pair("toy")) as s:  # planted from the zoo
        yield s.url + "/v1"


def test_the_correct_servers_intervals_hold_its_exact_tv_zero(correct):
    report = run_engine_check(EngineConfig(endpoint=correct, estimate=True, served_impl=REFERENCE, **SMALL))
    assert report.verdict == "pass"
    cells = {e["case"] for e in report.estimates}
    assert cells == {"T=1,top_k=3/prompt0", "T=1,top_k=3/prompt1"}  # every cell: --estimate
    assert [e["position"] for e in report.estimates if e["case"].endswith("prompt1")] == ["joint", 0, 1, 2]
    assert all(e["low"] == 0.0 and e["exact_tv"] < 1e-12 and e["exact_tv_full"] < 1e-12 for e in report.estimates)
    assert any("exact TV beside each is that of specdec_ref.adapters:generate" in n for n in report.notes)


def test_the_relaxed_acceptance_servers_intervals_cover_its_exact_tv(relaxed):
    report = run_engine_check(EngineConfig(endpoint=relaxed, estimate=True, served_impl=RELAXED, **SMALL))
    assert report.verdict == "fail"
    by = {(e["case"], e["position"]): e for e in report.estimates}
    joint = by["T=1,top_k=3/prompt1", "joint"]
    assert abs(joint["exact_tv_full"] - 0.1203) < 1e-3  # the zoo entry's enumerated law against the target's
    assert joint["low"] > 0.05
    assert all(e["low"] <= e["exact_tv"] <= e["high"] for e in report.estimates)
    line = report.estimate_lines()[0]
    assert line.startswith("TV ") and "T=1,top_k=3/prompt1" in line and "exact 0.1" in line


def test_a_fail_report_carries_its_failing_cells_estimates_without_exact_values_unless_stated(relaxed, correct):
    """Without --estimate a FAIL report still says how far (its failing cells only); without --served-impl the
    engine's own law is unknown: no exact TV, said in a note. A PASS report without --estimate carries none."""
    bad = run_engine_check(EngineConfig(endpoint=relaxed, **SMALL))
    assert bad.verdict == "fail" and bad.estimates
    assert {e["case"] for e in bad.estimates} == bad.failed_cells() == {"T=1,top_k=3/prompt1"}
    assert not any("exact_tv" in e for e in bad.estimates)
    assert any("no exact TV beside them" in n for n in bad.notes)
    off = run_engine_check(EngineConfig(endpoint=relaxed, fail_estimate=False, **SMALL))
    assert off.verdict == "fail" and off.estimates == []
    good = run_engine_check(EngineConfig(endpoint=correct, **SMALL))
    assert good.verdict == "pass" and good.estimates == []


def test_the_command_line_prints_the_estimates_and_exits_with_the_verdict(relaxed, correct, tmp_path, capsys):
    from harness.cli import main

    flags = ["--pair", "toy", "--setting", "T=1,top_k=3", "--samples", "2000", "--prompts", "2", "--seed", "5",
             "--estimate", "--engine-checks", "tokens", "--contexts", "none"]
    path = tmp_path / "relaxed.json"
    rc = main(["verify", "--level", "engine", "--endpoint", relaxed, *flags, "--served-impl", RELAXED,
               "--json", str(path)])
    out = capsys.readouterr().out
    assert rc == 1  # the verdict's exit code, estimates or not
    assert "over the whole continuation (joint law) (T=1,top_k=3/prompt1" in out and "exact 0.120)" in out
    assert json.loads(path.read_text())["report"]["estimates"]
    assert (tmp_path / "relaxed-estimates.png").exists()
    rc = main(["verify", "--level", "engine", "--endpoint", correct, *flags, "--served-impl", REFERENCE])
    assert rc == 0 and "exact 0.000)" in capsys.readouterr().out
    rc = main(["verify", "--level", "engine", "--endpoint", correct, *flags, "--served-impl", "no.such:thing"])
    assert rc == 2  # a statement that does not load is a usage error, before any request


def test_no_estimate_without_an_enumerable_target_law_and_why():
    pair = SimpleNamespace(vocab_size=16, name="toy")
    assert "no local target" in estimable(SimpleNamespace(ground_truth="score", pair=None, engine=None))
    assert "V = 49152" in estimable(SimpleNamespace(ground_truth="local", pair=SimpleNamespace(
        vocab_size=49152, name="smollm2"), engine=None))
    assert estimable(SimpleNamespace(ground_truth="local", pair=pair, engine=SimpleNamespace(classes=None))) is None
