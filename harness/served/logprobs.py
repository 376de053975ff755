"""Logprobs honesty under speculation: the engine-level check of the logprobs an engine reports.

An engine that speculates must report, for every token it emits, the *target's* logprob of that
token at that position (and the target's top k), not the draft's, not a placeholder, not the
neighbouring position's. Real bugs broke exactly this while the tokens were right (every logprob
0.0 with speculation on; prompt logprobs wrong under MTP). The token check cannot see them.

Per (prompt, sampling setting) cell the engine is asked for continuations with `logprobs: k`
(token ids named "token_id:N"); each reported value is compared with the ground truth at the same
position of the same sequence:

- `local`: a local copy of the target teacher-forced over prompt + continuation (float64 by
  default): raw mode = log-softmax of the logits, processed mode = the log of the processed law
  (temperature → top-k → top-p under the declared processing convention);
- `score`: the same engine with speculation off scores prompt + continuation (`prompt_logprobs`).

Two deterministic gating tests per cell: `sampled` (|reported − truth| ≤ tolerance for every
emitted token; both masked counts as equal) and `top_k` (every listed token's value within the
tolerance, and no token the truth ranks clearly inside its top k, by more than the tolerance,
left out). The mode (raw / processed) is the engine's own, found by asking (`specdec probe`'s
test: do the listed values move with temperature?). The tolerance is absolute, in nats; the
largest and the 99th-percentile |Δ| measured are reported next to it so that a user can see how
much room the numerics took (docs/SERVED-CHECKS.md lists the spreads measured on real engines).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from harness.check.driver import Cell, Check, MalformedTrials
from harness.check.report import deterministic_result
from harness.errors import HarnessError
from harness.served.text import TOKEN_ID_PREFIX

MASKED = -1e3  # a reported logprob at or below this is "cannot be sampled" (OpenAI's -9999, -inf)
MODES = ("auto", "raw", "processed")


@dataclasses.dataclass
class LogprobsCell:
    setting: object  # harness.check.settings.Setting
    index: int
    prompt: list[int]
    mode: str  # "raw" | "processed"


@dataclasses.dataclass
class Reported:
    """One continuation as the engine reported it."""

    prompt: list[int]
    tokens: list[int]
    sampled: list[float]  # reported logprob of each emitted token
    top: list[dict[int, float]]  # reported top-k (plus the emitted token, where an engine adds it) per position


def _id(name) -> int:
    text = str(name)
    if text.startswith(TOKEN_ID_PREFIX):
        return int(text[len(TOKEN_ID_PREFIX):])
    raise MalformedTrials(f"logprob entry {text[:30]!r} is not named 'token_id:N' (return_tokens_as_token_ids)")


def parse_choice(choice: dict, prompt: list[int]) -> Reported:
    """The emitted ids, their logprobs and the top-k of an OpenAI completions choice (legacy `logprobs`)."""
    from harness.served.probe import choice_token_ids

    lp = choice.get("logprobs")
    ids = choice_token_ids(choice)
    if not isinstance(lp, dict) or ids is None:
        raise MalformedTrials("a choice came back without token ids or without `logprobs`")
    sampled, tops = lp.get("token_logprobs"), lp.get("top_logprobs")
    if not isinstance(sampled, list) or not isinstance(tops, list) or not len(sampled) == len(tops) == len(ids):
        raise MalformedTrials(f"{len(ids)} tokens but {len(sampled or [])} token_logprobs and {len(tops or [])} "
                              "top_logprobs entries: one per emitted token expected")
    try:
        top = [{_id(k): float(v) for k, v in (t or {}).items()} for t in tops]
        values = [float(v) for v in sampled]
    except (TypeError, ValueError) as exc:
        raise MalformedTrials(f"unreadable logprob values ({exc})") from None
    return Reported(list(prompt), list(ids), values, top)


# ------------------------------------------------------------------------------------------ ground truth

def local_laws(run, rows: list[Reported], cell: LogprobsCell) -> list[np.ndarray]:
    """Per row, the truth's log law [len(tokens), V] at each emitted position (local target, teacher-forced)."""
    import torch

    from harness.check.exact_laws import target64
    from specdec_ref.processing import ORDERS, process

    model = target64(run.pair) if run.config.score_dtype == "float64" else run.pair.target
    vocab = run.pair.vocab_size
    order = getattr(run.config, "processing_order", "standard")
    if order not in ORDERS:
        raise HarnessError(f"--processing-order must be one of {', '.join(ORDERS)}, got {order!r}")
    out = []
    for r in rows:
        seq = torch.tensor([r.prompt + r.tokens], dtype=torch.long)
        with torch.inference_mode():
            logits = model(input_ids=seq).logits[0, len(r.prompt) - 1 : -1, :vocab].double()
        if cell.mode == "raw":
            out.append(torch.log_softmax(logits, dim=-1).numpy())
        else:
            with np.errstate(divide="ignore"):
                out.append(np.log(process(logits, cell.setting, order=order).numpy()))
    return out


