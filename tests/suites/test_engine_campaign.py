"""suites.campaigns.engine on the cell runner: the runs of a row are journaled and a rerun resumes them."""

from __future__ import annotations

import pytest

from harness.executor import Journal
from harness.pairs import get_pair
from harness.served.serve import serving
from specdec_ref.adapters import generate
from suites.campaigns import engine as campaign


@pytest.mark.statistical
def test_engine_rows_are_journaled_cells_and_a_rerun_starts_none(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    with serving(generate, get_pair(campaign.PAIR)) as server:
        rows = campaign._runs(server.url, range(2), name="reference_generate", pair=campaign.PAIR, samples=60,
                              stop_on_fail=False, journal=journal)
    assert [r["seed"] for r in rows] == [0, 1] and not any(r["fail"] for r in rows)
    assert len(journal.load()) == 2
    with serving(generate, get_pair(campaign.PAIR)) as server:  # a new server (another port): same cells
        again = campaign._runs(server.url, range(3), name="reference_generate", pair=campaign.PAIR, samples=60,
                               stop_on_fail=False, journal=journal,
                               stop=lambda: True)  # out of time: only what the journal holds
    assert again == rows
    summary = campaign._summary("reference_generate", "control", "local", [])
    assert summary["runs"] == 0 and "out of time" in campaign.report_md(
        {"rows": [summary], "config": {"pair": "toy-low", "samples_per_cell": 60, "other_samples_per_cell": 60,
                                       "mutant_samples_per_cell": 60, "gate": 1e-3}, "seconds": 1.0, "probe": {}},
        "specdec campaign engine").split("| `reference_generate`")[1]
