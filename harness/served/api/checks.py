"""The API check's deterministic tests: each reply judged on its own (max_tokens, usage, finish_reason, logprobs
aligned with the ids, min_tokens' masks), against the correct bookkeeping (stop strings, stop token ids: nothing past
the end condition, and, where seeds reproduce, the same seed's base cut there), and against its twin (a repeated
seed, a stream and its non-streamed reply, chat streams, tool-call finish reasons). Each returns the problems found
(an empty list: the test passes)."""

from __future__ import annotations

import math

from harness.served.api.design import stops_of
from harness.served.api.records import MIN_KINDS, STRING_KINDS, TOKEN_KINDS, Context, Exchange, Reply
from harness.served.bookkeeping import Bookkeeping, first_stop
from harness.served.text import TOKEN_ID_PREFIX


def _replies(exchanges: list[Exchange]):
    """(exchange, reply) for every completion reply, streamed ones and every choice of n > 1 included (the chat
    replies have their own test)."""
    for e in exchanges:
        if e.kind == "chat":
            continue
        for r in e.choices or [e.reply]:
            yield e, r
        if e.streamed is not None:
            yield e, e.streamed


def _where(e: Exchange, r: Reply) -> str:
    return f"{e.kind} seed {e.seed}{' (stream)' if r is e.streamed else ''}"


def problems_max_tokens(ctx: Context, exchanges):
    return [f"{_where(e, r)}: {len(r.ids)} tokens returned for max_tokens={e.body['max_tokens']}"
            for e, r in _replies(exchanges) if r.ids is not None and len(r.ids) > e.body["max_tokens"]]


def problems_usage(ctx: Context, exchanges):
    out = []
    for e, r in _replies(exchanges):
        if r.ids is None:
            out.append(f"{_where(e, r)}: no token ids returned")
        elif r.usage != len(r.ids):
            out.append(f"{_where(e, r)}: usage.completion_tokens "
                       f"{r.usage} for {len(r.ids)} tokens returned")
    return out


def _end(ctx: Context, e: Exchange, r: Reply):
    """What the correct bookkeeping makes of the returned ids under this request's end conditions."""
    return Bookkeeping().finish([[t] for t in r.ids], stops_of(e.body, ctx.eos), ctx.decode)


def problems_finish_reason(ctx: Context, exchanges):
    out = []
    for e, r in _replies(exchanges):
        if r.ids is None:
            continue
        want = _end(ctx, e, r)
        cut = len(want.tokens) < len(r.ids)
        if want.reason == "stop" and r.reason != "stop":
            out.append(f"{_where(e, r)}: finish_reason {r.reason!r} though {want.stop_reason or 'EOS'!r} "
                       f"ends the reply at token {len(want.tokens)} of {len(r.ids)}")
        elif want.reason != "stop" and r.reason != "length":
            out.append(f"{_where(e, r)}: finish_reason {r.reason!r} with no stop, EOS or stop token in "
                       f"the {len(r.ids)} tokens returned")
        elif want.reason != "stop" and not cut and len(r.ids) != e.body["max_tokens"]:
            out.append(f"{_where(e, r)}: finish_reason 'length' after {len(r.ids)} tokens, below "
                       f"max_tokens={e.body['max_tokens']}")
    return out


def problems_stops(ctx: Context, exchanges, strings: bool):
    """Nothing past the first end condition, in text, ids or logprobs (`strings`: stop strings, in the replies
    that ask for them; else EOS and stop_token_ids, in every reply), and, where seeds reproduce, the same seed's
    base continuation cut at it."""
    kinds = STRING_KINDS if strings else TOKEN_KINDS
    bases = {(e.seed, e.body["max_tokens"]): e.reply for e in exchanges if e.kind == "base"}
    out = []
    for e, r in _replies(exchanges):
        if r.ids is None or (strings and "stop" not in e.body):
            continue
        want = _end(ctx, e, r)
        where = _where(e, r)
        if want.reason == "stop" and len(want.tokens) < len(r.ids) and isinstance(want.stop_reason, str) == strings:
            out.append(f"{where}: {len(r.ids) - len(want.tokens)} tokens returned past {want.stop_reason or 'EOS'!r} "
                       f"(which ends the reply at token {len(want.tokens)})")
        if strings:
            least = e.body.get("min_tokens") or 0  # a stop completing within the first min_tokens is no stop
            leaked = first_stop(r.text, tuple(e.body["stop"]), len(ctx.decode(r.ids[:least])) if least else 0)
            if leaked is not None and _in_last_token(leaked, r, want, ctx):
                leaked = None  # completed inside the EOS / stop token that ends the reply: it ends there either way
            if leaked is not None:
                out.append(f"{where}: the text holds the stop string {leaked[1]!r} at character {leaked[0]}")
            elif len(want.tokens) == len(r.ids) and isinstance(want.stop_reason, str) and r.text != want.text:
                out.append(f"{where}: text {r.text[-40:]!r} is not the returned tokens' text cut at the stop "
                           f"({want.text[-40:]!r})")
        base = bases.get((e.seed, e.body["max_tokens"]))
        if e.kind in MIN_KINDS and ctx.eos:  # min_tokens masks EOS: not the base's draws
            base = None
        if ctx.reproducible and e.kind in kinds and base is not None and base.ids is not None:
            expected = Bookkeeping().finish([[t] for t in base.ids], stops_of(e.body, ctx.eos), ctx.decode)
            same_text = r.text == expected.text or not isinstance(expected.stop_reason, str)  # texts of special
            # tokens (EOS) differ between tokenizers' decode settings: only a stop string's cut is compared
            if expected.reason == "stop" and (r.ids != expected.tokens or not same_text):
                out.append(f"{where}: returned {len(r.ids)} tokens, but the same seed's continuation ends at "
                           f"{expected.stop_reason or 'EOS'!r} after {len(expected.tokens)} tokens")
    return out


