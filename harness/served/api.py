"""What a served engine returns under speculation: max_tokens, usage, stops, finish reasons, streams and seeds.

A speculative step emits several tokens at once, and API bookkeeping written for one token per step breaks
there while the token law stays exact (docs/BUGS.md, "API bookkeeping"; docs/SERVED-CHECKS.md, "The API
check"). `--engine-checks api` asks the engine, per prompt, for seeded base continuations (plain, repeated,
streamed), reads the speculative steps off the stream (one SSE delta per step, as engines send them), and
then chooses its requests so that the end conditions land *inside* accepted multi-token steps:

- a stop string that ends before the last token of a step, one that spans two steps, one inside the last
  step (the one that reaches max_tokens), a stop token id inside a step; each with the base's seed and
  max_tokens, non-streamed and streamed;
- max_tokens that cut a step (1, and one token into the longest step);
- unseeded requests.

Every reply is checked on its own (nothing of it past its end condition, `usage` equal to the tokens
returned, finish_reason "length" exactly when the cap cut it), and where the engine reproduces a seed it is
compared with the base continuation of the same seed cut by the correct bookkeeping
(harness.served.bookkeeping): a stop changes where the reply ends, never the tokens before it. All gating
tests are deterministic except `unseeded_independent` (see its docstring). Token texts come from the local
tokenizer (--pair / --target).
"""

from __future__ import annotations

import dataclasses
import json
import math

from harness.check.engine import Cell, Check, MalformedTrials
from harness.check.report import deterministic_result
from harness.errors import HarnessError
from harness.served.bookkeeping import Bookkeeping, Stops, first_stop
from harness.served.client import RequestRefused
from harness.served.text import TOKEN_ID_PREFIX, decode

TESTS = ("max_tokens", "usage", "finish_reason", "stop_strings", "stop_token_ids", "logprobs_aligned",
         "seed_reproducible", "unseeded_independent")  # + "stream" where the engine streams
STRING_KINDS = ("stop_in_step", "stop_across_steps", "stop_in_cap_step", "stop_string")
TOKEN_KINDS = ("stop_token_in_step", "stop_token")  # stop_string / stop_token: no multi-token step to place them in
STOP_KINDS = STRING_KINDS + TOKEN_KINDS


@dataclasses.dataclass
class ApiCell:
    setting: object  # harness.check.generation.Setting
    index: int
    prompt: list[int]
    streams: bool  # whether the engine streams (asked once per run)


@dataclasses.dataclass
class Context:
    """What the tests read besides the replies: the model's EOS ids, the local tokenizer's decode, the tolerance
    for logprobs of a stream, and whether the engine reproduced every seed of the cell."""

    eos: set[int]
    decode: object  # ids -> text
    tolerance: float
    reproducible: bool = False


@dataclasses.dataclass
class Reply:
    """One choice as the engine returned it (a stream's deltas concatenated)."""

    ids: list[int] | None
    text: str
    reason: str | None
    usage: int | None  # usage.completion_tokens
    logprob_names: list | None  # logprobs.tokens
    logprobs: list | None  # logprobs.token_logprobs
    deltas: list[int] | None = None  # tokens per delta (streams)
    done: bool = True  # a stream ended with [DONE]


@dataclasses.dataclass
class Exchange:
    kind: str  # base | repeat | unseeded | cap | one of STOP_KINDS
    seed: int | None
    body: dict
    reply: Reply
    streamed: Reply | None = None  # the same request with stream: true


# ------------------------------------------------------------------------------------------ replies

def parse_reply(reply: dict, base: str) -> Reply:
    from harness.served.probe import choice_token_ids

    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise MalformedTrials(f"{base} replied without the one choice asked for")
    choice, lp = choices[0], choices[0].get("logprobs") or {}
    usage = (reply.get("usage") or {}).get("completion_tokens")
    return Reply(choice_token_ids(choice), str(choice.get("text") or ""), choice.get("finish_reason"), usage,
                 lp.get("tokens"), lp.get("token_logprobs"))


def parse_stream(streamed: dict) -> Reply:
    """A stream's deltas of choice 0 concatenated: ids, text, logprobs; the last finish_reason; the usage event."""
    from harness.served.probe import choice_token_ids

    ids, text, names, values, deltas, reason, usage, has_ids = [], [], [], [], [], None, None, True
    for event in streamed["events"]:
        if isinstance(event.get("usage"), dict):
            usage = event["usage"].get("completion_tokens")
        for choice in event.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            got = choice_token_ids(choice) if (choice.get("token_ids") or choice.get("logprobs")) else []
            has_ids = has_ids and got is not None
            ids += got or []
            text.append(str(choice.get("text") or ""))
            lp = choice.get("logprobs") or {}
            names += lp.get("tokens") or []
            values += lp.get("token_logprobs") or []
            if got:
                deltas.append(len(got))
            reason = choice.get("finish_reason") or reason
    return Reply(ids if has_ids else None, "".join(text), reason, usage, names or None, values or None, deltas,
                 streamed.get("done", False))


