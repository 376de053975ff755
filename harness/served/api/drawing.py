"""The API check's requests, built and sent for one cell (`draw`): seeded base continuations (plain, repeated,
streamed), the requests chosen on them (harness.served.api.design), the min_tokens, n > 1 and chat requests, and the
cell's summary of where the stops landed among the streamed steps and what the chat replies held."""

from __future__ import annotations

import dataclasses
import json

from harness.check.driver import Cell
from harness.errors import HarnessError
from harness.served.api.design import (
    caps,
    frequent_tokens,
    min_tokens_cases,
    placement,
    stop_cases,
    stops_of,
    token_steps,
)
from harness.served.api.offers import route
from harness.served.api.records import N_CHOICES, STOP_KINDS, TOOLS, ApiCell, Context, Exchange
from harness.served.api.replies import parse_chat, parse_chat_stream, parse_choices, parse_reply, parse_stream
from harness.served.client import RequestRefused
from harness.served.text import decode

N_REQUESTS = 2  # n > 1 requests per prompt (and one repeated: seed_reproducible)
CHAT_REQUESTS = 8  # chat requests per prompt (each plain and streamed), where the engine streams chat
MIN_TOKENS_EOS_FRACTION = 2
MIN_TOKENS_EOS_REQUESTS = 32  # per prompt, where the model has an EOS
MIN_TOKENS_STOP_ID_REQUESTS = 32  # per prompt, with stop_token_ids (where the engine takes them with min_tokens)


def _body(run, data: ApiCell, seed: int | None, max_tokens: int, stream: bool = False, **fields) -> dict:
    from harness.served.requests import sampling_request

    body = sampling_request(run.model, data.prompt, 1, max_tokens, data.setting, seed, extra=run.config.extra_body)
    body.update(logprobs=1, return_tokens_as_token_ids=True, **fields)
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def _send(run, jobs: list[tuple[str, dict]], path: str = "/v1/completions") -> dict:
    try:
        return route(run).run_all(path, jobs, run.store, run.progress)
    except RequestRefused as exc:
        raise HarnessError(f"the API check's requests were refused: {exc}") from None


CAP_STEP_TRIES = 3  # shorter bases tried when no base at --api-length ends in a multi-token step


