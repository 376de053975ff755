"""Speedup reports (issue 47): the cost-model prediction, the engines' conventions, and the same named fields in the
in-process and HTTP reports. Fake timings and counts only: the formulas, not the machine (speed lives in benchmarks)."""

import math

import numpy as np
import pytest

from harness.bench import conventions, theory
from harness.bench.cells import Cell
from harness.bench.http import summarize as http_summarize
from harness.bench.summarize import COST_MODEL_BAND, summarize


def test_cost_model_is_leviathan_at_r_one_and_charges_the_verify_pass():
    for alpha, gamma, c in ((0.8, 4, 0.1), (0.3, 2, 0.0), (1.0, 3, 0.5)):
        assert theory.cost_model_speedup(alpha, gamma, 1.0, c) == pytest.approx(theory.predicted_speedup(alpha, gamma, c))
    # α = 0.5, γ = 2: E = 1.75 tokens per call; a verify pass of 1.5 one-token passes and drafts of 0.2
    assert theory.cost_model_speedup(0.5, 2, 1.5, 0.2) == pytest.approx(1.75 / 1.9)
    with pytest.raises(ValueError):
        theory.cost_model_speedup(0.5, 2, 0.0, 0.2)
    with pytest.raises(ValueError):
        theory.cost_model_speedup(0.5, 2, 1.0, -0.1)


def test_break_even_alpha_makes_the_cost_model_one():
    a = theory.break_even_alpha(3, 1.67, 0.011)
    assert theory.cost_model_speedup(a, 3, 1.67, 0.011) == pytest.approx(1.0, abs=1e-9)
    assert theory.break_even_alpha(2, 3.5, 0.0) is None  # a 3-position pass dearer than 3 tokens: never pays
    assert theory.break_even_alpha(1, 1.0, 0.0) == pytest.approx(0.0, abs=1e-12)  # free drafts, free verify


def test_vllm_fields_from_counts():
    # 12 drafts of 3 tokens: position 0 accepted 12 times, 1 eight times, 2 four times (24 accepted of 36)
    f = conventions.spec_decode_fields(12, 36, 24, [12, 8, 4])
    assert f["spec_decode_acceptance_rate"] == pytest.approx(100 * 24 / 36)  # percent, as vLLM
    assert f["spec_decode_acceptance_length"] == pytest.approx(1 + 24 / 12)
    assert f["spec_decode_per_position_acceptance_rates"] == pytest.approx([1, 8 / 12, 4 / 12])  # unconditional
    assert f["per_position_acceptance_conditional"] == pytest.approx([1, 8 / 12, 4 / 8])
    assert (f["spec_decode_num_drafts"], f["spec_decode_draft_tokens"], f["spec_decode_accepted_tokens"]) == (12, 36, 24)
    # with the reached counts the conditional rate is counted, not derived
    f = conventions.spec_decode_fields(12, 36, 24, [12, 8, 4], reached=[12, 12, 6])
    assert f["per_position_acceptance_conditional"] == pytest.approx([1, 8 / 12, 4 / 6])
    assert conventions.spec_decode_fields(0, 0, 0, []) == {}


def test_conventions_convert_into_each_other():
    conditional = [0.9, 0.8, 0.5]
    unconditional = conventions.unconditional_from_conditional(conditional)
    assert unconditional == pytest.approx([0.9, 0.72, 0.36])
    assert conventions.conditional_from_unconditional(unconditional) == pytest.approx(conditional)
    # vLLM's acceptance length three ways: counts, Σ unconditional rates, acceptance rate × γ (fixed γ = 3)
    drafts = 100
    accepted_at = [round(drafts * u) for u in unconditional]
    f = conventions.spec_decode_fields(drafts, 3 * drafts, sum(accepted_at), accepted_at)
    assert conventions.acceptance_length_from_positions(unconditional) == pytest.approx(f["spec_decode_acceptance_length"])
    assert conventions.acceptance_length_from_rate(f["spec_decode_acceptance_rate"], 3) == pytest.approx(
        f["spec_decode_acceptance_length"])
    # SGLang per request: tokens / verify passes; EAGLE: the mean of per-turn ratios, not the pooled ratio
    assert conventions.tokens_per_verify_call(29, 10) == 2.9
    assert conventions.mean_of_ratios([(10, 5), (30, 10)]) == pytest.approx(2.5)  # pooled would be 40 / 15