def scored_laws(run, rows: list[Reported], cell: LogprobsCell) -> list[list[dict[int, float]]]:
    """Per row and position, {id: logprob} of the reference endpoint's listing (its top k + the actual token)."""
    from harness.served.requests import reply_choices, sampling_request

    k = run.config.top_logprobs
    jobs = []
    for i, r in enumerate(rows):
        body = sampling_request(run.reference_model, r.prompt + r.tokens, 1, 1, cell.setting, 0, extra=run.config.extra_body)
        body.update(prompt_logprobs=k, return_tokens_as_token_ids=True)
        jobs.append((f"logprobs-score/{cell.mode}/{cell.setting.label}/{r.prompt!r}/{r.tokens!r}/{i}", body))
    replies = run.reference.run_all("/v1/completions", jobs, run.store, run.progress)
    out = []
    for (key, _), r in zip(jobs, rows, strict=True):
        entries = reply_choices(replies[key], 1, run.reference.base)[0].get("prompt_logprobs")
        if not isinstance(entries, list) or len(entries) != len(r.prompt) + len(r.tokens):
            raise HarnessError(f"{run.reference.base} did not return prompt_logprobs for every token: it cannot be "
                               "the logprobs ground truth; give --pair/--target (a local target)")
        out.append([{_id(t) if not str(t).isdigit() else int(t): float(v["logprob"]) for t, v in e.items()}
                    for e in entries[len(r.prompt):]])
    return out


# ------------------------------------------------------------------------------------------ comparison

def _same(a: float, b: float, tol: float) -> bool:
    if a <= MASKED or b <= MASKED or not math.isfinite(a) or not math.isfinite(b):
        return (a <= MASKED or a == -math.inf) and (b <= MASKED or b == -math.inf)
    return abs(a - b) <= tol


