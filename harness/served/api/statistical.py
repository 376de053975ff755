"""The API check's three tests that are p-values (entering Holm's procedure with the deterministic ones):
`min_tokens` (EOS and stop ids masked too long: Freedman's inequality), `n_independent` (the n choices of one request
against choices of two: Fisher's exact test) and `unseeded_independent` (unseeded requests sharing a random stream)."""

from __future__ import annotations

import math

from harness.check.driver import Cell
from harness.served.api.checks import problems_min_tokens
from harness.served.api.records import Context
from harness.stats import TestResult


def eos_hazard(ctx: Context, exchanges, kind: str = "min_tokens_eos") -> dict:
    """Whether EOS (and the stop ids) stay masked past min_tokens (SGLang PR #33643: counted per step, about L times
    too long): at every position j >= min_tokens of the `kind` replies (`min_tokens_eos`: EOS; `min_tokens_stop_ids`:
    EOS and the request's stop_token_ids, masked and honoured alike), the local target's probability p_j of that
    set at the request's setting (the law there has no mask) against whether the reply ended with one of them there.
    Under a correct engine M = Σ (1[end_j] − p_j) is a martingale whose increments are bounded by 1 with
    predictable variance V = Σ p_j (1 − p_j); too few ends (E − N = t > 0) has p <= exp(−t² / (2 (V + t / 3)))
    (Freedman's inequality at the observed V)."""
    rows = [e for e in exchanges if e.kind == kind and e.reply.ids]
    if not rows or ctx.eos_law is None:
        return {"p": 1.0, "expected": 0.0, "observed": 0, "variance": 0.0, "positions": 0}
    expected = variance = 0.0
    observed = positions = 0
    for e in rows:
        least = e.body["min_tokens"]
        ends = set(ctx.eos) | set(e.body.get("stop_token_ids") or ())
        probs = ctx.eos_law(e.reply.ids, sorted(ends))  # p_j(an end token) at every position j of the reply
        for j in range(least, len(e.reply.ids)):
            p = float(probs[j])
            expected, variance, positions = expected + p, variance + p * (1 - p), positions + 1
            observed += e.reply.ids[j] in ends
    t = expected - observed
    p_value = 1.0 if t <= 0 else math.exp(-t * t / (2 * (variance + t / 3)))
    return {"p": p_value, "expected": expected, "observed": observed, "variance": variance, "positions": positions}


def n_independence(exchanges) -> dict:
    """Whether the n choices of one request are independent samples: identical continuations, and equal first
    tokens, in disjoint pairs of choices of one request (first half of each request's choices) against disjoint
    pairs of choices of two requests with other seeds (second halves). Under independence every pair is two
    independent draws of one law, so each count is a binomial with one rate: Fisher's exact test, one-sided
    (more agreement within a request), Bonferroni over the two statistics."""
    from scipy.stats import fisher_exact

    groups = [e.choices for e in exchanges if e.kind == "n" and e.choices]
    half = min(len(g) for g in groups) // 2 if groups else 0
    within = [(g[i], g[i + 1]) for g in groups for i in range(0, half - 1, 2)]
    across = [(groups[r][half + k], groups[r + 1][half + k]) for r in range(0, len(groups) - 1, 2)
              for k in range(half)]
    if not within or not across:
        return {"p": 1.0, "within": 0, "across": 0}
    out = {"within": len(within), "across": len(across)}
    p_values = []
    for name, same in (("identical", lambda a, b: a.ids == b.ids),
                       ("first_token", lambda a, b: bool(a.ids) and bool(b.ids) and a.ids[0] == b.ids[0])):
        w, a = sum(same(*pair) for pair in within), sum(same(*pair) for pair in across)
        p_values.append(fisher_exact([[w, len(within) - w], [a, len(across) - a]], alternative="greater")[1])
        out[f"{name}_within"], out[f"{name}_across"] = w, a
    out["p"] = float(min(1.0, 2 * min(p_values)))
    return out