def _in_last_token(found: tuple[int, str], r: Reply, want, ctx: Context) -> bool:
    """Whether a stop string found in the text completes only within the last token's text, where that token is an
    EOS or stop token id ending the reply (whether its text is shown is the tokenizer's convention)."""
    at, which = found
    ends_on_token = want.reason == "stop" and not isinstance(want.stop_reason, str) and len(want.tokens) == len(r.ids)
    return ends_on_token and at + len(which) > len(ctx.decode(r.ids[:-1]))


def problems_logprobs(ctx: Context, exchanges):
    out = []
    for e, r in _replies(exchanges):
        if r.ids is None or (r.logprob_names is None and r.logprobs is None):
            continue
        names = [int(n[len(TOKEN_ID_PREFIX):]) if isinstance(n, str) and n.startswith(TOKEN_ID_PREFIX) else n
                 for n in r.logprob_names or []]
        if len(names) != len(r.ids) or len(r.logprobs or []) != len(r.ids):
            out.append(f"{_where(e, r)}: {len(r.ids)} tokens, {len(names)} logprob tokens and "
                       f"{len(r.logprobs or [])} logprobs")
        elif all(isinstance(n, int) for n in names) and names != r.ids:
            out.append(f"{_where(e, r)}: the logprobs name other tokens than the ids returned")
    return out


def problems_stream(ctx: Context, exchanges):
    tol = ctx.tolerance
    out = []
    for e in exchanges:
        s, r = e.streamed, e.reply
        if s is None or e.kind == "chat":  # chat streams: chat_stream
            continue
        where = f"{e.kind} seed {e.seed}"
        if not s.done:
            out.append(f"{where}: the stream ended without data: [DONE]")
        if s.ids is None:
            out.append(f"{where}: a delta came without token ids")
            continue
        if not ctx.reproducible:  # not the same draws: at least the stream agrees with itself
            continue
        diffs = [name for name, a, b in (("ids", s.ids, r.ids), ("text", s.text, r.text),
                                         ("finish_reason", s.reason, r.reason), ("usage", s.usage, r.usage))
                 if a != b]
        if s.logprobs is not None and r.logprobs is not None and (
                len(s.logprobs) != len(r.logprobs)
                or any(not math.isclose(a, b, abs_tol=tol) for a, b in zip(s.logprobs, r.logprobs, strict=True))):
            diffs.append("logprobs")
        if diffs:
            out.append(f"{where}: the concatenated stream differs from the non-streamed reply in {', '.join(diffs)} "
                       f"(stream {len(s.ids)} tokens in deltas {s.deltas}, text {s.text[:40]!r}; non-streamed "
                       f"{len(r.ids or [])} tokens, text {r.text[:40]!r})")
    return out


def problems_seed(ctx: Context, exchanges):
    bases = {(e.seed, e.body["max_tokens"]): e.reply.ids for e in exchanges if e.kind == "base"}
    n_first = {e.seed: [c.ids for c in e.choices or []] for e in exchanges if e.kind == "n"}
    out = []
    for e in exchanges:
        first = bases.get((e.seed, e.body["max_tokens"]))
        if e.kind == "repeat" and e.reply.ids != first:
            out.append(f"seed {e.seed}: the same request twice returned different tokens ({first} vs {e.reply.ids})")
        if e.kind == "n_repeat" and [c.ids for c in e.choices or []] != n_first.get(e.seed):
            out.append(f"seed {e.seed}: the same n = {len(e.choices or [])} request twice returned other choices")
    return out


