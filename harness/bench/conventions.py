"""The numbers engines report about a speculative run, computed one way, under the names `vllm bench serve` uses.

Both bench reports (in-process `specdec bench` and `specdec bench --endpoint`) build their machine-readable
block here, so they carry the same named fields (docs/BENCH.md defines each one and how the EAGLE, vLLM,
SGLang and Leviathan conventions convert into each other).

Counts over a run (or one concurrency level):

- drafts            — verification steps that proposed at least one draft token (vLLM `num_drafts`);
- draft_tokens      — draft tokens proposed; accepted_tokens — of those, accepted;
- accepted_at[i]    — steps whose draft at position i (0-based) was accepted (vLLM `num_accepted_tokens_per_pos`);
- reached[i]        — steps that tested position i, i.e. whose drafts 0..i-1 were all accepted.

Derived (vLLM's names where vLLM has the number):

- spec_decode_acceptance_rate   = 100 · accepted_tokens / draft_tokens              (percent, as vLLM prints it)
- spec_decode_acceptance_length = 1 + accepted_tokens / drafts                       (tokens per step, bonus included)
- spec_decode_per_position_acceptance_rates[i] = accepted_at[i] / drafts            (UNconditional, vLLM's)
- per_position_acceptance_conditional[i]       = accepted_at[i] / reached[i]        (conditional on 0..i-1 accepted)

Latency (per request; `vllm bench serve`'s definitions): TTFT = time to the first token, E2EL = request
latency, TPOT = (E2EL − TTFT) / (tokens − 1) over requests with more than one token, ITL = every gap
between successive token emissions (a speculative step emits several tokens at once: one gap per chunk);
mean, median, p99 (linear interpolation between order statistics, as numpy's default percentile) and std.
Pure functions on plain numbers: no torch, no numpy.
"""

from __future__ import annotations

import math
import statistics

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
LATENCY_STATS = ("mean", "median", "p99", "std")
SPEC_DECODE_FIELDS = ("spec_decode_acceptance_rate", "spec_decode_acceptance_length", "spec_decode_num_drafts",
                      "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
                      "spec_decode_per_position_acceptance_rates", "per_position_acceptance_conditional")
LATENCY_FIELDS = ("completed", "total_output_tokens",
                  *(f"{s}_{m}_ms" for m in LATENCY_METRICS for s in LATENCY_STATS))
# The block both reports write, per speculative run (in-process cell / HTTP level with speculation on)
REPORT_FIELDS = (*LATENCY_FIELDS, *SPEC_DECODE_FIELDS)


def _div(a: float, b: float) -> float:
    return a / b if b else math.nan


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), linear between order statistics (numpy's default); nan when empty."""
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _stats(values: list[float], name: str) -> dict:
    xs = [v for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return {f"{s}_{name}_ms": None for s in LATENCY_STATS}
    ms = [1e3 * v for v in xs]
    return {f"mean_{name}_ms": statistics.fmean(ms), f"median_{name}_ms": statistics.median(ms),
            f"p99_{name}_ms": percentile(ms, 99), f"std_{name}_ms": statistics.pstdev(ms)}


def latency_fields(requests: list[dict]) -> dict:
    """`vllm bench serve`'s latency block from per-request records {tokens, e2el_s, ttft_s | None, gaps_s}.

    A field that the records cannot give (no TTFT when nothing was streamed) is None, never a guess."""
    ttfts = [r.get("ttft_s") for r in requests]
    tpots = [(r["e2el_s"] - r["ttft_s"]) / (r["tokens"] - 1) for r in requests
             if r.get("ttft_s") is not None and r["tokens"] > 1]
    itls = [g for r in requests for g in r.get("gaps_s") or []]
    out = {"completed": len(requests), "total_output_tokens": sum(r["tokens"] for r in requests)}
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", [r["e2el_s"] for r in requests])):
        out.update(_stats(values, name))
    return out


def spec_decode_fields(drafts: float, draft_tokens: float, accepted_tokens: float, accepted_at: list[float],
                       reached: list[float] | None = None) -> dict:
    """vLLM's spec-decode block (+ the conditional per-position rates) from counts; {} when nothing was drafted.

    Without `reached` (an engine's /metrics has only accepted_at and drafts) the conditional rate at i is
    accepted_at[i] / accepted_at[i − 1] (accepted_at[−1] = drafts): exact when every draft has the same length."""
    if not drafts:
        return {}
    unconditional = [_div(a, drafts) for a in accepted_at]
    if reached is not None:
        conditional = [_div(a, n) for a, n in zip(accepted_at, reached, strict=True)]
    else:
        conditional = conditional_from_unconditional(unconditional)
    return {"spec_decode_acceptance_rate": 100.0 * _div(accepted_tokens, draft_tokens),
            "spec_decode_acceptance_length": 1.0 + accepted_tokens / drafts,
            "spec_decode_num_drafts": int(drafts), "spec_decode_draft_tokens": int(draft_tokens),
            "spec_decode_accepted_tokens": int(accepted_tokens),
            "spec_decode_per_position_acceptance_rates": unconditional,
            "per_position_acceptance_conditional": conditional}


# ------------------------------------------------------------------------------------------ conversions

def conditional_from_unconditional(unconditional: list[float]) -> list[float]:
    """P(i accepted | 0..i−1 accepted) = u[i] / u[i − 1], u[−1] = 1 (every draft of the same length)."""
    out, before = [], 1.0
    for u in unconditional:
        out.append(_div(u, before))
        before = u
    return out


def unconditional_from_conditional(conditional: list[float]) -> list[float]:
    """P(i accepted) = Π_{j ≤ i} P(j accepted | 0..j−1 accepted)."""
    out, running = [], 1.0
    for c in conditional:
        running *= c
        out.append(running)
    return out


def acceptance_length_from_positions(unconditional: list[float]) -> float:
    """vLLM's mean acceptance length = 1 + Σ_i u[i] (each accepted draft is counted at its position)."""
    return 1.0 + math.fsum(unconditional)


def acceptance_length_from_rate(rate_percent: float, draft_tokens_per_draft: float) -> float:
    """1 + (accepted / draft tokens) · (draft tokens / drafts); with a fixed γ, 1 + rate · γ."""
    return 1.0 + rate_percent / 100.0 * draft_tokens_per_draft


def tokens_per_verify_call(tokens: float, verify_calls: float) -> float:
    """SGLang's accept length, per request: completion tokens / verify passes (`spec_verify_ct`). It counts the
    token the prefill produced, so it exceeds 1 + accepted/drafts by about 1 / verify passes."""
    return _div(tokens, verify_calls)


def mean_of_ratios(pairs: list[tuple[float, float]]) -> float:
    """EAGLE's τ as its evaluation script averages it: the mean over turns of new tokens / decoding cycles
    (each turn weighted equally, unlike the pooled ratio Σ tokens / Σ cycles)."""
    ratios = [_div(t, n) for t, n in pairs if n]
    return statistics.fmean(ratios) if ratios else math.nan
