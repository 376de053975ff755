"""Cost model of one machine: what a target pass over k positions costs, and the α a draft must reach.

Leviathan's speedup (1 − α^{γ+1}) / ((1 − α)(γc + 1)) assumes the target scores γ + 1 positions for
the price of one (true when a pass is bound by loading weights, as on a GPU with a large model). On
a CPU with a small model it is not: the pass over γ + 1 positions costs r(γ+1) = T(γ+1) / T(1) > 1
one-token passes. With that measured, the expected speedup of a draft with acceptance α and cost
ratio c is

    S(α, γ) = E[tokens per call](α, γ) / (r(γ+1) + γ·c),

and the break-even α* solves S(α*, γ) = 1 (no γ pays off when even α = 1 gives S ≤ 1). This module
measures T(k) and each draft's one-token time through the same KV-cached runner the reference uses,
and tabulates c, r and α* — the number that decides whether training a draft (e.g. `specdec
distill`) can pay off on this machine before anyone spends the CPU time.

Run: `specdec campaign bench_costs --pair smollm2 --out results/bench/costs` (writes report.md + costs.json).
The timings are cells of `harness.executor.run_cells`, the one campaign runner, with no journal
(`journal=None`): the ratios c and r must come from one run, so this campaign never resumes from an earlier one
(always fresh).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

import torch

from harness.bench.theory import expected_tokens_per_call
from harness.configs import Parser, add_arguments, option
from harness.executor import LocalExecutor, run_cells
from specdec_ref.runners import make_runner
from suites.outputs import FOLDERS


def pass_seconds(model, prompt: list[int], k: int, *, repeats: int, vocab: int) -> float:
    """Median seconds of one cached forward over k new positions after `prompt` (B = 1)."""
    run = make_runner(model, "cost", 1, "cache")
    base = torch.tensor(prompt, dtype=torch.long, device=next(model.parameters()).device)
    run.logits([0], [base], 1)  # prefill, untimed
    times = []
    for r in range(repeats + 1):  # the first timed call is a warm-up
        extra = (torch.arange(k, device=base.device) * 7 + 1 + (r % 2)) % vocab  # differs from the last call at [0]
        seq = torch.cat([base, extra])
        start = time.perf_counter()
        run.logits([0], [seq], k)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def break_even_alpha(gamma: int, r: float, c: float) -> float | None:
    """Smallest α with S(α, γ) ≥ 1; None when even α = 1 does not pay off."""
    cost = r + gamma * c
    if expected_tokens_per_call(1.0, gamma) < cost:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_tokens_per_call(mid, gamma) >= cost:
            hi = mid
        else:
            lo = mid
    return hi


def cost_model(target, drafts: dict, prompt: list[int], *, vocab: int, gammas=(1, 2, 3, 4, 6, 8),
               repeats: int = 7, alphas: dict | None = None) -> dict:
    """Measured T(k) of the target, c of each draft, r(γ+1) and α* per (draft, γ)."""
    ks = sorted({1, *(g + 1 for g in gammas)})
    cells = {**{f"target/k={k}": (target, k) for k in ks}, **{f"draft/{name}": (model, 1) for name, model in drafts.items()}}
    with torch.inference_mode(), LocalExecutor() as here:  # in this process, in order; no journal: never resumed
        done = run_cells(here, lambda model, k: pass_seconds(model, prompt, k, repeats=repeats, vocab=vocab), cells,
                         journal=None)
    t = {k: done[f"target/k={k}"] for k in ks}
    d = {name: done[f"draft/{name}"] for name in drafts}
    rows = []
    for name, seconds in d.items():
        c = seconds / t[1]
        for g in gammas:
            r = t[g + 1] / t[1]
            a = (alphas or {}).get(name)
            rows.append({"draft": name, "gamma": g, "c": c, "r": r, "break_even_alpha": break_even_alpha(g, r, c),
                         "measured_alpha": a,
                         "speedup_at_measured_alpha": None if a is None else
                         expected_tokens_per_call(a, g) / (r + g * c)})
    return {"target_seconds": {str(k): v for k, v in t.items()}, "draft_seconds": d, "rows": rows,
            "prompt_tokens": len(prompt), "threads": torch.get_num_threads()}


def _markdown(result: dict, pair: str, meta: dict) -> str:
    t1 = result["target_seconds"]["1"]
    lines = [f"# Cost model on this machine: `{pair}`", "",
             f"Generated {meta['utc_time']} · commit `{meta['git_commit']}` · {meta['device']} · "
             f"{result['threads']} threads · prompt {result['prompt_tokens']} tokens · median of repeats", "",
             "Target pass over k new positions (KV-cached, B = 1):", "",
             "| k | ms | r(k) = T(k)/T(1) |", "|---|---|---|"]
    lines += [f"| {k} | {1e3 * v:.1f} | {v / t1:.2f} |" for k, v in result["target_seconds"].items()]
    lines += ["", "Break-even acceptance α* (speedup S = E[tokens](α, γ) / (r(γ+1) + γc) reaches 1; "
              "'never' = not even at α = 1):", "",
              "| draft | c | γ | r(γ+1) | α* | measured α | S at measured α |", "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        a = row["break_even_alpha"]
        measured, speedup = row["measured_alpha"], row["speedup_at_measured_alpha"]
        lines.append(f"| {row['draft']} | {row['c']:.3f} | {row['gamma']} | {row['r']:.2f} | "
                     f"{'never' if a is None else f'{a:.3f}'} | {'-' if measured is None else f'{measured:.2f}'} | "
                     f"{'-' if speedup is None else f'{speedup:.2f}'} |")
    lines += ["", f"Reproduce: `specdec campaign bench_costs --pair {pair}`.", ""]
    return "\n".join(lines)


@dataclasses.dataclass
class Config:
    """`specdec campaign bench_costs`: its flags (harness.configs.option)."""

    pair: str = option("smollm2", '--pair', "registered pair; its target and every draft family")
    extra_trunc: str = option("1,2,4", '--extra-trunc', "also time truncated drafts with these layer counts "
                        "(a small draft trained from scratch of that depth, sharing embeddings and head, costs the same)")
    threads: int | None = option(None, '--threads', 'threads', int)
    repeats: int = option(7, '--repeats', 'repeats', int)
    alphas: str = option("", '--alphas', "measured α per draft, e.g. smollm2-int8=0.83,smollm2-trunc=0.3")
    out: str = option(FOLDERS["campaign.bench_costs"], "--out", "results folder (default: suites/outputs.py)", metavar="DIR")


def argument_parser() -> argparse.ArgumentParser:
    """`specdec campaign bench_costs`: every flag from a config field (Config, the runner's)."""
    parser = Parser(prog='specdec campaign bench_costs', description=__doc__.splitlines()[0])
    add_arguments(parser, Config)
    return parser


def main(argv: list[str] | None = None) -> int:
    from harness.envelope import write_result
    from harness.errors import HarnessError
    from harness.pairs import get_pair
    from harness.records import atomic_write_text, provenance

    parser = argument_parser()
    args = parser.parse_args(argv)
    try:
        if args.threads:
            torch.set_num_threads(args.threads)
        base = get_pair(args.pair)
        drafts = {}
        names = [n for n in ("smollm2-int8", "smollm2-trunc", "smollm2-ngram") if args.pair.startswith("smollm2")]
        for name in names or [args.pair]:
            drafts[name] = get_pair(name).draft
        if args.extra_trunc and hasattr(getattr(base.target, "model", None), "layers"):
            from harness.models.smollm2 import truncated_draft

            for n in (int(x) for x in args.extra_trunc.split(",") if x):
                if n >= len(base.target.model.layers):
                    continue
                drafts[f"first {n} layers + head"] = truncated_draft(base.target, n)
        alphas = {k: float(v) for k, v in (item.split("=") for item in args.alphas.split(",") if item)}
        prompt = (base.prompts or [[0] * 16])[0]
        result = cost_model(base.target, drafts, prompt, vocab=base.vocab_size, repeats=args.repeats, alphas=alphas)
    except (HarnessError, ValueError) as exc:
        print(f"costs: error: {exc}", file=sys.stderr)
        return 2
    meta = provenance(seed=0, dtype=str(base.target.dtype).removeprefix("torch."))
    write_result(f"{args.out}/costs.json", "campaign.bench_costs", config=args, provenance=meta, rows=result["rows"],
                 summary={k: v for k, v in result.items() if k != "rows"})
    atomic_write_text(f"{args.out}/report.md", _markdown(result, args.pair, meta))
    print(_markdown(result, args.pair, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
