"""The invariance campaign (full profile of tests/check/test_invariance.py) -> results/invariance.

Per trial source (sampler chain, draft-and-verify, tree as a single chain, a whole generate() on the toy
pair with the rule as its verify step) it draws N lossless rules
from harness.mutants.generated (acceptance scales, RNG sources and orders, per-row or vectorized, dtypes),
runs each through the one driver in a mode chosen in turn (planned with reach top-up, no early stop,
a fixed n not a multiple of the law count, sequential; the generation source: a fixed n with and without
early stop, and every `CONTEXTS_EVERY`-th rule on the contexts catalogue), and counts false alarms at the
gate; then every planted slip in every mode (each must fail).
`specdec campaign invariance --rules 200 --out results/invariance [--sources generation]`."""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
import torch

from harness.check.config import DEFAULT_FALSE_ALARM_RATE
from harness.check.draft_step import run_draft_step_check
from harness.check.generation import run_generation_check
from harness.check.sampler import run_sampler_check
from harness.check.tree import chain_as_tree, custom_tree_case, run_tree_check
from harness.mutants.generated import DTYPES, ORDERS, RNG_SOURCES, LosslessRule, as_draft_step, as_generate
from harness.records import atomic_write_json, atomic_write_text, provenance
from harness.stats.rates import clopper_pearson

CASES = ["rows-differ", "anti-logits", "binary-gamma8"]
MODES = {"planned": {}, "planned-no-early-stop": {"stop_on_fail": False}, "fixed-n": {"samples": 4_003},
         "sequential": {"sequential": True}}
TV = 0.15  # the plan: small enough runs for hundreds of rules; the false-alarm rate does not depend on it
SOURCES = ("sampler", "draft_step", "tree", "generation")
GENERATION_MODES = {"fixed-n": {"samples": 1_000}, "fixed-n-no-early-stop": {"samples": 1_003, "stop_on_fail": False},
                    "contexts": {"samples": 300}}  # contexts: the catalogue's cells keep their own plan
CONTEXTS_EVERY = 20  # a contexts run costs ~15 fixed-n runs on the toy pair


def modes(source: str) -> list[str]:
    return sorted(GENERATION_MODES) if source == "generation" else sorted(MODES)


def chain_tree_case():
    """A single-chain tree (γ = 3, V = 16, iid siblings): a chain rule is a tree rule on it."""
    rng = np.random.default_rng(0)
    z = rng.normal(0, 1.5, size=(4, 16))
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    w = np.exp(z + rng.normal(0, 0.5, size=z.shape))
    return custom_tree_case("chain-3", [-1, 0, 1], p, w / w.sum(-1, keepdims=True), "iid")


def run_one(rule: LosslessRule, source: str, mode: str, seed: int, gate: float):
    if source == "generation":
        from harness.contexts import plan
        from harness.pairs import get_pair

        pair = get_pair("toy")
        return run_generation_check(as_generate(rule), pair, impl_name=rule.name, seed=seed, false_alarm_rate=gate,
                                    contexts=plan(pair, seed=seed) if mode == "contexts" else None,
                                    **GENERATION_MODES[mode])
    fields = {"tv": TV, "cases": CASES, "seed": seed, "false_alarm_rate": gate, **MODES[mode]}
    if source == "draft_step":
        return run_draft_step_check(as_draft_step(rule), impl_name=rule.name, **fields)
    if source == "tree":
        return run_tree_check(chain_as_tree(rule), impl_name=rule.name, **{**fields, "cases": [chain_tree_case()]})
    return run_sampler_check(rule, impl_name=rule.name, **fields)


