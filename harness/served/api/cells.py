"""The API check's cells and their verdict: one cell per prompt (`cells`, after asking what the engine offers), the
check that runs the cell's tests on its exchanges (`API_CHECK`), the local target's law the p-value tests read, and the
report's notes on the API cells."""

from __future__ import annotations

import dataclasses
import math

from harness.check.driver import Cell, Check
from harness.check.report import deterministic_result
from harness.errors import HarnessError
from harness.served.api.checks import CHECKS, problems_seed
from harness.served.api.drawing import plain_setting
from harness.served.api.offers import not_offered, refused_fields, skipped_tests, streams, takes_min_stop_ids
from harness.served.api.records import TESTS, ApiCell, Context
from harness.served.api.statistical import STATISTICAL
from harness.served.text import decode


def _api_tests(cell: Cell, trials, rate: float, power: float) -> list:
    ctx, exchanges = cell.summary["_api"], trials[0]
    ctx.reproducible = not problems_seed(ctx, exchanges)
    cell.summary["seed_reproducible"] = ctx.reproducible
    results = []
    for name in cell.summary["_tests"]:
        if name in STATISTICAL:
            results.append(STATISTICAL[name](cell, ctx, exchanges))
            continue
        problems = CHECKS[name](ctx, exchanges)
        results.append(deterministic_result(
            f"{cell.name}/{name}", not problems, n=len(exchanges),
            message="" if not problems else f"{len(problems)} replies wrong; " + "; ".join(problems[:3])))
    return results


API_CHECK = Check("api", lambda cell: len(cell.summary["_tests"]), _api_tests)


def cells(run, prompts: list) -> list[Cell]:
    """One cell per prompt, at the first sampling setting without history-dependent parameters (else T = 1)."""
    from harness.check.settings import Setting
    from specdec_ref.generate import default_eos, eos_set

    if run.tokenizer is None or any(not isinstance(p, list) for p in prompts):
        raise HarnessError("the API check reads token texts with the local tokenizer: give --pair NAME or "
                           "--target PATH (the model the engine serves)")
    ctx = Context(eos_set(default_eos(run.pair.target)), lambda ids: decode(run.tokenizer, ids),
                  run.config.logprob_tolerance)
    setting = next((s for s in run.config.settings if s.temperature > 0 and not s.extras()), Setting(1.0))
    stream = streams(run, list(prompts[0]))
    chat = streams(run, list(prompts[0]), chat=True)
    tools = chat and streams(run, list(prompts[0]), tools=True)
    stop_ids = takes_min_stop_ids(run, list(prompts[0]))
    lacks = not_offered(run)
    lacks.update(refused_fields(run, list(prompts[0]), lacks))
    skipped = skipped_tests(lacks)
    tests = tuple(t for t in TESTS if t not in skipped) + (("stream",) if stream else ()) + \
        (("chat_stream",) if chat else ()) + (("tool_calls_finish_reason",) if tools else ())
    return [Cell(f"api/{setting.label}/prompt{i}", [API_CHECK],
                 ApiCell(setting, i, list(p), stream, chat, tools, stop_ids, lacks), math.nan,
                 {"_run": run, "_api": dataclasses.replace(ctx, eos_law=_target_law(run, list(p), plain_setting()),
                                                      reply_law=_target_law(run, list(p), setting)),
                  "_tests": tests, "setting": dataclasses.asdict(setting), "streams": stream, "chat_streams": chat,
                  "chat_tools": tools, "min_tokens_with_stop_ids": stop_ids, "not_offered": lacks,
                  "skipped_tests": skipped})
            for i, p in enumerate(prompts)]


def _target_law(run, prompt: list[int], setting):
    """(ids, tokens) -> P(tokens) at each position of a reply to `prompt`: the local target (float64),
    teacher-forced, at `setting` (the min_tokens requests': T = 1) without min_tokens; tokens None: P(the reply's
    own token) at each position (None without a local target)."""
    if run.pair is None:
        return None

    def law(ids: list[int], eos: list[int] | None = None):
        import torch

        from harness.check.exact_laws import target64
        from specdec_ref.processing import process

        seq = torch.tensor([prompt + list(ids)], dtype=torch.long)
        with torch.inference_mode():
            logits = target64(run.pair)(input_ids=seq).logits[0, len(prompt) - 1 : -1, : run.pair.vocab_size].double()
        probs = process(logits, setting)
        if eos is None:
            return probs.gather(1, torch.tensor(list(ids), dtype=torch.long)[:, None])[:, 0].numpy()
        return probs[:, eos].sum(-1).numpy()

    return law


def notes(report) -> list[str]:
    cases = [c for c in report.cases if c["name"].startswith("api/")]
    if not cases:
        return []
    total = sum(c.get("stop_requests", 0) for c in cases)
    placed = sum(c.get("stops_placed", 0) for c in cases)
    inside = sum(c.get("stops_inside_step", 0) for c in cases)
    across = sum(c.get("stops_across_steps", 0) for c in cases)
    histogram: dict[str, int] = {}
    for c in cases:
        for k, v in c.get("tokens_per_delta", {}).items():
            histogram[k] = histogram.get(k, 0) + v
    streamed = cases[0].get("streams")
    where = (f"{inside} of {placed} placed on streamed steps ended before the last token of their step, {across} "
             f"spanned two steps; tokens per delta {histogram}" if streamed and placed else
             "the engine does not stream, so the steps are not known (stops chosen at spread positions)")
    lacks = cases[0].get("not_offered") or {}
    alike = [(c["name"], c["unseeded_independent"]) for c in cases
             if (c.get("unseeded_independent") or {}).get("distinct") == 1 and c["unseeded_independent"]["p"] >= 1e-3]
    return [f"API check: {total} stop requests; {where}; seeds reproduce: "
            f"{all(c.get('seed_reproducible') for c in cases)}"] + \
        [f"API check: not offered by the engine, so not tested: {field} ({why})" for field, why in lacks.items()] + \
        (["API check: tests skipped (each needs a request field the engine does not offer, listed above): "
          + ", ".join(sorted(cases[0]["skipped_tests"]))] if cases[0].get("skipped_tests") else []) + \
        [f"API check: {name}: all {u['unseeded']} unseeded replies were one continuation, "
         + (f"of target probability {math.exp(u['log_prob']):.3g}" if "log_prob" in u else "as often as the seeded bases allow by chance")
         + f" (p = {u['p']:.3g}): unseeded_independent cannot tell a shared random stream from chance there"
         for name, u in alike]