def test_percentile_is_numpys_linear_default():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 100):
        xs = list(rng.exponential(size=n))
        for q in (50, 90, 99):
            assert conventions.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert math.isnan(conventions.percentile([], 99))


def test_latency_fields_follow_vllm_definitions():
    requests = [{"tokens": 5, "e2el_s": 0.5, "ttft_s": 0.1, "gaps_s": [0.1, 0.1, 0.2]},
                {"tokens": 1, "e2el_s": 0.2, "ttft_s": 0.2, "gaps_s": []},  # one token: no TPOT (as vLLM)
                {"tokens": 3, "e2el_s": 0.7, "ttft_s": 0.3, "gaps_s": [0.4]}]
    f = conventions.latency_fields(requests)
    assert f["completed"] == 3 and f["total_output_tokens"] == 9
    assert f["mean_tpot_ms"] == pytest.approx(1e3 * (0.4 / 4 + 0.4 / 2) / 2)
    assert f["median_ttft_ms"] == pytest.approx(200.0)
    assert f["mean_itl_ms"] == pytest.approx(1e3 * 0.8 / 4)
    assert f["p99_e2el_ms"] == pytest.approx(float(np.percentile([500, 200, 700], 99)))
    assert set(conventions.LATENCY_FIELDS) <= set(f)
    unstreamed = conventions.latency_fields([{"tokens": 4, "e2el_s": 0.4, "ttft_s": None, "gaps_s": []}])
    assert unstreamed["mean_ttft_ms"] is None and unstreamed["p99_tpot_ms"] is None and unstreamed["mean_itl_ms"] is None
    assert unstreamed["mean_e2el_ms"] == pytest.approx(400.0)


# ------------------------------------------------------------------------------------------ fake timed cells

def _cell(kind: str, gamma: int) -> Cell:
    return Cell(kind=kind, pair="toy", gamma=gamma, temperature=0.0, top_k=None, top_p=None, prompts=1,
                max_new_tokens=35, repeats=2, warmup=0, synthetic_cost_ms=None, device="cpu", dtype=None, seed=0,
                threads=1)


def _requests(tokens: int, seconds: float) -> list[dict]:
    return [{"repeat": r, "prompt": 0, "tokens": tokens, "e2el_s": seconds, "ttft_s": seconds / 10,
             "gaps_s": [seconds / 20] * 10} for r in range(2)]


def _records(speedup: float) -> tuple[list[Cell], dict]:
    """T(1) = 10 ms; γ = 2, α = 0.5 (E = 1.75 tokens per call), verify call 15 ms (r = 1.5), draft 2 ms (c = 0.2):
    Leviathan predicts 1.75 / 1.4 = 1.25, the cost model 1.75 / 1.9 = 0.921; the run measures `speedup`."""
    ar_stats = {"target_calls": 70, "target_seconds": 0.70}
    ar = {"timings": {"ar": {"tokens": [35, 35], "seconds": [0.35, 0.35]}},
          "forwards": {"ar": {"target_calls": [35, 35], "draft_calls": [0, 0]}}, "stats": {"ar": ar_stats},
          "requests": {"ar": _requests(35, 0.35)}}
    # 40 full steps: 20 accepted nothing, 10 one draft, 10 both (the α = 0.5 law exactly)
    ref_stats = {"row_steps": 40, "full_row_steps": 40, "accepted_hist": [20, 10, 10], "accepted_all_steps": 30,
                 "drafted_all_steps": 80, "drafting_row_steps": 40, "reached": [40, 20], "accepted": [20, 10],
                 "alpha_sum": 30.0, "alpha_count": 60, "target_calls": 40, "draft_calls": 80,
                 "target_seconds": 40 * 0.015, "draft_seconds": 80 * 0.002, "new_tokens": 70}
    seconds = 35 / (100 * speedup)
    spec = {"timings": {"ref": {"tokens": [35, 35], "seconds": [seconds, seconds]}},
            "forwards": {"ref": {"target_calls": [20, 20], "draft_calls": [40, 40]}}, "stats": {"ref": ref_stats},
            "requests": {"ref": _requests(35, seconds)}}
    cells = [_cell("ar", 0), _cell("spec", 2)]
    return cells, {c.id: {"cell_id": c.id, "measurement": m} for c, m in zip(cells, (ar, spec), strict=True)}