def draw(run, cell: Cell) -> tuple[list[Exchange], None]:
    data, config, ctx = cell.data, run.config, cell.summary["_api"]
    length = config.api_length
    seeds = [config.seed * 1_000_003 + 31 * data.index + 7 * j + 1 for j in range(config.api_seeds)]
    key = f"api/{cell.name}"
    unseeded = [(f"{key}/unseeded/{length}/{config.seed}/{j}", _body(run, data, None, length))
                for j in range(config.api_unseeded)]
    out, steps_of, replies = _bases(run, data, key, seeds, length, repeat=True, extra=unseeded)
    out += [Exchange("unseeded", None, body, parse_reply(replies[k], run.engine.base)) for k, body in unseeded]
    # The cap-before-stop case needs a base whose last step (the one reaching max_tokens) holds >= 2 tokens; where
    # none does, shorter bases of the same seeds move the cap onto other steps. Where no base streamed a step of
    # >= 2 tokens (one token per delta: speculation off, or an implementation that reports no steps), no cap can
    # fall inside one, so none is asked for.
    for cut in range(1, CAP_STEP_TRIES + 1):
        if not data.streams or length - cut < 2 or not _multi_token_steps(steps_of) or \
                any(_cap_step(e, steps_of) for e in out if e.kind == "base"):
            break
        more, more_steps, _ = _bases(run, data, key, seeds, length - cut)
        out += more
        steps_of.update(more_steps)
    more = []  # the requests chosen on each base continuation
    for ex in [e for e in out if e.kind == "base"]:
        cap, steps = ex.body["max_tokens"], steps_of[(ex.seed, ex.body["max_tokens"])]
        chosen = [(kind, cap, fields) for kind, fields in
                  stop_cases(ex.reply.ids or [], steps, ex.reply.reason == "length", ctx.eos, ctx.decode)
                  if (cap == length or kind == "stop_in_cap_step") and not set(fields) & set(data.not_offered)]
        chosen += [("cap", c, {}) for c in caps(steps, cap)] if cap == length else []
        chosen += [(kind, cap, fields) for kind, fields in
                   min_tokens_cases(ex.reply.ids or [], steps, ctx.eos, ctx.decode)
                   if "min_tokens" not in data.not_offered] if cap == length else []
        for kind, max_tokens, fields in chosen:
            body = _body(run, data, ex.seed, max_tokens, **fields)
            more.append((f"{key}/{kind}/{ex.seed}/{max_tokens}/{json.dumps(fields, sort_keys=True)}", kind, body, ex))
    jobs = [(name, body) for name, _, body, _ in more]
    if data.streams:
        jobs += [(name + "/stream", {**body, "stream": True, "stream_options": {"include_usage": True}})
                 for name, _, body, _ in more]
    least = max(2, length // MIN_TOKENS_EOS_FRACTION)
    eos_seeds = [seeds[0] + 7_919 * (j + 1) for j in range(MIN_TOKENS_EOS_REQUESTS)]
    plain = dataclasses.replace(data, setting=plain_setting())  # T = 1: no truncation hides EOS from the test
    if "min_tokens" in data.not_offered:
        eos_seeds = []
    eos_jobs = [(f"{key}/min_tokens_eos/{least}/{s}", _body(run, plain, s, length, min_tokens=least))
                for s in eos_seeds] if ctx.eos else []  # without an EOS the mask has nothing to hide
    stop_ids = frequent_tokens([e.reply.ids or [] for e in out if e.kind == "base"], ctx.eos) if data.min_stop_ids \
        else []
    stop_seeds = [seeds[0] + 6_007 * (j + 1) for j in range(MIN_TOKENS_STOP_ID_REQUESTS)] if stop_ids else []
    eos_jobs += [(f"{key}/min_tokens_stop_ids/{least}/{stop_ids}/{s}",
                  _body(run, plain, s, length, min_tokens=least, stop_token_ids=stop_ids)) for s in stop_seeds]
    n_seeds = [seeds[0] + 104_729 * (j + 1) for j in range(N_REQUESTS)] if "n" not in data.not_offered else []
    n_jobs = [(f"{key}/n/{N_CHOICES}/{s}", {**_body(run, data, s, length), "n": N_CHOICES}) for s in n_seeds]
    n_jobs += [(f"{key}/n-repeat/{N_CHOICES}/{n_seeds[0]}", n_jobs[0][1])] if n_jobs else []
    chat_jobs, chat_seeds = [], [seeds[0] + 31_337 * (j + 1) for j in range(CHAT_REQUESTS)]
    if data.chat_streams:
        for s in chat_seeds:
            body = _chat_body(run, data, s, length)
            chat_jobs += [(f"{key}/chat/{s}", body),
                          (f"{key}/chat-stream/{s}", {**body, "stream": True, "stream_options": {"include_usage": True}})]
    replies = _send(run, jobs + eos_jobs + n_jobs)
    if chat_jobs:
        replies.update(_send(run, chat_jobs, "/v1/chat/completions"))
    for name, kind, body, ex in more:
        streamed = parse_stream(replies[name + "/stream"]) if data.streams else None
        out.append(Exchange(kind, ex.seed, body, parse_reply(replies[name], run.engine.base), streamed))
    for (name, body), s in zip(eos_jobs, (eos_seeds if ctx.eos else []) + stop_seeds, strict=True):
        kind = "min_tokens_stop_ids" if "stop_token_ids" in body else "min_tokens_eos"
        out.append(Exchange(kind, s, body, parse_reply(replies[name], run.engine.base)))
    for j, (name, body) in enumerate(n_jobs):
        choices = parse_choices(replies[name], N_CHOICES, run.engine.base)
        kind = "n" if j < len(n_seeds) else "n_repeat"
        out.append(Exchange(kind, body["seed"], body, choices[0], choices=choices))
    for s in chat_seeds if chat_jobs else ():
        body = dict(chat_jobs[0][1], seed=s)
        out.append(Exchange("chat", s, body, parse_chat(replies[f"{key}/chat/{s}"], run.engine.base),
                            parse_chat_stream(replies[f"{key}/chat-stream/{s}"])))
    cell.summary.update(_placements(ctx, out, steps_of))
    cell.summary["steps_from"] = ("the stream's step tags (harness.served.llama_api: one token per delta)"
                                  if any(e.streamed is not None and e.streamed.steps for e in out) else "deltas")
    cell.summary.update(_chat_summary(ctx, out))
    return out, None


def plain_setting():
    from harness.check.settings import Setting

    return Setting(1.0)


def _chat_body(run, data: ApiCell, seed: int, length: int) -> dict:
    body = _body(run, data, seed, length)
    for field in ("prompt", "n", "logprobs", "return_tokens_as_token_ids"):
        body.pop(field, None)
    out = {**body, "messages": [{"role": "user", "content": decode(run.tokenizer, data.prompt)}],
           "return_token_ids": True}
    return {**out, "tools": TOOLS, "tool_choice": "auto"} if data.tools else out


def _chat_summary(ctx: Context, exchanges: list[Exchange]) -> dict:
    """How many chat replies ended their reasoning (a reasoning parser split them), and how many of those ends
    fell inside a streamed delta of more than one token (the marker token: the first whose text is past the
    non-streamed reasoning_content), and how many of those had tokens of the delta on both sides of it."""
    chats = [e for e in exchanges if e.kind == "chat" and e.streamed is not None]
    split = inside = middle = 0
    for e in chats:
        ids, sizes = e.reply.ids, e.streamed.deltas or []
        if e.reply.reasoning is None or not e.reply.text or not ids or sum(sizes) != len(ids):
            continue
        split += 1
        marker = next((m for m in range(len(ids)) if len(ctx.decode(ids[: m + 1])) > len(e.reply.reasoning)), None)
        step_of = token_steps(sizes)
        if marker is not None and sizes[step_of[marker]] > 1:
            inside += 1
            first = sum(sizes[: step_of[marker]])
            middle += first < marker < first + sizes[step_of[marker]] - 1
    with_calls = [e for e in chats if e.reply.tool_calls]
    return {"chat_requests": len(chats), "chat_reasoning_split": split, "chat_marker_in_multi_token_delta": inside,
            "chat_marker_mid_delta": middle,
            "chat_tokens_per_delta": _histogram([d for e in chats for d in (e.streamed.deltas or [])]),
            "chat_tools": bool(chats) and bool(chats[0].body.get("tools")),
            "chat_tool_call_replies": len(with_calls),
            "chat_tool_calls": sum(len(e.reply.tool_calls) for e in with_calls),
            "chat_tool_call_in_multi_token_delta": sum((e.streamed.tool_delta or 0) > 1 for e in with_calls)}


def _histogram(sizes: list[int]) -> dict:
    return {str(k): sizes.count(k) for k in sorted(set(sizes))}


def _bases(run, data: ApiCell, key: str, seeds: list[int], length: int, repeat: bool = False,
           extra: list | None = None) -> tuple[list[Exchange], dict, dict]:
    """Base continuations of `length` tokens (plain, streamed, and repeated where `repeat`), their steps by
    (seed, length): the stream's tokens per delta, where the stream returned the plain reply's tokens; and every
    reply by key (the `extra` jobs are sent along)."""
    jobs = []
    for s in seeds:
        jobs.append((f"{key}/base/{length}/{s}", _body(run, data, s, length)))
        if repeat:
            jobs.append((f"{key}/repeat/{length}/{s}", _body(run, data, s, length)))
        if data.streams:
            jobs.append((f"{key}/base-stream/{length}/{s}", _body(run, data, s, length, stream=True)))
    replies = _send(run, jobs + (extra or []))
    out, steps_of = [], {}
    for s in seeds:
        reply = parse_reply(replies[f"{key}/base/{length}/{s}"], run.engine.base)
        streamed = parse_stream(replies[f"{key}/base-stream/{length}/{s}"]) if data.streams else None
        out.append(Exchange("base", s, _body(run, data, s, length), reply, streamed))
        if repeat:
            out.append(Exchange("repeat", s, _body(run, data, s, length),
                                parse_reply(replies[f"{key}/repeat/{length}/{s}"], run.engine.base)))
        same = streamed is not None and streamed.ids == reply.ids and streamed.deltas
        steps_of[(s, length)] = (streamed.steps or streamed.deltas) if same else None
    return out, steps_of, replies


def _multi_token_steps(steps_of: dict) -> bool:
    """Whether any base's stream showed a step of >= 2 tokens (steps known: the stream returned the reply's
    tokens)."""
    return any(steps and max(steps) >= 2 for steps in steps_of.values())


def _cap_step(e: Exchange, steps_of: dict) -> bool:
    """Whether this base reached its cap in a step of >= 2 tokens."""
    steps = steps_of.get((e.seed, e.body["max_tokens"]))
    return bool(steps) and e.reply.reason == "length" and steps[-1] >= 2


def _placements(ctx: Context, exchanges: list[Exchange], steps_of: dict) -> dict:
    """How often the chosen end conditions landed inside a multi-token step, measured on the base continuations
    and the steps the engine streamed; and the tokens per delta of those streams."""
    bases = {(e.seed, e.body["max_tokens"]): e for e in exchanges if e.kind == "base"}
    stops = [e for e in exchanges if e.kind in STOP_KINDS]
    inside = across = known = 0
    for e in stops:
        at = (e.seed, e.body["max_tokens"])
        steps = steps_of.get(at)
        if not steps:
            continue
        where = placement(bases[at].reply.ids or [], steps, stops_of(e.body, ctx.eos), ctx.decode)
        if where is not None:
            known += 1
            inside += where["inside"]
            across += where["across"]
    sizes = [d for s in steps_of.values() if s for d in s]
    histogram = {str(k): sizes.count(k) for k in sorted(set(sizes))}
    return {"stop_requests": len(stops), "stops_placed": known, "stops_inside_step": inside,
            "stops_across_steps": across, "tokens_per_delta": histogram,
            "requests": len(exchanges) + sum(e.streamed is not None for e in exchanges)}
