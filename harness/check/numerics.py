"""Greedy numerics report at low precision (`specdec numerics`): does speculation change greedy output?

In exact arithmetic greedy speculative decoding returns the target's own greedy tokens. In bfloat16
it need not: the target scores γ + 1 positions in one pass, and a multi-position pass rounds
differently from the one-token passes of plain decoding, so a near-tie between the top two tokens
can flip. Engines ship with this (it is why "bit-exact" is not promised in bf16); a *logic* bug
looks the same at first sight. For each prompt this report runs, with the same weights:

- the target alone, greedy, in the low precision (what the implementation must reproduce);
- the implementation, greedy, in the low precision, classified at its first divergence by the
  exact (float64) logit gap of the two tokens against the low-precision rounding error there
  (`harness.check.greedy.classify_divergence`);
- the target alone in float32 (the numerics floor: how far bf16 decoding drifts by itself);
- the implementation in float32, which must match float32 greedy exactly (numerics allowed only
  for near-ties under 1e-3 of the logit scale).

Verdict: fail if any divergence is classified "logic" (or an exact tie broken the wrong way in float32).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from harness.check.config import NumericsConfig  # its home: the light config module (the CLI's flags)
from harness.check.greedy import classify_divergence, first_difference, greedy_impl, greedy_target
from harness.errors import HarnessError
from harness.pairs import ModelPair


def _compare(impl_pair: ModelPair, prompt, want, got) -> dict:
    pos = first_difference(want, got)
    if pos is None:
        return {"equal": True, "agree_tokens": len(want)}
    return {"equal": False, "agree_tokens": pos, **classify_divergence(impl_pair, prompt, want, got, pos)}


def run_numerics(impl: Callable, low: ModelPair, full: ModelPair, prompts: list[list[int]],
                 config: NumericsConfig, progress: Callable[[int], None] | None = None) -> dict:
    """`low`: the pair in bfloat16/float16; `full`: the same pair in float32. Returns rows + summary."""
    if low.vocab_size != full.vocab_size:
        raise HarnessError("the low-precision and float32 pairs must be the same models")
    started = time.perf_counter()
    rows = []
    for i, prompt in enumerate(prompts):
        run = dict(max_new_tokens=config.max_new_tokens, gamma=config.gamma, seed=config.seed)
        ar_low, spec_low = greedy_target(low, prompt, config.max_new_tokens), greedy_impl(impl, low, prompt, **run)
        ar_full, spec_full = greedy_target(full, prompt, config.max_new_tokens), greedy_impl(impl, full, prompt, **run)
        floor_pos = first_difference(ar_full, ar_low)
        rows.append({"prompt": i, "prompt_tokens": len(prompt), "new_tokens": len(ar_low),
                     "low": _compare(low, prompt, ar_low, spec_low),
                     "full": _compare(full, prompt, ar_full, spec_full),
                     "floor_equal": floor_pos is None,
                     "floor_agree_tokens": len(ar_full) if floor_pos is None else floor_pos})
        if progress:
            progress(1)
    return {"rows": rows, "summary": _summary(rows, low, full), "config": dataclasses.asdict(config),
            "seconds": time.perf_counter() - started}


def _summary(rows: list[dict], low: ModelPair, full: ModelPair) -> dict:
    def kinds(side):
        out: dict[str, int] = {}
        for r in rows:
            if not r[side]["equal"]:
                out[r[side]["kind"]] = out.get(r[side]["kind"], 0) + 1
        return out

    bad = [f"{side} prompt {r['prompt']}: {r[side]['message']}" for r in rows for side in ("low", "full")
           if not r[side]["equal"] and r[side]["kind"] != "numerics (near-tie)"]
    low_gaps = [abs(r["low"]["exact_gap_expected_minus_got"]) for r in rows
                if not r["low"]["equal"] and "exact_gap_expected_minus_got" in r["low"]]
    return {"verdict": "fail" if bad else "pass", "problems": bad, "prompts": len(rows),
            "low_dtype": str(low.target.dtype).removeprefix("torch."),
            "full_dtype": str(full.target.dtype).removeprefix("torch."),
            "low_equal": sum(r["low"]["equal"] for r in rows), "low_divergences": kinds("low"),
            "full_equal": sum(r["full"]["equal"] for r in rows), "full_divergences": kinds("full"),
            "floor_equal": sum(r["floor_equal"] for r in rows),
            "low_median_agree_tokens": float(np.median([r["low"]["agree_tokens"] for r in rows])) if rows else 0.0,
            "floor_median_agree_tokens": float(np.median([r["floor_agree_tokens"] for r in rows])) if rows else 0.0,
            "low_max_exact_gap": max(low_gaps) if low_gaps else None}


def write_numerics_report(result: dict, out_dir, *, impl_name: str, pair_name: str) -> None:
    """report.md + numerics.json + rows.csv under out_dir (atomic writes, provenance on every record)."""
    from pathlib import Path

    import pandas as pd

    from harness.envelope import write_result
    from harness.records import atomic_write_text, provenance

    out = Path(out_dir)
    s = result["summary"]
    meta = provenance(seed=result["config"]["seed"], dtype=s["low_dtype"])
    flat = []
    for r in result["rows"]:
        row = {"prompt": r["prompt"], "prompt_tokens": r["prompt_tokens"], "new_tokens": r["new_tokens"],
               "floor_equal": r["floor_equal"], "floor_agree_tokens": r["floor_agree_tokens"]}
        for side in ("low", "full"):
            for key, value in r[side].items():
                if key != "message":
                    row[f"{side}_{key}"] = value
        flat.append({**row, **{k: str(v) if isinstance(v, (dict, list)) else v for k, v in meta.items()}})
    atomic_write_text(out / "rows.csv", pd.DataFrame(flat).to_csv(index=False))
    write_result(out / "numerics.json", "numerics", config={**result["config"], "impl": impl_name, "pair": pair_name},
                 provenance=meta, rows=result["rows"], summary={**s, "seconds": result["seconds"]})
    cfg = result["config"]
    lo, fu = s["low_dtype"], s["full_dtype"]
    lines = [
        f"# Greedy numerics: `{impl_name}` on `{pair_name}`, {lo} vs {fu}", "",
        f"Generated {meta['utc_time']} · commit `{meta['git_commit']}` · {meta['device']} · torch "
        f"{meta['versions']['torch']} · transformers {meta['versions']['transformers']} · "
        f"{s['prompts']} prompts × {cfg['max_new_tokens']} new tokens, γ = {cfg['gamma']}, "
        f"{result['seconds']:.0f} s", "",
        f"**Verdict: {s['verdict'].upper()}**" + ("" if not s["problems"] else " — " + "; ".join(s["problems"])), "",
        "| comparison | identical | divergences by kind | median tokens before the first difference |",
        "|---|---|---|---|",
        f"| implementation {lo} vs target alone {lo} | {s['low_equal']}/{s['prompts']} | "
        f"{_kinds(s['low_divergences'])} | {s['low_median_agree_tokens']:.0f} |",
        f"| implementation {fu} vs target alone {fu} | {s['full_equal']}/{s['prompts']} | "
        f"{_kinds(s['full_divergences'])} | - |",
        f"| target alone {lo} vs target alone {fu} (numerics floor) | {s['floor_equal']}/{s['prompts']} | - | "
        f"{s['floor_median_agree_tokens']:.0f} |", "",
        f"A {lo} divergence is *numerics* when the exact gap between the expected and the emitted token (the same "
        f"weights in float64) is at most twice the largest {lo} logit error at that context; wider is *logic* "
        f"(a bug). In {fu} the implementation must reproduce greedy decoding exactly (near-ties within 1e-3 of the "
        "logit scale excepted).", "",
        "| prompt | first difference (impl vs target, " + lo + ") | expected → got | exact gap | tolerance | kind | "
        f"{lo} vs {fu} target: first difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        d = r["low"]
        floor = "identical" if r["floor_equal"] else f"token {r['floor_agree_tokens']}"
        if d["equal"]:
            lines.append(f"| {r['prompt']} | identical ({d['agree_tokens']} tokens) | - | - | - | - | {floor} |")
        else:
            gap, tol = d.get("exact_gap_expected_minus_got"), d.get("tolerance")
            lines.append(f"| {r['prompt']} | token {d['position']} | {d['expected_token']} → {d['got_token']} | "
                         f"{_num(gap)} | {_num(tol)} | {d['kind']} | {floor} |")
    lines += ["", f"Reproduce: `specdec numerics --pair {pair_name} --dtype {lo} --prompts {s['prompts']} "
              f"--max-new-tokens {cfg['max_new_tokens']} --gamma {cfg['gamma']}`.", ""]
    atomic_write_text(out / "report.md", "\n".join(lines))


def _kinds(d: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in d.items()) or "none"


def _num(x) -> str:
    return "-" if x is None else f"{x:.3g}"
