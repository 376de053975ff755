"""specdec campaign onnxruntime_genai: its cells, and how its report tells speculation from the engine's sampler."""

from __future__ import annotations

from suites.campaigns import _ortgenai_report as rep
from suites.campaigns import onnxruntime_genai as camp


def test_cells_cover_both_methods_controls_and_the_planted_fault():
    cells = camp.cells(camp.Config(smollm2=False, controls=2))
    kinds = [args[0] for args in cells.values()]
    assert kinds.count("two") == 5 and kinds.count("control") == 2 and kinds.count("rule") == 2
    assert {args[2] for args in cells.values() if args[0] == "local"} == {"off_generate", "draft_generate",
                                                                         "ngram_generate"}
    assert any(args[0] == "two" and args[5] != 1.0 for args in cells.values())  # the planted cell


def test_first_difference():
    assert camp._first_difference([1, 2, 3], [1, 2, 3]) is None
    assert camp._first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert camp._first_difference([1, 2], [1, 2, 3]) == 2


def _local(impl, setting, rejected):
    return {"kind": "local", "pair": "p", "impl": f"m:{impl}",
            "settings": {setting: {"rejected": ["x"] if rejected else [], "min_p": 0.0}}}


def test_a_failure_the_engine_shows_without_speculation_is_not_speculation():
    records = [_local("off_generate", "T=0.7", True), _local("draft_generate", "T=0.7", True),
               _local("draft_generate", "T=1", False)]
    assert rep.speculation_failures(records) == [] and rep.engine_semantics_failures(records) == ["p T=0.7"]
    records.append(_local("ngram_generate", "T=1", True))  # off passes T = 1 (not run: counts as passing)
    assert rep.speculation_failures(records) == ["p ngram_generate T=1"]


def test_two_sample_and_greedy_failures_are_speculation_but_the_planted_one_is_not():
    planted = {"kind": "two", "pair": "p", "method": "draft", "setting": "T=1", "scale": 0.85, "verdict": "fail"}
    assert rep.speculation_failures([planted]) == []
    assert rep.speculation_failures([{**planted, "scale": 1.0}]) == ["p draft T=1 (two-sample)"]
    assert rep.speculation_failures([{"kind": "greedy", "pair": "p", "method": "ngram", "spec_vs_off_differ": 1}])


def test_expected_ok_needs_the_planted_fault_caught_and_the_controls_passing():
    planted = {"kind": "two", "scale": 0.85, "verdict": "fail"}
    control = {"kind": "control", "verdict": "pass"}
    rules = [{"kind": "rule", "impl": "r:verify", "verdict": "pass"},
             {"kind": "rule", "impl": "r:q_zero_verify", "verdict": "fail"}]
    assert rep.expected_ok([planted, control, *rules])
    assert not rep.expected_ok([{**planted, "verdict": "pass"}, control, *rules])
    assert not rep.expected_ok([planted, {**control, "verdict": "fail"}, *rules])
