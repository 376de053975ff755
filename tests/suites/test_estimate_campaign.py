"""`specdec campaign estimate` (issue 46): coverage rows (TV and KL), generation-level joint laws, the per-position
figure and its numbers."""

import json

import pytest

from harness.runner import run


@pytest.mark.end_to_end
def test_campaign_writes_tv_and_kl_rows_the_profile_and_its_figure(tmp_path):
    rc = run("estimate", ["--seeds", "3", "--n", "1000", "--cases", "anti-logits", "--entries", "residual_from_p",
                          "out_of_range_recovered", "--out", str(tmp_path)])
    assert rc in (0, 1)
    data = json.loads((tmp_path / "coverage.json").read_text())
    rows = {r["entry"]: r for r in data["rows"]}
    assert rows["residual_from_p"]["kl_exact"] > 0 and "kl_coverage" in rows["residual_from_p"]
    assert "kl_coverage" not in rows["out_of_range_recovered"]  # ids outside the vocabulary: KL infinite, no KL row
    profiles = {p["entry"]: p for p in data["summary"]["position_profiles"]}
    assert set(profiles) == {"lenient_acceptance", "threshold_acceptance", "relaxed_acceptance", "typical_acceptance"}
    first = profiles["typical_acceptance"]["positions"][0]
    assert first["low"] <= first["estimate"] <= first["high"] and abs(first["exact_tv"] - 0.213) < 1e-3
    assert (tmp_path / "positions.png").stat().st_size > 1000
    report = (tmp_path / "report.md").read_text()
    assert "![per-position TV estimate and band](positions.png)" in report and "KL(emitted ‖ p)" in report


@pytest.mark.end_to_end
def test_generation_entries_give_joint_and_position_laws():
    from harness.mutants.joint import known_joint_laws

    laws = known_joint_laws(("penalties_count_rejected_drafts_mild",), (0,))
    assert [e["position"] for e in laws] == ["joint", 0, 1, 2]
    assert abs(laws[0]["exact_tv_full"] - 0.0311) < 1e-3  # suites/campaigns/contexts.exact_tvs: 0.031 at prompt 0
    assert all(abs(e["p"].sum() - 1) < 1e-9 and e["law"].shape == e["p"].shape for e in laws)