def random_rule(rng: random.Random, loop: str) -> LosslessRule:
    scales = tuple(rng.choice([1.0, 0.9, 0.7, 0.5, 0.3]) for _ in range(rng.randint(1, 3)))
    return LosslessRule(scales=scales, rng=rng.choice(RNG_SOURCES), order=rng.choice(ORDERS), loop=loop,
                        dtype=rng.choice(DTYPES))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specdec campaign invariance", description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=200, help="generated lossless rules per source")
    parser.add_argument("--gate", type=float, default=DEFAULT_FALSE_ALARM_RATE)
    parser.add_argument("--out", default="results/invariance")
    parser.add_argument("--sources", default=",".join(SOURCES), help=f"comma-separated, of {', '.join(SOURCES)}")
    args = parser.parse_args(argv)
    sources = [s for s in args.sources.split(",") if s]
    if not set(sources) <= set(SOURCES):
        parser.error(f"--sources: unknown {sorted(set(sources) - set(SOURCES))}; known: {', '.join(SOURCES)}")
    torch.set_num_threads(1)
    started, rng, runs = time.perf_counter(), random.Random(0), []
    for source in sources:
        for i in range(args.rules):
            mode = sorted(MODES)[i % len(MODES)]
            if source == "generation":
                mode = "contexts" if i % CONTEXTS_EVERY == CONTEXTS_EVERY - 1 else ("fixed-n", "fixed-n-no-early-stop")[i % 2]
            rule = random_rule(rng, "rows" if i % 25 == 0 and source == "sampler" else "vector")
            t0 = time.perf_counter()
            report = run_one(rule, source, mode, 1000 + i, args.gate)
            runs.append({"source": source, "rule": rule.name, "mode": mode, "seed": 1000 + i,
                         "verdict": report.verdict, "declared": report.declared_tests, "emitted": len(report.tests),
                         "rejected": [t.name for t in report.tests if t.reject], "seconds": time.perf_counter() - t0})
    slips = []
    for source in [s for s in ("sampler", "draft_step", "generation") if s in sources]:
        for slip in ("target_row", "draft_row"):
            for mode in modes(source):
                report = run_one(LosslessRule(slip=slip), source, mode, 7, args.gate)
                slips.append({"source": source, "slip": slip, "mode": mode, "verdict": report.verdict})
    out = Path(args.out)
    rows, ok = [], True
    for source in sources:
        mine = [r for r in runs if r["source"] == source]
        fails = sum(r["verdict"] == "fail" for r in mine)
        lo, hi = clopper_pearson(fails, len(mine))
        mismatched = sum(r["mode"] != "sequential" and r["verdict"] != "fail" and r["declared"] != r["emitted"]
                         for r in mine)
        rows.append((source, len(mine), fails, lo, hi, sum(r["verdict"] == "inconclusive" for r in mine), mismatched))
        ok &= mismatched == 0 and hi < 0.05
    missed = [s for s in slips if s["verdict"] != "fail"]
    ok &= not missed
    meta = provenance(seed=None)
    atomic_write_json(out / "runs.json", {"runs": runs, "slips": slips, **meta})
    lines = ["# Verdicts invariant to the path: generated lossless rules and planted slips", "",
             f"Generated {meta['utc_time']} · commit `{meta['git_commit']}` · {time.perf_counter() - started:.0f} s "
             f"on {meta['device']}", "",
             f"Command: `specdec campaign invariance --rules {args.rules} --out {args.out} --sources {','.join(sources)}`", "",
             f"Each rule: acceptance scale per position in (0, 1] with the residual corrected (lossless), uniforms "
             f"from the generator or the global RNG ([B, γ], [B·γ]), acceptance or residual first, per-row or "
             f"vectorized, float16/32/64; plan TV {TV} on {', '.join(CASES)} (the tree source: a single-chain "
             f"tree; the generation source: the rule as the verify step of the reference's loop on the toy pair); modes in "
             f"turn: {', '.join(sorted(MODES))} (generation: {', '.join(sorted(GENERATION_MODES))}, contexts every "
             f"{CONTEXTS_EVERY}th rule). Gate: family-wise {args.gate:g}.", "",
             "| source | lossless rules | failed at the gate (95% CI) | inconclusive | declared ≠ emitted |",
             "|---|---|---|---|---|"]
    for source, n, fails, lo, hi, inc, mism in rows:
        lines.append(f"| {source} | {n} | {fails}/{n} ({100 * lo:.1f}%–{100 * hi:.1f}%) | {inc} | {mism} |")
    lines += ["", "Planted slips (must fail in every mode):", "", "| source | slip | mode | verdict |", "|---|---|---|---|"]
    lines += [f"| {s['source']} | {s['slip']} | {s['mode']} | {s['verdict']} |" for s in slips]
    lines += ["", "VERDICT: " + ("as expected" if ok else "NOT as expected")]
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    print(json.dumps({"rows": rows, "missed_slips": missed, "ok": ok}))
    return 0 if ok else 1
