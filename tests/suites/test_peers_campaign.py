"""`specdec campaign peers` end to end on two entries: the cells, the report's tables and summary line, exit 0."""

from __future__ import annotations

import json

from harness.cli import main
from suites.campaigns._peers_report import sampler_rows


def test_peers_campaign_on_the_reference_and_a_gross_mutant(tmp_path, capsys):
    out = tmp_path / "peers"
    code = main(["campaign", "peers", "--only", "reference_verify,always_accept", "--levels", "sampler",
                 "--seeds", "1", "--mrv2-seeds", "0", "--equal-n-seeds", "0", "--control-seeds", "1",
                 "--local-workers", "1", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    readme = (out / "README.md").read_text()
    assert "of 1 mutants above resolution, vLLM V1's test catches 1" in readme
    assert "**0 false alarms**" in readme and "## The minimax identity-testing rate" in readme
    records = json.loads((out / "campaign.json").read_text())["rows"]
    table = {row[0]: row for row in sampler_rows(records)}  # the sampler table, from the rows it is rendered from
    assert table["`reference_verify`"][1] == "control" and table["`always_accept`"][1] == "mutant"
    assert table["`always_accept`"][3] == "1/1" and "| `reference_verify` | control |" in readme
    rows = {r["name"]: r for r in records}
    assert rows["always_accept"]["specdec"] == [1, 1] and rows["reference_verify"]["specdec"] == [0, 1]
    assert rows["always_accept"]["oracle_median_rows"] >= 1  # the oracle of a Rule entry was computed


def test_peers_campaign_rejects_an_unknown_entry(capsys):
    assert main(["campaign", "peers", "--only", "no_such_entry"]) == 2
    assert "no_such_entry" in capsys.readouterr().err