# ------------------------------------------------------------------------------------------ choosing requests

def _step_of(steps: list[int]) -> list[int]:
    """Step index of each token."""
    return [k for k, size in enumerate(steps) for _ in range(size)]


def _new_suffix(tokens: list[int], pos: int, decode_, longer_than: int = 0) -> str | None:
    """The shortest non-blank suffix (longer than `longer_than` characters) of the text of tokens[:pos + 1]
    whose first occurrence there ends at its end: a stop string the correct engine stops at on token `pos`."""
    text = decode_(tokens[: pos + 1])
    for n in range(longer_than + 1, len(text) + 1):
        cand = text[-n:]
        if cand.strip() and text.find(cand) == len(text) - n:
            return cand
    return None


def stop_cases(tokens: list[int], steps: list[int] | None, capped: bool, eos: set[int],
               decode_) -> list[tuple[str, dict]]:
    """(kind, request fields) of the stop requests chosen on a base continuation and its steps (None: unknown)."""
    if not tokens:
        return []
    if steps is None or max(steps) < 2:  # no multi-token step seen: positions spread over the continuation
        return _spread_cases(tokens, eos, decode_)
    starts = [sum(steps[:k]) for k in range(len(steps))]

    def suffix(pos: int, longer_than: int = 0) -> str | None:  # never on EOS: that token ends the reply anyway
        return None if tokens[pos] in eos else _new_suffix(tokens, pos, decode_, longer_than)

    by_size = sorted(range(len(steps)), key=lambda k: (-steps[k], k))
    out = []
    for k in by_size:  # a stop string that ends before the last token of its step: earliest in the longest step
        found = next((c for pos in range(starts[k], starts[k] + steps[k] - 1)
                      if (c := suffix(pos))), None)
        if steps[k] >= 2 and found:
            out.append(("stop_in_step", {"stop": [found]}))
            break
    for k in range(1, len(steps)):  # a stop string that starts in one step and ends in the next
        b = starts[k]
        piece = len(decode_(tokens[: b + 1])) - len(decode_(tokens[:b]))
        found = suffix(b, longer_than=piece)
        if found:
            out.append(("stop_across_steps", {"stop": [found]}))
            break
    if capped and steps[-1] >= 2:  # inside the step that reaches max_tokens
        found = suffix(starts[-1])
        if found:
            out.append(("stop_in_cap_step", {"stop": [found]}))
    for k in by_size:  # a stop token id before the last token of its step (its first occurrence)
        pos = next((p for p in range(starts[k], starts[k] + steps[k] - 1)
                    if tokens[p] not in tokens[:p] and tokens[p] not in eos), None)
        if steps[k] >= 2 and pos is not None:
            out.append(("stop_token_in_step", {"stop_token_ids": [tokens[pos]]}))
            break
    return out