def problems_min_tokens(ctx: Context, exchanges):
    """The deterministic part of `min_tokens`: no EOS and no stop token id among the first min_tokens tokens (both
    are masked until then: vLLM's "before EOS or stop_token_ids can be generated"), and no reply shorter than
    min(min_tokens, max_tokens) (the stops it must skip are judged by stop_strings / finish_reason, the stop ids it
    must honour after it by stop_token_ids)."""
    out = []
    for e, r in _replies(exchanges):
        least = e.body.get("min_tokens") or 0
        if not least or r.ids is None:
            continue
        early = [j for j, t in enumerate(r.ids[:least]) if t in ctx.eos]
        if early:
            out.append(f"{_where(e, r)}: EOS at token {early[0] + 1} with min_tokens={least}")
        stop_ids = set(e.body.get("stop_token_ids") or ())
        early = [j for j, t in enumerate(r.ids[:least]) if t in stop_ids]
        if early:
            out.append(f"{_where(e, r)}: stop token id {r.ids[early[0]]} at token {early[0] + 1} with "
                       f"min_tokens={least} (not masked)")
        if len(r.ids) < min(least, e.body["max_tokens"]):
            out.append(f"{_where(e, r)}: {len(r.ids)} tokens returned with min_tokens={least}")
    return out


def problems_chat_stream(ctx: Context, exchanges):
    """The chat stream's deltas concatenated equal the non-streamed chat reply: content, reasoning (a reasoning
    parser's fields), tool calls (a tool-call parser's: each call's name and arguments, in order), finish_reason,
    usage, token ids (where both carry them); where seeds reproduce."""
    out = []
    for e in exchanges:
        s, r = e.streamed, e.reply
        if e.kind != "chat" or s is None:
            continue
        if not s.done:
            out.append(f"chat seed {e.seed}: the stream ended without data: [DONE]")
        if not ctx.reproducible:
            continue
        pairs = [("content", s.text, r.text), ("reasoning", s.reasoning, r.reasoning),
                 ("tool_calls", s.tool_calls or [], r.tool_calls or []),
                 ("finish_reason", s.reason, r.reason), ("usage", s.usage, r.usage)]
        if s.ids is not None and r.ids is not None:
            pairs.append(("ids", s.ids, r.ids))
        diffs = [name for name, a, b in pairs if a != b]
        if diffs:
            calls = (f"; tool calls streamed {s.tool_calls}, non-streamed {r.tool_calls}" if "tool_calls" in diffs
                     else "")
            out.append(f"chat seed {e.seed}: the concatenated stream differs from the non-streamed reply in "
                       f"{', '.join(diffs)} (deltas {s.deltas}; stream reasoning {(s.reasoning or '')[-30:]!r}, "
                       f"content {s.text[:30]!r}; non-streamed {(r.reasoning or '')[-30:]!r}, {r.text[:30]!r}{calls})")
    return out


def problems_tool_finish(ctx: Context, exchanges):
    """Where the engine runs a tool-call parser for the chat requests (auto tool choice): finish_reason is
    "tool_calls" exactly when the reply holds tool calls, non-streamed and streamed (the stream: the calls its
    deltas sent), whatever ended it (vLLM's serving_chat; OpenAI's finish_reason for a turn that calls tools). Needs
    no seed: each reply is judged on its own calls."""
    out = []
    for e in exchanges:
        if e.kind != "chat":
            continue
        for r, where in ((e.reply, ""), (e.streamed, " (stream)")):
            if r is None:
                continue
            if r.tool_calls and r.reason != "tool_calls":
                out.append(f"chat seed {e.seed}{where}: finish_reason {r.reason!r} with {len(r.tool_calls)} tool "
                           "call(s) in the reply")
            elif not r.tool_calls and r.reason == "tool_calls":
                out.append(f"chat seed {e.seed}{where}: finish_reason 'tool_calls' with no tool call in the reply")
    return out


CHECKS = {"max_tokens": problems_max_tokens, "usage": problems_usage, "finish_reason": problems_finish_reason,
           "stop_strings": lambda ctx, ex: problems_stops(ctx, ex, strings=True),
           "stop_token_ids": lambda ctx, ex: problems_stops(ctx, ex, strings=False),
           "logprobs_aligned": problems_logprobs, "seed_reproducible": problems_seed,
           "stream": problems_stream,
           "chat_stream": problems_chat_stream, "tool_calls_finish_reason": problems_tool_finish}