def compare(rows: list[Reported], truth, k: int, tol: float) -> dict:
    """Every reported value against the truth (a [T, V] array per row, or {id: logprob} listings per position).

    Returns counts, the worst offenders and the spread of |Δ| over the values both sides give finitely."""
    diffs, bad_sampled, bad_top, missing, compared, first = [], 0, 0, 0, 0, {}

    def value(law, t):
        if isinstance(law, dict):
            return law.get(t)
        return float(law[t])

    for i, (r, laws) in enumerate(zip(rows, truth, strict=True)):
        for j, (tok, lp, top) in enumerate(zip(r.tokens, r.sampled, r.top, strict=True)):
            law = laws[j]
            want = value(law, tok)
            compared += 1
            if want is None:  # the scorer always lists the actual token; a missing one is the scorer's fault
                raise HarnessError("the reference endpoint's prompt_logprobs leave out the scored token")
            if math.isfinite(want) and want > MASKED and lp > MASKED:
                diffs.append(abs(lp - want))
            if not _same(lp, want, tol):
                bad_sampled += 1
                first.setdefault("sampled", {"row": i, "position": j, "token": tok, "reported": lp, "truth": want})
            # top-k: the listed values, and nothing the truth ranks clearly inside its top k left out
            listed_ok = True
            for t, v in top.items():
                w = value(law, t)
                if w is None:
                    continue  # the scorer did not list it: only the ranking below can judge it
                if math.isfinite(w) and w > MASKED and v > MASKED:
                    diffs.append(abs(v - w))
                if not _same(v, w, tol):
                    listed_ok = False
            if isinstance(law, dict):
                ranked = sorted(law.items(), key=lambda kv: -kv[1])
            else:
                idx = np.argpartition(-law, min(k, len(law) - 1))[: k + 1]
                ranked = sorted(((int(t), float(law[t])) for t in idx), key=lambda kv: -kv[1])
            ranked = [(t, v) for t, v in ranked if v > MASKED]
            if k and len(ranked) > 0 and top:
                kth = ranked[min(k, len(ranked)) - 1][1]
                must = [t for t, v in ranked[:k] if v > kth + tol]  # clearly inside the top k: no near-tie
                missing_here = [t for t in must if t not in top]
                if missing_here:
                    listed_ok = False
                    missing += len(missing_here)
            elif k and not top and ranked:
                listed_ok = False
                missing += min(k, len(ranked))
            if not listed_ok:
                bad_top += 1
                first.setdefault("top_k", {"row": i, "position": j, "reported": dict(list(top.items())[:5]),
                                           "truth_top": ranked[:5]})
    d = np.array(diffs) if diffs else np.zeros(1)
    return {"compared": compared, "bad_sampled": bad_sampled, "bad_top": bad_top, "missing_top": missing,
            "max_abs_diff": float(d.max()), "p99_abs_diff": float(np.quantile(d, 0.99)),
            "median_abs_diff": float(np.median(d)), "values": len(diffs), "first": first}


# ------------------------------------------------------------------------------------------ the check

def _logprob_tests(cell: Cell, trials, rate: float, power: float) -> list:
    run, data = cell.summary["_run"], cell.data
    rows = trials[0]
    truth = local_laws(run, rows, data) if run.logprobs_truth == "local" else scored_laws(run, rows, data)
    tol = run.config.logprob_tolerance
    stats = compare(rows, truth, run.config.logprobs_k, tol)
    cell.summary.update({key: stats[key] for key in ("compared", "bad_sampled", "bad_top", "missing_top",
                                                      "max_abs_diff", "p99_abs_diff", "median_abs_diff")},
                        logprobs_mode=data.mode, tolerance=tol, truth=run.logprobs_truth, first_mismatch=stats["first"])
    spread = f"largest |Δ| {stats['max_abs_diff']:.3g} nats, 99th percentile {stats['p99_abs_diff']:.3g}"
    sampled = deterministic_result(
        f"{cell.name}/sampled", stats["bad_sampled"] == 0, n=stats["compared"],
        message="" if not stats["bad_sampled"] else
        f"{stats['bad_sampled']} of {stats['compared']} emitted tokens' logprobs differ from the target's by more "
        f"than {tol:g} nats (first: {stats['first'].get('sampled')}); {spread}")
    top = deterministic_result(
        f"{cell.name}/top_k", stats["bad_top"] == 0, n=stats["compared"],
        message="" if not stats["bad_top"] else
        f"{stats['bad_top']} of {stats['compared']} positions list a top-{run.config.logprobs_k} that is not the "
        f"target's ({stats['missing_top']} of its tokens left out; first: {stats['first'].get('top_k')})")
    return [sampled, top]


LOGPROBS_CHECK = Check("logprobs_honesty", lambda cell: 2, _logprob_tests)


def engine_mode(run, prompt) -> str:
    """raw / processed: what the engine reports (asked, unless --logprobs-mode says)."""
    from harness.served.probe import logprobs_mode

    if run.config.logprobs_mode != "auto":
        return run.config.logprobs_mode
    mode = logprobs_mode(run.engine, run.model, prompt)
    if mode not in ("raw", "processed"):
        raise HarnessError(f"{run.engine.base} returns no logprobs for sampled tokens (logprobs: k): nothing to "
                           "check; enable them (vLLM: --max-logprobs) or leave out --engine-checks logprobs")
    return mode


