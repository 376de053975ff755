"""Greedy numerics at low precision: near-tie flips are numerics, real bugs are logic (planted both ways)."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from harness.check.api import load_pair
from harness.check.numerics import NumericsConfig, run_numerics, write_numerics_report
from harness.cli import main
from harness.mutants.registry import get
from specdec_ref.adapters import generate

# Prompts (seed 1, V = 16, length 4) on which the float32-arithmetic variant below flips a bf16 near-tie.
NEAR_TIE_PROMPTS = [7, 20, 36]


@pytest.fixture(scope="module")
def pairs():
    torch.set_num_threads(1)
    return load_pair("toy", dtype="bfloat16"), load_pair("toy", dtype="float32")


def _prompts(indices):
    g = torch.Generator().manual_seed(1)
    every = torch.randint(0, 16, (40, 4), generator=g).tolist()
    return [every[i] for i in indices]


def upcast_generate(target, draft, input_ids, **kwargs):
    """Lossless in exact arithmetic; runs the bf16 weights in float32 (what a different kernel would do)."""
    return generate(copy.deepcopy(target).float(), copy.deepcopy(draft).float(), input_ids, **kwargs)


@pytest.mark.end_to_end
def test_reference_is_identical_in_bf16_and_float32_on_toy(pairs):
    low, full = pairs
    result = run_numerics(generate, low, full, low.prompts[:3], NumericsConfig(prompts=3, max_new_tokens=24, gamma=3))
    s = result["summary"]
    assert s["verdict"] == "pass" and s["low_dtype"] == "bfloat16" and s["full_dtype"] == "float32"
    assert s["low_equal"] == s["full_equal"] == 3


@pytest.mark.end_to_end
def test_near_tie_flips_from_other_arithmetic_are_numerics_not_logic(pairs):
    low, full = pairs
    result = run_numerics(upcast_generate, low, full, _prompts(NEAR_TIE_PROMPTS),
                          NumericsConfig(prompts=3, max_new_tokens=56, gamma=3))
    s = result["summary"]
    assert s["low_divergences"] == {"numerics (near-tie)": 3}, s
    assert s["verdict"] == "pass" and s["full_equal"] == 3
    for row in result["rows"]:
        d = row["low"]
        assert abs(d["exact_gap_expected_minus_got"]) <= d["tolerance"] and d["dtype"] == "bfloat16"


@pytest.mark.end_to_end
def test_stale_cache_bug_is_logic_in_bf16(pairs):
    low, full = pairs
    result = run_numerics(get("stale_target_cache").fn, low, full, low.prompts[:4],
                          NumericsConfig(prompts=4, max_new_tokens=16, gamma=3))
    s = result["summary"]
    assert s["verdict"] == "fail" and s["low_divergences"].get("logic", 0) >= 1
    assert any("bfloat16 rounding" in p for p in s["problems"])


@pytest.mark.end_to_end
def test_tie_break_bug_is_caught_in_float32():
    torch.set_num_threads(1)
    low, full = load_pair("toy-tied", dtype="bfloat16"), load_pair("toy-tied", dtype="float32")
    result = run_numerics(get("greedy_tie_last_index").fn, low, full, full.prompts[:4],
                          NumericsConfig(prompts=4, max_new_tokens=16, gamma=3))
    assert result["summary"]["full_divergences"].get("tie-break (exact tie)", 0) >= 1
    assert result["summary"]["verdict"] == "fail"


@pytest.mark.end_to_end
def test_report_files(pairs, tmp_path):
    low, full = pairs
    result = run_numerics(generate, low, full, low.prompts[:2], NumericsConfig(prompts=2, max_new_tokens=8, gamma=2))
    write_numerics_report(result, tmp_path, impl_name="ref", pair_name="toy")
    report = (tmp_path / "report.md").read_text()
    assert "Verdict: PASS" in report and "numerics floor" in report
    data = json.loads((tmp_path / "numerics.json").read_text())
    assert data["provenance"]["dtype"] == "bfloat16" and len(data["rows"]) == 2
    assert (tmp_path / "rows.csv").read_text().count("\n") == 3


def test_cli_numerics_and_bad_input(tmp_path, capsys):
    out = tmp_path / "n"
    assert main(["numerics", "--pair", "toy", "--prompts", "2", "--max-new-tokens", "8", "--out", str(out)]) == 0
    assert (out / "report.md").exists()
    assert main(["numerics", "--pair", "toy", "--dtype", "float32", "--out", str(out)]) == 2
    assert "low precision" in capsys.readouterr().err
    assert main(["numerics", "--pair", "toy", "--dtype", "bf17", "--out", str(out)]) == 2
    assert "unknown dtype" in capsys.readouterr().err
    assert main(["numerics", "--pair", "toy", "--max-new-tokens", "500", "--out", str(out)]) == 2
    assert "context" in capsys.readouterr().err
    assert main(["numerics", "--pair", "toy", "--gamma", "0", "--out", str(out)]) == 2


@pytest.mark.stochastic(false_alarm=0.001, seed=0)  # PASS 0.001
def test_verify_dtype_flag_runs_greedy_in_bf16(capsys):
    code = main(["verify", "--impl", "specdec_ref.adapters:generate", "--level", "generation", "--pair", "toy",
                 "--dtype", "bfloat16", "--samples", "300", "--contexts", "none"])
    assert code == 0, capsys.readouterr().out


def test_a_token_just_outside_a_truncation_cut_is_numerics_not_an_impossible_token():
    """llama-server with speculation off, against the float64 target at 480 × 16 tokens: 2 of ~6,000 tokens lay
    just outside llama.cpp's top-k / top-p / min-p cut as the float64 logits place it, and pit_support failed a
    correct engine. A token within the greedy check's numerics margin of the cut is scored under the relaxed
    law; one farther out stays impossible."""
    import numpy as np
    import torch

    from harness.check.exact_laws import SupportCount
    from harness.check.greedy import NEAR_TIE
    from harness.check.pit import relax_boundary_tokens, support_message
    from harness.check.settings import Setting as S
    from specdec_ref.processing import process

    setting = S(1.0, top_k=2)
    margin = NEAR_TIE * 5.0  # the largest |logit| below is 5
    logits = torch.tensor([[[5.0, 3.0, 3.0 - margin / 2, 0.0], [5.0, 3.0, 3.0 - margin / 2, 0.0]]], dtype=torch.float64)
    tokens = torch.tensor([[2, 3]])  # token 2: half a margin below the 2nd best; token 3: far below it
    mask = torch.ones_like(tokens, dtype=torch.bool)
    probs = process(logits, setting, None)[mask].numpy()
    y = tokens[mask].numpy()
    p_y = probs[np.arange(2), y]
    assert (p_y == 0).all()
    _, relaxed_p_y, boundary = relax_boundary_tokens(logits, tokens, mask, setting, None, "standard", probs, y, p_y)
    assert boundary == 1 and relaxed_p_y[0] > 0 and relaxed_p_y[1] == 0
    assert "1 tokens just outside a truncation cut" in support_message(SupportCount(1, 1))
