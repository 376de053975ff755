"""The tail campaign's report and exit code, from a journal (no check runs): every mutant must fail the tail case,
everything else must pass; the report covers every journaled cell."""

from __future__ import annotations

import json

from harness.cli import main
from harness.executor import JOURNAL, Journal
from suites.campaigns import tail
from suites.campaigns.tail import MUTANTS, tail_cells


def _record(name: str, plan: str, seed: int, verdict: str) -> dict:
    return {"name": name, "plan": plan, "seed": seed, "verdict": verdict, "seconds": 1.0, "samples": 1000,
            "tail_rows": None, "deep_tail": [], "rejected_kinds": ["deep_tail"] if verdict == "fail" else [],
            "min_p": 1e-9 if verdict == "fail" else 0.5}


def _journal(out, caught: bool = True) -> None:
    journal = Journal(out / JOURNAL, fresh=True)
    for key, (name, plan, seed) in tail_cells(1, 1, False).items():
        fails = name in MUTANTS and plan == "tail" and (caught or name != MUTANTS[0])
        journal.append(key, _record(name, plan, seed, "fail" if fails else "pass"))


def test_the_report_is_rebuilt_from_the_journal_and_exits_0_when_every_mutant_is_caught(tmp_path, capsys):
    _journal(tmp_path)
    argv = ["campaign", "tail", "--reference-seeds", "1", "--mutant-seeds", "1", "--report-only", "--out", str(tmp_path)]
    assert main(argv) == 0
    verdicts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(verdicts) == len(tail_cells(1, 1, False))
    envelope = json.loads((tmp_path / "campaign.json").read_text())
    assert envelope["kind"] == "campaign.tail" and envelope["summary"]["reference_false_alarms"] == 0
    assert "Reference on `tail-v131072`: 0 of 1 runs FAIL" in (tmp_path / "report.md").read_text()
    rows = tail.run_rows(envelope["rows"])  # report.md's first table, from the rows it is rendered from
    assert len(rows) == len(verdicts) and {r[3] for r in rows if r[0] == f"`{tail.REFERENCE}`"} == {"PASS"}


def test_a_mutant_that_passes_the_tail_case_exits_1(tmp_path, capsys):
    _journal(tmp_path, caught=False)
    assert main(["campaign", "tail", "--reference-seeds", "1", "--mutant-seeds", "1", "--report-only",
                 "--out", str(tmp_path)]) == 1