def _spread_cases(tokens: list[int], eos: set[int], decode_) -> list[tuple[str, dict]]:
    out = []
    for pos in sorted({len(tokens) // 3, (2 * len(tokens)) // 3}):
        cand = None if tokens[pos] in eos else _new_suffix(tokens, pos, decode_)
        if cand:
            out.append(("stop_string", {"stop": [cand]}))
    pos = next((p for p in range(len(tokens) // 2, len(tokens)) if tokens[p] not in tokens[:p] and tokens[p] not in eos),
               None)
    if pos is not None:
        out.append(("stop_token", {"stop_token_ids": [tokens[pos]]}))
    return out


def caps(steps: list[int] | None, length: int) -> list[int]:
    """max_tokens that cut a step: 1, and one token into the longest step (below the base's cap)."""
    out = {1}
    if steps:
        k = max(range(len(steps)), key=lambda j: (steps[j], -j))
        if steps[k] >= 2:
            out.add(sum(steps[:k]) + 1)
    return sorted(c for c in out if c < length)


def stops_of(body: dict, eos: set[int]) -> Stops:
    return Stops.from_request(body, body["max_tokens"], eos)


def placement(tokens: list[int], steps: list[int], stops: Stops, decode_) -> dict | None:
    """Where the first end condition falls in a base continuation: {inside, across} (None: nowhere)."""
    done = Bookkeeping().finish([[t] for t in tokens], stops, decode_)
    if done.reason != "stop" or len(done.tokens) > sum(steps):
        return None
    step_of, end = _step_of(steps), len(done.tokens) - 1
    start = end
    if isinstance(done.stop_reason, str):  # the token holding the stop string's first character
        at = len(done.text)
        start = next(j for j in range(len(tokens)) if len(decode_(tokens[: j + 1])) > at)
    inside = end + 1 < len(step_of) and step_of[end + 1] == step_of[end]
    return {"inside": inside, "across": step_of[start] != step_of[end]}


# ------------------------------------------------------------------------------------------ drawing

def _body(run, data: ApiCell, seed: int | None, max_tokens: int, stream: bool = False, **fields) -> dict:
    from harness.served.requests import _payload

    body = _payload(run.model, data.prompt, 1, max_tokens, data.setting, seed, extra=run.config.extra_body)
    body.update(logprobs=1, return_tokens_as_token_ids=True, **fields)
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def _send(run, jobs: list[tuple[str, dict]]) -> dict:
    try:
        return run.engine.run_all("/v1/completions", jobs, run.store, run.progress)
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
    # none does, shorter bases of the same seeds move the cap onto other steps.
    for cut in range(1, CAP_STEP_TRIES + 1):
        if not data.streams or length - cut < 2 or any(_cap_step(e, steps_of) for e in out if e.kind == "base"):
            break
        more, more_steps, _ = _bases(run, data, key, seeds, length - cut)
        out += more
        steps_of.update(more_steps)
    more = []  # the requests chosen on each base continuation
    for ex in [e for e in out if e.kind == "base"]:
        cap, steps = ex.body["max_tokens"], steps_of[(ex.seed, ex.body["max_tokens"])]
        chosen = [(kind, cap, fields) for kind, fields in
                  stop_cases(ex.reply.ids or [], steps, ex.reply.reason == "length", ctx.eos, ctx.decode)
                  if cap == length or kind == "stop_in_cap_step"]
        chosen += [("cap", c, {}) for c in caps(steps, cap)] if cap == length else []
        for kind, max_tokens, fields in chosen:
            body = _body(run, data, ex.seed, max_tokens, **fields)
            more.append((f"{key}/{kind}/{ex.seed}/{max_tokens}/{json.dumps(fields, sort_keys=True)}", kind, body, ex))
    jobs = [(name, body) for name, _, body, _ in more]
    if data.streams:
        jobs += [(name + "/stream", {**body, "stream": True, "stream_options": {"include_usage": True}})
                 for name, _, body, _ in more]
    replies = _send(run, jobs)
    for name, kind, body, ex in more:
        streamed = parse_stream(replies[name + "/stream"]) if data.streams else None
        out.append(Exchange(kind, ex.seed, body, parse_reply(replies[name], run.engine.base), streamed))
    cell.summary.update(_placements(ctx, out, steps_of))
    return out, None


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
        steps_of[(s, length)] = streamed.deltas if same else None
    return out, steps_of, replies


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


# ------------------------------------------------------------------------------------------ the tests

def _replies(exchanges: list[Exchange]):
    """(exchange, reply) for every reply, streamed ones included."""
    for e in exchanges:
        yield e, e.reply
        if e.streamed is not None:
            yield e, e.streamed


def _where(e: Exchange, r: Reply) -> str:
    return f"{e.kind} seed {e.seed}{' (stream)' if r is e.streamed else ''}"


def _problems_max_tokens(ctx: Context, exchanges):
    return [f"{_where(e, r)}: {len(r.ids)} tokens returned for max_tokens={e.body['max_tokens']}"
            for e, r in _replies(exchanges) if r.ids is not None and len(r.ids) > e.body["max_tokens"]]


def _problems_usage(ctx: Context, exchanges):
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


def _problems_finish_reason(ctx: Context, exchanges):
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


def _problems_stops(ctx: Context, exchanges, strings: bool):
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
            leaked = first_stop(r.text, tuple(e.body["stop"]))
            if leaked is not None and _in_last_token(leaked, r, want, ctx):
                leaked = None  # completed inside the EOS / stop token that ends the reply: it ends there either way
            if leaked is not None:
                out.append(f"{where}: the text holds the stop string {leaked[1]!r} at character {leaked[0]}")
            elif len(want.tokens) == len(r.ids) and isinstance(want.stop_reason, str) and r.text != want.text:
                out.append(f"{where}: text {r.text[-40:]!r} is not the returned tokens' text cut at the stop "
                           f"({want.text[-40:]!r})")
        base = bases.get((e.seed, e.body["max_tokens"]))
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


def _problems_logprobs(ctx: Context, exchanges):
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


def _problems_stream(ctx: Context, exchanges):
    tol = ctx.tolerance
    out = []
    for e in exchanges:
        s, r = e.streamed, e.reply
        if s is None:
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


def _problems_seed(ctx: Context, exchanges):
    bases = {(e.seed, e.body["max_tokens"]): e.reply.ids for e in exchanges if e.kind == "base"}
    out = []
    for e in exchanges:
        first = bases.get((e.seed, e.body["max_tokens"]))
        if e.kind == "repeat" and e.reply.ids != first:
            out.append(f"seed {e.seed}: the same request twice returned different tokens ({first} vs {e.reply.ids})")
    return out


def _problems_unseeded(ctx: Context, exchanges):
    """Unseeded requests must not share a random stream (TRT-LLM #19487). Fails when every unseeded reply is the
    same while the seeded base replies (distinct seeds, same request) are not all the same. A correct engine fails
    only when its k unseeded draws all coincide: probability Σ_x P(x)^k, which the seeded draws bound (they
    differ, so the law is not a point mass); measured on `specdec serve`: docs/SERVED-CHECKS.md."""
    unseeded = [tuple(e.reply.ids or ()) for e in exchanges if e.kind == "unseeded"]
    length = next((e.body["max_tokens"] for e in exchanges if e.kind == "unseeded"), None)
    seeded = [tuple(e.reply.ids or ()) for e in exchanges if e.kind == "base" and e.body["max_tokens"] == length]
    if len(unseeded) >= 2 and len(set(unseeded)) == 1 and len(set(seeded)) > 1:
        return [f"all {len(unseeded)} unseeded requests returned the same {len(unseeded[0])} tokens, while "
                f"{len(set(seeded))} of {len(seeded)} seeded requests differ"]
    return []


_CHECKS = {"max_tokens": _problems_max_tokens, "usage": _problems_usage, "finish_reason": _problems_finish_reason,
           "stop_strings": lambda ctx, ex: _problems_stops(ctx, ex, strings=True),
           "stop_token_ids": lambda ctx, ex: _problems_stops(ctx, ex, strings=False),
           "logprobs_aligned": _problems_logprobs, "seed_reproducible": _problems_seed,
           "unseeded_independent": _problems_unseeded, "stream": _problems_stream}


def _api_tests(cell: Cell, trials, level: float, power: float) -> list:
    ctx, exchanges = cell.summary["_api"], trials[0]
    ctx.reproducible = not _problems_seed(ctx, exchanges)
    cell.summary["seed_reproducible"] = ctx.reproducible
    results = []
    for name in cell.summary["_tests"]:
        problems = _CHECKS[name](ctx, exchanges)
        results.append(deterministic_result(
            f"{cell.name}/{name}", not problems, n=len(exchanges),
            message="" if not problems else f"{len(problems)} replies wrong; " + "; ".join(problems[:3])))
    return results


API_CHECK = Check("api", lambda cell: len(cell.summary["_tests"]), _api_tests)


def streams(run, prompt: list[int]) -> bool:
    """Whether the engine answers stream: true with server-sent events (a refusal, 4xx, means it does not)."""
    try:
        got = run.engine.stream("/v1/completions", {"model": run.model, "prompt": prompt, "max_tokens": 2,
                                                    "seed": 0, "stream": True})
    except RequestRefused:
        return False
    return bool(got["events"])


def cells(run, prompts: list) -> list[Cell]:
    """One cell per prompt, at the first sampling setting without history-dependent parameters (else T = 1)."""
    from harness.check.generation import Setting
    from specdec_ref.generate import default_eos, eos_set

    if run.tokenizer is None or any(not isinstance(p, list) for p in prompts):
        raise HarnessError("the API check reads token texts with the local tokenizer: give --pair NAME or "
                           "--target PATH (the model the engine serves)")
    ctx = Context(eos_set(default_eos(run.pair.target)), lambda ids: decode(run.tokenizer, ids),
                  run.config.logprob_tolerance)
    setting = next((s for s in run.config.settings if s.temperature > 0 and not s.extras()), Setting(1.0))
    stream = streams(run, list(prompts[0]))
    tests = TESTS + (("stream",) if stream else ())
    return [Cell(f"api/{setting.label}/prompt{i}", [API_CHECK], ApiCell(setting, i, list(p), stream), math.nan,
                 {"_run": run, "_api": dataclasses.replace(ctx), "_tests": tests, "setting": dataclasses.asdict(setting), "streams": stream})
            for i, p in enumerate(prompts)]


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
    return [f"API check: {total} stop requests; {where}; seeds reproduce: "
            f"{all(c.get('seed_reproducible') for c in cases)}"]
