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
Every timing (the target's pass over k positions, each draft's one-token pass) is a cell of the campaign runner
(harness.runner), in this process and in order, on the models the session loaded once; no journal: the ratios c and
r must come from one run, so this campaign never resumes from an earlier one (always fresh).
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from typing import ClassVar

import torch

from harness.bench.theory import expected_tokens_per_call
from harness.configs import option
from harness.errors import HarnessError
from harness.reporting import header, num, rerun, table
from specdec_ref.runners import make_runner

GAMMAS = (1, 2, 3, 4, 6, 8)
WHERE = "local"  # timings: in this process, one at a time, in the cells' order
LOADED: dict = {}  # while the campaign runs (session): the target, the drafts, the prompt, the vocabulary


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


def cost_table(target_seconds: dict[int, float], draft_seconds: dict[str, float], *, gammas=GAMMAS,
               alphas: dict | None = None) -> list[dict]:
    """From the measured T(k) of the target and each draft's one-token time: c, r(γ+1) and α* per (draft, γ), and the
    expected speedup at a draft's measured α where one is given."""
    t1 = target_seconds[1]
    rows = []
    for name, seconds in draft_seconds.items():
        c = seconds / t1
        for g in gammas:
            r = target_seconds[g + 1] / t1
            a = (alphas or {}).get(name)
            rows.append({"draft": name, "gamma": g, "c": c, "r": r, "break_even_alpha": break_even_alpha(g, r, c),
                         "measured_alpha": a,
                         "speedup_at_measured_alpha": None if a is None else
                         expected_tokens_per_call(a, g) / (r + g * c)})
    return rows


def pass_rows(result: dict) -> list[list[str]]:
    """The target's pass over k new positions: ms and r(k) = T(k)/T(1)."""
    t1 = result["target_seconds"]["1"]
    return [[str(k), f"{1e3 * v:.1f}", f"{v / t1:.2f}"] for k, v in result["target_seconds"].items()]


def break_even_rows(result: dict) -> list[list[str]]:
    """Per draft and γ: its cost c, r(γ+1), the break-even α*, the measured α and the speedup there."""
    return [[row["draft"], f"{row['c']:.3f}", str(row["gamma"]), f"{row['r']:.2f}",
             num(row["break_even_alpha"], ".3f", "never"), num(row["measured_alpha"], ".2f", "-"),
             num(row["speedup_at_measured_alpha"], ".2f", "-")] for row in result["rows"]]


def _markdown(result: dict, pair: str, lead: tuple[str, ...]) -> str:
    return "\n".join([f"# Cost model on this machine: `{pair}`", "", *lead,
                      "Target pass over k new positions (KV-cached, B = 1):", "",
                      table(["k", "ms", "r(k) = T(k)/T(1)"], pass_rows(result)),
                      "", "Break-even acceptance α* (speedup S = E[tokens](α, γ) / (r(γ+1) + γc) reaches 1; "
                      "'never' = not even at α = 1):", "",
                      table(["draft", "c", "γ", "r(γ+1)", "α*", "measured α", "S at measured α"],
                            break_even_rows(result)), ""])


@dataclasses.dataclass
class Config:
    JOURNALED: ClassVar[bool] = False  # a ratio comes from one run: always fresh, no --fresh / --report-only
    pair: str = option("smollm2", "--pair", "registered pair; its target and every draft family")
    extra_trunc: str = option("1,2,4", "--extra-trunc", "also time truncated drafts with these layer counts (a small "
                              "draft trained from scratch of that depth, sharing embeddings and head, costs the same)")
    threads: int | None = option(None, "--threads", "torch threads (default: torch's)", int, "N")
    repeats: int = option(7, "--repeats", "timed passes per cell (their median; one more untimed warm-up)", int, "N")
    alphas: str = option("", "--alphas", "measured α per draft, e.g. smollm2-int8=0.83,smollm2-trunc=0.3")