def test_a_spec_row_carries_both_predictions_and_the_headline_ratio():
    cells, records = _records(speedup=0.9)
    row = next(r for r in summarize(cells, records) if r["kind"] == "spec")
    assert row["r"] == pytest.approx(1.5) and row["c"] == pytest.approx(0.2) and row["acceptance_rate"] == pytest.approx(0.5)
    assert row["predicted_speedup"] == pytest.approx(1.25)  # Leviathan, r = 1
    assert row["predicted_speedup_cost_model"] == pytest.approx(1.75 / 1.9)
    assert row["speedup_median"] == pytest.approx(0.9)
    assert row["cost_model_ratio"] == pytest.approx(0.9 / (1.75 / 1.9))
    assert row["speedup_ratio"] == pytest.approx(0.9 / 1.25)
    assert row["cost_model_ratio_realized_median"] == pytest.approx(0.9 / (1.75 / 1.9))  # realized = expected here
    assert row["cost_model_flag"] is False
    assert row["spec_decode_acceptance_length"] == pytest.approx(1.75)
    assert row["spec_decode_acceptance_rate"] == pytest.approx(37.5)
    assert row["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.5, 0.25])
    assert row["per_position_acceptance_conditional"] == pytest.approx([0.5, 0.5])
    assert row["mean_ttft_ms"] == pytest.approx(1e3 * 0.35 / 0.9 / 10)
    assert row["speedup_per_prompt"] == pytest.approx([0.9]) and row["prompts_timed"] == 1


@pytest.mark.parametrize("speedup,flagged", [(0.5, True), (0.7, True), (1.75 / 1.9, False), (1.05, False),
                                             (1.15, True)])
def test_a_row_outside_the_band_is_flagged(speedup, flagged):
    cells, records = _records(speedup)
    row = next(r for r in summarize(cells, records) if r["kind"] == "spec")
    lo, hi = COST_MODEL_BAND
    assert row["cost_model_flag"] is flagged
    assert (lo <= row["cost_model_ratio"] <= hi) is not flagged


def test_records_from_before_these_counts_still_summarize():
    cells, records = _records(0.9)
    for record in records.values():
        record["measurement"].pop("requests")
        for s in record["measurement"]["stats"].values():
            s.pop("drafted_all_steps", None)
            s.pop("drafting_row_steps", None)
    row = next(r for r in summarize(cells, records) if r["kind"] == "spec")
    assert "cost_model_ratio" in row and "spec_decode_acceptance_length" not in row and "mean_ttft_ms" not in row


def _http_records() -> list[dict]:
    out = []
    for role, latency in (("spec", 0.5), ("nospec", 1.0)):
        for p, cat in (("a", "rag"), ("b", "rag"), ("c", "math")):
            out.append({"role": role, "concurrency": 1, "repeat": 0, "prompt": p, "category": cat, "tokens": 10,
                        "latency_s": latency, "ttft_s": 0.1, "gaps_s": [0.05] * 9, "streamed": True, "text": "x"})
    return out


def test_http_and_in_process_reports_carry_the_same_named_fields():
    cells, records = _records(0.9)
    in_process = next(r for r in summarize(cells, records) if r["kind"] == "spec")
    rows = http_summarize(_http_records(), {("spec", 1): 1.5, ("nospec", 1): 3.0}, {}, {("spec", 1): True,
                                                                                        ("nospec", 1): True})
    over_http = next(r for r in rows if r["kind"] == "concurrency" and r["role"] == "spec")
    missing = {name: [f for f in conventions.REPORT_FIELDS if f not in row]
               for name, row in (("in-process", in_process), ("http", over_http))}
    assert missing == {"in-process": [], "http": []}
    assert over_http["spec_decode_acceptance_length"] is None  # the fake engine reports no counters: None, not 0
    assert over_http["mean_tpot_ms"] == pytest.approx(1e3 * 0.4 / 9)


def test_http_category_cells_say_how_many_prompts_they_rest_on_and_their_spread():
    rows = http_summarize(_http_records(), {("spec", 1): 1.5, ("nospec", 1): 3.0}, {}, {("spec", 1): True,
                                                                                        ("nospec", 1): True})
    rag = next(r for r in rows if r["kind"] == "category" and r["role"] == "spec" and r["category"] == "rag")
    assert rag["prompts"] == 2 and rag["paired_requests"] == 2
    assert rag["speedup"] == pytest.approx(2.0) and rag["speedup_paired_min"] == rag["speedup_paired_max"] == 2.0


def test_http_counters_become_vllm_fields():
    from harness.bench.http import acceptance

    before = {"vllm:spec_decode_num_drafts_total": 0.0}
    after = {"vllm:spec_decode_num_drafts_total": 12.0, "vllm:spec_decode_num_draft_tokens_total": 36.0,
             "vllm:spec_decode_num_accepted_tokens_total": 24.0,
             **{f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}}': v
                for i, v in enumerate((12.0, 8.0, 4.0))}}
    f = acceptance(before, after)
    assert f["spec_decode_acceptance_length"] == pytest.approx(3.0)
    assert f["spec_decode_per_position_acceptance_rates"] == pytest.approx([1, 8 / 12, 4 / 12])
    assert f["per_position_acceptance_conditional"] == pytest.approx([1, 8 / 12, 0.5])


