"""What `specdec` prints, as a new user reads it (issue 55): help texts, counts in words, the achieved detectable
TV per case and never "inf", and no file the user did not ask for."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.check.report import CheckReport, deterministic_result
from harness.cli import fail_line, main, print_check_report
from harness.stats import TestResult

ROOT = Path(__file__).resolve().parents[1]
ALWAYS_ACCEPT = '''
import torch


def always_accept(target_probs, draft_probs, draft_tokens, generator):
    bonus = torch.multinomial(target_probs[:, -1].float(), 1, generator=generator)
    return torch.cat([draft_tokens, bonus], dim=1)
'''


def test_specdec_help_holds_no_internal_note(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Only this module prints" not in out and "Command line: `specdec` (also `python -m specdec`)." in out


def test_verify_help_points_step_to_the_contract_section_and_explains_masked(capsys):
    assert main(["verify", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "§1d" not in text
    assert "draft_and_verify (it draws its own drafts from q and verifies them, §1e)" in text
    assert "masked (structured outputs: a verify step that also receives the allowed-token mask" in text
    contract = (ROOT / "docs" / "CONTRACT.md").read_text(encoding="utf-8")
    assert "### 1e. Verifier families and the draft-and-verify step" in contract


def _law_test(name: str, tv: float, reject: bool = False) -> TestResult:
    return TestResult(name, 1.0, 0.0 if reject else 0.5, n=1000, reject=reject, detectable_tv=tv,
                      details={"detectable_metric": "TV between pooled laws"})


def _case(name: str) -> dict:
    return {"name": name, "gamma": 1, "vocab": 4, "samples": 1000, "acceptance": [{"measured": 0.5, "optimal": 0.5}]}


def _report(tests, names=("a", "b")) -> CheckReport:
    return CheckReport("m:f", "sampler", 1e-3, 0.02, 0.99, 0, tests=tests, cases=[_case(n) for n in names],
                       declared_tests=len(tests), samples=2000)


def test_one_rejected_test_is_one_test_in_every_line(capsys):
    report = _report([_law_test("a/pos0/pooled_pearson", 0.019), deterministic_result("b/format", False, n=1000,
                                                                                       message="returned junk")])
    report.decide()
    print_check_report(report)
    out = capsys.readouterr().out
    assert "(1 test rejects losslessness)" in out and "1 tests" not in out
    assert "2 of 2 declared gating tests, 2,000 samples" in out
    assert fail_line(report).startswith("m:f is not lossless: 1 test rejects; first b/format: returned junk")


def test_the_summary_states_the_achieved_tv_per_case(capsys):
    """The headline is the weakest case's TV: the line says which case, how many reach --tv, and the table shows
    each case's own (a default PASS reached 0.0488 with --tv 0.02: three cases are planned at 0.05)."""
    report = _report([_law_test("a/pos0/pooled_pearson", 0.0195), _law_test("b/pos0/pooled_pearson", 0.0486)])
    print_check_report(report.decide())
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].endswith("achieved detectable TV ≤ 0.0486 at power 0.99 per tested position (the weakest "
                              "case b; requested --tv 0.02, reached in 1 of 2 cases: per case in the table)")
    rows = {line.split()[0]: line.split() for line in lines if line.startswith(("  a ", "  b "))}
    assert rows["a"][4] == "0.0195" and rows["b"][4] == "0.0486"  # the TV column: each case's achieved TV


def test_too_few_samples_say_so_never_inf(tmp_path, capsys, monkeypatch):
    """`--samples 20`: no test can promise any TV; the run is INCONCLUSIVE (exit 3) and says why in words."""
    monkeypatch.chdir(tmp_path)
    rc = main(["verify", "--impl", "specdec_ref.adapters:verify", "--cases", "anti-logits", "--samples", "20"])
    out = capsys.readouterr().out
    assert rc == 3 and "verdict: INCONCLUSIVE" in out
    assert "inf" not in out.replace("information", ""), out
    assert "too few samples (20 in all) for any test to detect even the largest discrepancy at power 0.99" in out
    assert out.rstrip().endswith("no detectable TV at power 0.99: too few samples for any test to detect a "
                                 "discrepancy")


def test_the_fixture_says_too_few_samples_never_inf():
    from harness.testing import assert_lossless

    with pytest.raises(AssertionError, match=r"INCONCLUSIVE \(sampler level\): too few samples \(20 in all\)") as e:
        assert_lossless("specdec_ref.adapters:verify", cases=["anti-logits"], samples=20)
    assert "inf" not in str(e.value)


def test_json_writes_no_figure_unless_estimates_are_asked_for(tmp_path, capsys, monkeypatch):
    """A FAIL carries the failing cells' TV estimates in its report; `--json` writes that report, and the
    figure of the estimates only with --estimate (issue 55: an unrequested report-estimates.png)."""
    import json

    (tmp_path / "mysampler.py").write_text(ALWAYS_ACCEPT)
    monkeypatch.chdir(tmp_path)
    rc = main(["verify", "--impl", "mysampler:always_accept", "--cases", "anti-logits", "--json", "report.json"])
    out = capsys.readouterr().out
    assert rc == 1 and json.loads((tmp_path / "report.json").read_text())["report"]["estimates"]  # there was data
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".py" and p.name != "__pycache__") == [
        "report.json"]
    assert "estimates plotted" not in out


def test_a_pooled_or_step_level_summary_never_claims_cases_it_has_not():
    from harness.cli import headline_scope, tv_phrase

    tree = CheckReport("m:f", "tree", 1e-3, 0.05, 0.99, 0, tests=[_law_test("t/node1/pooled_pearson", 0.03)])
    assert headline_scope(tree) == "per tested node"
    assert tv_phrase(tree) == "achieved detectable TV ≤ 0.03 at power 0.99 per tested node (requested --tv 0.05)"
    empty = CheckReport("m:f", "sampler", 1e-3, 0.02, 0.99, 0)
    assert tv_phrase(empty) == "no test states a detectable TV" and math.isnan(empty.detectable_tv)