def unseeded_coincidence(ctx: Context, exchanges) -> dict:
    """Whether unseeded requests share a random stream (TRT-LLM #19487 / PR #17599): the statistic is whether all
    k unseeded replies (same request, no seed) are one continuation x*, and how likely x* is. Under a correct
    engine the k replies are independent draws of one law P, so P(all k equal some x with P(x) <= P(x*)) =
    Σ_{x: P(x) <= P(x*)} P(x)^k <= P(x*)^(k-1): that bound is the p-value, with P(x*) the local target's
    probability of the returned tokens at the request's setting (teacher-forced, float64; a reply whose EOS is not
    returned is scored as its prefix, which only raises the bound). A peaked law (a likely EOS first: toy-eos)
    therefore never fails by its own coincidences. Without a local target the seeded base replies of the same
    request (distinct seeds: the same law) are pooled with the unseeded ones and the p-value is the permutation
    one, Σ_x C(n_x, k) / C(n, k), the chance that k of the n pooled replies drawn at random all coincide."""
    unseeded = [tuple(e.reply.ids or ()) for e in exchanges if e.kind == "unseeded"]
    length = next((e.body["max_tokens"] for e in exchanges if e.kind == "unseeded"), None)
    seeded = [tuple(e.reply.ids or ()) for e in exchanges if e.kind == "base" and e.body["max_tokens"] == length]
    k = len(unseeded)
    out = {"unseeded": k, "distinct": len(set(unseeded)), "seeded": len(seeded), "seeded_distinct": len(set(seeded))}
    if k < 2 or len(set(unseeded)) > 1:
        return {**out, "p": 1.0}
    if ctx.reply_law is not None:
        logp = float(sum(math.log(max(q, 1e-300)) for q in ctx.reply_law(list(unseeded[0]))))
        return {**out, "p": min(1.0, math.exp((k - 1) * logp)), "log_prob": logp, "method": "target bound"}
    pool = unseeded + seeded
    ways = sum(math.comb(pool.count(x), k) for x in set(pool))
    return {**out, "p": ways / math.comb(len(pool), k), "method": "permutation"}


def _unseeded_result(cell: Cell, ctx: Context, exchanges) -> TestResult:
    found = unseeded_coincidence(ctx, exchanges)
    cell.summary["unseeded_independent"] = found
    message = (f"all {found['unseeded']} unseeded requests returned the same continuation"
               + (f", of target probability exp({found['log_prob']:.1f})" if "log_prob" in found else
                  f", while {found['seeded_distinct']} of {found['seeded']} seeded replies are distinct")
               + " (one random stream shared?)" if found["p"] < 0.5 else "")
    return TestResult(f"{cell.name}/unseeded_independent", found["unseeded"] - found["distinct"], found["p"],
                      n=found["unseeded"], details={"message": message, **found})


def _min_tokens_result(cell: Cell, ctx: Context, exchanges) -> TestResult:
    problems = problems_min_tokens(ctx, exchanges)
    hazards = {"EOS": eos_hazard(ctx, exchanges), "stop ids": eos_hazard(ctx, exchanges, "min_tokens_stop_ids")}
    cell.summary["min_tokens_eos"], cell.summary["min_tokens_stop_ids"] = hazards["EOS"], hazards["stop ids"]
    used = {name: h for name, h in hazards.items() if h["positions"]}
    p = min(1.0, max(1, len(used)) * min((h["p"] for h in used.values()), default=1.0))  # Bonferroni over the two
    name, hazard = min(hazards.items(), key=lambda item: item[1]["p"])
    message = (f"{len(problems)} replies wrong; " + "; ".join(problems[:3]) if problems else
               f"{hazard['observed']} {name} where the target's law expects {hazard['expected']:.2f} over "
               f"{hazard['positions']} positions past min_tokens ({name} masked too long?)" if p < 0.5 else "")
    return TestResult(f"{cell.name}/min_tokens", hazard["expected"] - hazard["observed"], 0.0 if problems else p,
                      n=sum(h["positions"] for h in hazards.values()),
                      details={"message": message, **hazards["EOS"], "p": p, "stop_ids": hazards["stop ids"]})


def _n_result(cell: Cell, ctx: Context, exchanges) -> TestResult:
    found = n_independence(exchanges)
    cell.summary["n_independent"] = found
    message = (f"choices of one request agree more than choices of two: identical {found['identical_within']} of "
               f"{found['within']} pairs vs {found['identical_across']} of {found['across']}, first token "
               f"{found['first_token_within']} vs {found['first_token_across']}" if found.get("within") else "")
    return TestResult(f"{cell.name}/n_independent", found.get("identical_within", 0), found["p"],
                      n=found.get("within", 0) + found.get("across", 0), details={"message": message, **found})


STATISTICAL = {"min_tokens": _min_tokens_result, "n_independent": _n_result,
                "unseeded_independent": _unseeded_result}