def test_demo_shows_both_regimes_measured_afresh():
    from pathlib import Path

    from suites.campaigns.demo import demo_regime_configs

    real = demo_regime_configs("smollm2", Path("x"), quick=False)
    toy = demo_regime_configs("toy", Path("x"), quick=False)
    assert [c.pairs for _, c in real] == [("smollm2-ngram",), ("const-a0.8",)]
    assert [c.pairs for _, c in toy] == [("const-a0.8",)]  # no real model: the synthetic-cost pair only
    assert all(c.resume is False and c.interleave for _, c in real + toy)
    # the n-gram draft on the copy-heavy catalogue categories, one group (with its spread over prompts) per category
    assert real[0][1].categories == ("summarization", "rag", "code-edit") and real[0][1].prompts >= 8
    assert real[1][1].synthetic_cost_ms == (40.0, 4.0)


def test_an_interleaved_cell_is_its_own_baseline_and_a_cheaper_verify_pass_is_load_drift():
    cell = _cell("spec", 2)
    import dataclasses

    paired = dataclasses.replace(cell, interleave=True)
    assert paired.methods == ("ar", "ref") and paired.baseline() == paired and cell.baseline().kind == "ar"
    # one record holding both methods, timed together: the same numbers as the two-cell layout
    cells, records = _records(0.9)
    ar, spec = (records[c.id]["measurement"] for c in cells)
    merged = {key: {**ar[key], **spec[key]} for key in ("timings", "forwards", "stats", "requests")}
    row = summarize([paired], {paired.id: {"cell_id": paired.id, "measurement": merged}})[0]
    assert row["interleaved"] and row["cost_model_ratio"] == pytest.approx(0.9 / (1.75 / 1.9))
    assert row["load_drift_flag"] is False
    # a verify pass of 3 positions at 5 ms against a one-token baseline of 10 ms: the load changed between them
    spec["stats"]["ref"]["target_seconds"] = 40 * 0.005
    row = next(r for r in summarize(cells, records) if r["kind"] == "spec")
    assert row["r"] == pytest.approx(0.5) and row["load_drift_flag"] is True


@pytest.mark.parametrize("speedup,word", [(0.9, "does not pay, as the cost model predicts"),
                                          (1.05, "acceptance luck")])
def test_regime_lines_tell_a_win_the_costs_explain_from_acceptance_luck(speedup, word):
    from harness.bench.cli import regime_lines

    cells, records = _records(speedup)  # cost model 0.921 < 1: a measured 1.05 is not a regime where it pays
    (line,) = regime_lines(summarize(cells, records))
    assert word in line and "break-even α" in line and "r 1.50" in line