def choose_truth(run) -> str:
    if run.pair is not None:
        return "local"
    if run.reference is not None:
        from harness.served.probe import prompt_scoring

        if prompt_scoring(run.reference, run.reference_model, "1 2 3") == "prompt_logprobs":
            return "score"
    raise HarnessError("the logprobs check needs a ground truth: --pair/--target (a local target) or "
                       "--reference-endpoint that returns prompt_logprobs (speculation off)")


def cells(run, prompts: list) -> list[Cell]:
    """One cell per (prompt, sampling setting at T > 0 without history-dependent parameters)."""
    run.logprobs_truth = choose_truth(run)
    if any(not isinstance(p, list) for p in prompts):  # text prompts: the local tokenizer, else the scorer's
        from harness.served.requests import server_prompt_ids
        from harness.served.text import encode

        prompts = [p if isinstance(p, list) else encode(run.tokenizer, p) if run.tokenizer is not None
                   else server_prompt_ids(run, p) for p in prompts]
    mode = engine_mode(run, prompts[0])
    settings = [s for s in run.config.settings if s.temperature > 0 and not s.extras()]
    if run.logprobs_truth == "score":
        from harness.served.probe import raw_law_suffices, scoring_mode

        # the reference's *prompt scores* are the truth here, and they need not follow its sampled-token logprobs
        # (vLLM 0.32 writes prompt scores raw whatever --logprobs-mode): in raw mode both sides are the raw law
        ref_mode = scoring_mode(run.reference, run.reference_model, prompts[0], "prompt_logprobs")
        if ref_mode != mode and not raw_law_suffices(settings):
            raise HarnessError(f"the engine reports {mode} logprobs but the reference endpoint's prompt scores are "
                               f"{ref_mode} (vLLM writes them raw whatever its --logprobs-mode): compare at T = 1 "
                               "without truncation, serve the engine with raw logprobs, or give a local target "
                               "(--pair)")
    out = []
    for setting in settings:
        for i, prompt in enumerate(prompts):
            out.append(Cell(f"logprobs/{mode}/{setting.label}/prompt{i}", [LOGPROBS_CHECK],
                            LogprobsCell(setting, i, list(prompt), mode), math.nan,
                            {"_run": run, "setting": dataclasses.asdict(setting)}))
    if not out:
        raise HarnessError("the logprobs check needs a sampling setting at T > 0 without penalties (--setting)")
    return out


def draw(run, cell: Cell, n: int):
    """Continuations with their reported logprobs: min(n, --logprobs-samples) per cell."""
    from harness.served.requests import reply_choices, sampling_request

    data, config = cell.data, run.config
    n = min(n, config.logprobs_samples)
    seed = config.seed * 1_000_003 + 1000 * data.index + int(data.setting.temperature * 100) + 77
    jobs = []
    for i, lo in enumerate(range(0, n, config.chunk)):
        body = sampling_request(run.model, data.prompt, min(config.chunk, n - lo), run.length, data.setting,
                        seed + 104_729 * i, extra=config.extra_body)
        body.update(logprobs=config.logprobs_k, return_tokens_as_token_ids=True)
        jobs.append((f"logprobs/{data.mode}/{data.setting.label}/{data.prompt!r}/{seed}/{i}", body))
    replies = run.engine.run_all("/v1/completions", jobs, run.store, run.progress)
    rows = []
    for key, body in jobs:
        for choice in reply_choices(replies[key], body["n"], run.engine.base):
            rows.append(parse_choice(choice, data.prompt))
    if not any(r.tokens for r in rows):
        raise MalformedTrials("no continuation has a token")
    return rows, None


def notes(report) -> list[str]:
    cases = [c for c in report.cases if "max_abs_diff" in c]
    if not cases:
        return []
    worst = max(c["max_abs_diff"] for c in cases)
    tol = cases[0]["tolerance"]
    return [f"logprobs honesty: {sum(c['compared'] for c in cases)} emitted tokens ({cases[0]['logprobs_mode']} "
            f"mode, truth {cases[0]['truth']}) compared at tolerance {tol:g} nats; largest |Δ| measured "
            f"{worst:.3g} nats, 99th percentile {max(c['p99_abs_diff'] for c in cases):.3g}"]