def parse_alphas(text: str) -> dict[str, float]:
    try:
        return {k.strip(): float(v) for k, v in (item.split("=") for item in text.split(",") if item)}
    except ValueError as exc:
        raise HarnessError(f"--alphas takes DRAFT=ALPHA,...; got {text!r}") from exc


def validate(config: Config) -> None:
    from harness import preflight

    if config.repeats < 1:
        raise HarnessError(f"--repeats must be >= 1, got {config.repeats}")
    if config.threads is not None and config.threads < 1:
        raise HarnessError(f"--threads must be >= 1, got {config.threads}")
    parse_alphas(config.alphas)
    preflight.pair(config.pair)  # a registered pair that is available here


@contextlib.contextmanager
def session(config: Config):
    """The pair's target and its drafts, loaded once (outside every clock) while the cells run."""
    from harness.pairs import get_pair

    if config.threads:
        torch.set_num_threads(config.threads)
    base = get_pair(config.pair)
    drafts = {name: get_pair(name).draft for name in ("smollm2-int8", "smollm2-trunc", "smollm2-ngram")
              if config.pair.startswith("smollm2")} or {config.pair: base.draft}
    layers = getattr(getattr(base.target, "model", None), "layers", None)
    if config.extra_trunc and layers is not None:
        from harness.models.smollm2 import truncated_draft

        for n in (int(x) for x in config.extra_trunc.split(",") if x):
            if n < len(layers):
                drafts[f"first {n} layers + head"] = truncated_draft(base.target, n)
    LOADED.update(target=base.target, drafts=drafts, prompt=(base.prompts or [[0] * 16])[0], vocab=base.vocab_size,
                  dtype=str(base.target.dtype).removeprefix("torch."))
    try:
        yield
    finally:
        LOADED.clear()


def provenance_fields(config: Config) -> dict:
    return {"seed": 0, "dtype": LOADED.get("dtype", "float32")}


def cells(config: Config) -> dict[str, tuple]:
    """The target's pass over k = 1 and every γ + 1, then each draft's one-token pass."""
    ks = sorted({1, *(g + 1 for g in GAMMAS)})
    return {**{f"target/k={k}": ("target", k, config.repeats) for k in ks},
            **{f"draft/{name}": ("draft", name, config.repeats) for name in LOADED["drafts"]}}


def run_cell(role: str, which, repeats: int) -> float:
    """Median seconds of one pass: the target over `which` new positions, or the draft `which` over one."""
    model, k = (LOADED["target"], which) if role == "target" else (LOADED["drafts"][which], 1)
    with torch.inference_mode():
        return pass_seconds(model, LOADED["prompt"], k, repeats=repeats, vocab=LOADED["vocab"])


def report(run) -> int:
    """costs.json (the rows, the measured seconds) and report.md; printed too."""
    if not run.complete:
        raise HarnessError(f"{len(run.done)} of {len(run.cells)} timings made (--budget-s / --stop-at): no ratio to "
                           "report")
    target = {args[1]: run.done[key] for key, args in run.cells.items() if args[0] == "target"}
    drafts = {args[1]: run.done[key] for key, args in run.cells.items() if args[0] == "draft"}
    result = {"target_seconds": {str(k): v for k, v in target.items()}, "draft_seconds": drafts,
              "rows": cost_table(target, drafts, alphas=parse_alphas(run.config.alphas)),
              "prompt_tokens": len(LOADED["prompt"]), "threads": torch.get_num_threads()}
    run.write_result("costs.json", "campaign.bench_costs", rows=result["rows"],
                     summary={k: v for k, v in result.items() if k != "rows"})
    text = _markdown(result, run.config.pair, (header(run, f"{result['threads']} threads",
                                                      f"prompt {result['prompt_tokens']} tokens", "median of repeats"),
                                               "", rerun(run), ""))
    run.write_text("report.md", text)
    print(text)
    return 0
