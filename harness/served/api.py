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
tests are deterministic except `unseeded_independent`, the EOS part of `min_tokens` and `n_independent` (p-values
that enter Holm's procedure with the rest). Token texts come from the local
tokenizer (--pair / --target).
"""

from __future__ import annotations

import dataclasses
import json
import math

from harness.check.driver import Cell, Check, MalformedTrials
from harness.check.report import deterministic_result
from harness.errors import HarnessError
from harness.served.bookkeeping import Bookkeeping, Stops, first_stop
from harness.served.client import RequestRefused
from harness.served.text import TOKEN_ID_PREFIX, decode
from harness.stats import TestResult

TESTS = ("max_tokens", "usage", "finish_reason", "stop_strings", "stop_token_ids", "logprobs_aligned",
         "seed_reproducible", "unseeded_independent", "min_tokens", "n_independent")
# + "stream" where the engine streams completions, "chat_stream" where it streams chat completions,
# "tool_calls_finish_reason" where it streams chat completions with tools (a tool-call parser)
MIN_KINDS = ("min_tokens_stop", "min_tokens_skip")  # stop strings with min_tokens (see min_tokens_cases)
STRING_KINDS = ("stop_in_step", "stop_across_steps", "stop_in_cap_step", "stop_string") + MIN_KINDS
TOKEN_KINDS = ("stop_token_in_step", "stop_token")  # stop_string / stop_token: no multi-token step to place them in
STOP_KINDS = STRING_KINDS + TOKEN_KINDS


N_CHOICES = 24  # choices per n > 1 request (n_independent: 2 requests give 12 + 12 disjoint pairs)
N_REQUESTS = 2  # n > 1 requests per prompt (and one repeated: seed_reproducible)
CHAT_REQUESTS = 8  # chat requests per prompt (each plain and streamed), where the engine streams chat
# The tool sent with every chat request where the engine streams chat with tools (a tool-call parser: `streams`)
TOOLS = [{"type": "function", "function": {"name": "specdec_probe", "description": "a tool the model may call",
                                           "parameters": {"type": "object", "properties": {}}}}]
MIN_TOKENS_EOS_FRACTION = 2
MIN_TOKENS_EOS_REQUESTS = 32  # per prompt, where the model has an EOS
MIN_TOKENS_STOP_ID_REQUESTS = 32  # per prompt, with stop_token_ids (where the engine takes them with min_tokens)
MIN_TOKENS_STOP_IDS = 3  # the stop ids of those: the most frequent tokens of the base continuations
API_ROUTES = ("openai", "llama-server", "llama-server-processed")  # --api values the check speaks (see route)


@dataclasses.dataclass
class ApiCell:
    setting: object  # harness.check.settings.Setting
    index: int
    prompt: list[int]
    streams: bool  # whether the engine streams completions (asked once per run)
    chat_streams: bool = False  # whether it streams chat completions
    tools: bool = False  # whether it streams chat completions with `tools` (a tool-call parser: see streams)
    min_stop_ids: bool = False  # whether it takes stop_token_ids with min_tokens (see takes_min_stop_ids)
    not_offered: dict = dataclasses.field(default_factory=dict)  # request fields the engine's route lacks: why


@dataclasses.dataclass
class Context:
    """What the tests read besides the replies: the model's EOS ids, the local tokenizer's decode, the tolerance
    for logprobs of a stream, and whether the engine reproduced every seed of the cell."""

    eos: set[int]
    decode: object  # ids -> text
    tolerance: float
    reproducible: bool = False
    eos_law: object = None  # (ids, tokens) -> the local target's P(tokens) at each position of a reply (T = 1)
    reply_law: object = None  # ids -> the local target's P(each returned token) at the cell's setting


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
    reasoning: str | None = None  # chat: reasoning_content (a reasoning parser's), else None
    tool_calls: list | None = None  # chat: [(name, arguments)] of message.tool_calls / the deltas' (by index)
    tool_delta: int | None = None  # chat stream: tokens of the first delta that carried a tool call
    steps: list[int] | None = None  # tokens per speculative step where the stream tags its events with `step`
    # (harness.served.llama_api: llama-server streams one token per event), else None (one step per delta)


@dataclasses.dataclass
class Exchange:
    kind: str  # base | repeat | unseeded | cap | one of STOP_KINDS
    seed: int | None
    body: dict
    reply: Reply
    streamed: Reply | None = None  # the same request with stream: true
    choices: list[Reply] | None = None  # n > 1: every choice (reply is the first)


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


def parse_choices(reply: dict, n: int, base: str) -> list[Reply]:
    """The n choices of one reply, each with usage = its own token count where usage.completion_tokens equals their
    sum (else the reply's total, which the usage test then rejects)."""
    from harness.served.probe import choice_token_ids

    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or len(choices) != n or not all(isinstance(c, dict) for c in choices):
        raise MalformedTrials(f"{base} replied without the {n} choices asked for")
    choices = sorted(choices, key=lambda c: c.get("index", 0))
    total = (reply.get("usage") or {}).get("completion_tokens")
    out = []
    for choice in choices:
        lp = choice.get("logprobs") or {}
        out.append(Reply(choice_token_ids(choice), str(choice.get("text") or ""), choice.get("finish_reason"), None,
                         lp.get("tokens"), lp.get("token_logprobs")))
    exact = all(r.ids is not None for r in out) and total == sum(len(r.ids) for r in out)
    for r in out:
        r.usage = len(r.ids) if exact else total
    return out


def _reasoning_of(part: dict) -> str | None:
    value = part.get("reasoning_content", part.get("reasoning"))
    return None if value is None else str(value)


def parse_chat(reply: dict, base: str) -> Reply:
    """A chat reply's one choice: content, reasoning, token ids (where returned), finish_reason, usage."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise MalformedTrials(f"{base} replied to a chat request without the one choice asked for")
    choice = choices[0]
    message = choice.get("message") or {}
    ids = choice.get("token_ids")
    calls = [((c.get("function") or {}).get("name") or "", (c.get("function") or {}).get("arguments") or "")
             for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    return Reply(list(ids) if isinstance(ids, list) else None, str(message.get("content") or ""),
                 choice.get("finish_reason"), (reply.get("usage") or {}).get("completion_tokens"), None, None,
                 reasoning=_reasoning_of(message), tool_calls=calls)


def parse_chat_stream(streamed: dict) -> Reply:
    """A chat stream's deltas of choice 0 concatenated (content, reasoning, token ids, tool calls: each call's
    name and arguments pieces joined by its index), tokens per delta."""
    ids, text, reasoning, deltas, reason, usage, has_ids, any_reasoning = [], [], [], [], None, None, True, False
    calls: dict[int, list[str]] = {}
    tool_delta = None
    for event in streamed["events"]:
        if isinstance(event.get("usage"), dict):
            usage = event["usage"].get("completion_tokens")
        for choice in event.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            got = choice.get("token_ids")
            entries = [e for e in delta.get("tool_calls") or [] if isinstance(e, dict)]
            if got is None and (delta.get("content") or _reasoning_of(delta) or entries):
                has_ids = False
            for e in entries:
                call = calls.setdefault(int(e.get("index", 0)), ["", ""])
                call[0] += (e.get("function") or {}).get("name") or ""
                call[1] += (e.get("function") or {}).get("arguments") or ""
            if entries and tool_delta is None:
                tool_delta = len(got or [])
            ids += got or []
            text.append(str(delta.get("content") or ""))
            part = _reasoning_of(delta)
            any_reasoning = any_reasoning or part is not None
            reasoning.append(part or "")
            if got:
                deltas.append(len(got))
            reason = choice.get("finish_reason") or reason
    return Reply(ids if has_ids else None, "".join(text), reason, usage, None, None, deltas,
                 streamed.get("done", False), "".join(reasoning) if any_reasoning else None,
                 [tuple(calls[k]) for k in sorted(calls)], tool_delta)


def parse_stream(streamed: dict) -> Reply:
    """A stream's deltas of choice 0 concatenated: ids, text, logprobs; the last finish_reason; the usage event."""
    from harness.served.probe import choice_token_ids

    ids, text, names, values, deltas, reason, usage, has_ids = [], [], [], [], [], None, None, True
    tagged: list | None = []  # (step, tokens) of every event carrying tokens, None: some event has no step
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
                if tagged is not None and isinstance(choice.get("step"), int):
                    tagged.append((choice["step"], len(got)))
                else:
                    tagged = None
            reason = choice.get("finish_reason") or reason
    steps = None
    if tagged:
        steps = []
        for k, (step, size) in enumerate(tagged):
            if k and step == tagged[k - 1][0]:
                steps[-1] += size
            else:
                steps.append(size)
    return Reply(ids if has_ids else None, "".join(text), reason, usage, names or None, values or None, deltas,
                 streamed.get("done", False), steps=steps)


# ------------------------------------------------------------------------------------------ choosing requests

def _step_of(steps: list[int]) -> list[int]:
    """Step index of each token."""
    return [k for k, size in enumerate(steps) for _ in range(size)]


def new_suffix(tokens: list[int], pos: int, decode_, longer_than: int = 0) -> str | None:
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
        return None if tokens[pos] in eos else new_suffix(tokens, pos, decode_, longer_than)

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
        cand = None if tokens[pos] in eos else new_suffix(tokens, pos, decode_)
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


def min_tokens_cases(tokens: list[int], steps: list[int] | None, eos: set[int], decode_) -> list[tuple[str, dict]]:
    """min_tokens requests chosen on a base continuation (stop strings that the correct engine ends at or skips):

    - `min_tokens_stop`: min_tokens = c − 1 and a stop string completing at token c, where the first c − 1 steps
      held at least c tokens: an engine that counts min_tokens in steps does not end there yet;
    - `min_tokens_skip`: a stop string completing at token c <= min_tokens = c + 1: it must not end the reply.
    Where the model has an EOS, min_tokens changes the draws (EOS masked), so these replies are judged on their own
    tokens, not against the base."""
    out, text_at = [], [len(decode_(tokens[:c])) for c in range(len(tokens) + 1)]
    usable = [c for c in range(1, len(tokens)) if tokens[c - 1] not in eos and text_at[c] > text_at[c - 1]]
    if steps:
        for c in usable:
            if c >= 2 and sum(steps[: c - 1]) >= c and (found := new_suffix(tokens, c - 1, decode_)):
                out.append(("min_tokens_stop", {"stop": [found], "min_tokens": c - 1}))
                break
    for c in usable:
        if c + 1 < len(tokens) and (found := new_suffix(tokens, c - 1, decode_)):
            out.append(("min_tokens_skip", {"stop": [found], "min_tokens": c + 1}))
            break
    return out


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
    from harness.served.requests import sampling_request

    body = sampling_request(run.model, data.prompt, 1, max_tokens, data.setting, seed, extra=run.config.extra_body)
    body.update(logprobs=1, return_tokens_as_token_ids=True, **fields)
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def route(run):
    """The client the API check speaks through: the engine's own, or the route it names for the API check
    (`api_route`: llama-server's native /completion, harness.served.llama_api)."""
    make = getattr(run.engine, "api_route", None)
    return make() if make is not None else run.engine


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
    plain = dataclasses.replace(data, setting=_plain_setting())  # T = 1: no truncation hides EOS from the test
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


def frequent_tokens(continuations: list[list[int]], eos: set[int], k: int = MIN_TOKENS_STOP_IDS) -> list[int]:
    """The k most frequent tokens of the base continuations, EOS excluded (ties: the smaller id): stop ids that a
    correct engine draws often past min_tokens, so that masking them too long shows."""
    counts: dict[int, int] = {}
    for ids in continuations:
        for t in ids:
            if t not in eos:
                counts[t] = counts.get(t, 0) + 1
    return sorted(sorted(counts), key=lambda t: -counts[t])[:k]


def _plain_setting():
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
        step_of = _step_of(sizes)
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


def _problems_seed(ctx: Context, exchanges):
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


def _problems_min_tokens(ctx: Context, exchanges):
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


def _problems_chat_stream(ctx: Context, exchanges):
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


def _problems_tool_finish(ctx: Context, exchanges):
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


_CHECKS = {"max_tokens": _problems_max_tokens, "usage": _problems_usage, "finish_reason": _problems_finish_reason,
           "stop_strings": lambda ctx, ex: _problems_stops(ctx, ex, strings=True),
           "stop_token_ids": lambda ctx, ex: _problems_stops(ctx, ex, strings=False),
           "logprobs_aligned": _problems_logprobs, "seed_reproducible": _problems_seed,
           "stream": _problems_stream,
           "chat_stream": _problems_chat_stream, "tool_calls_finish_reason": _problems_tool_finish}


def _api_tests(cell: Cell, trials, rate: float, power: float) -> list:
    ctx, exchanges = cell.summary["_api"], trials[0]
    ctx.reproducible = not _problems_seed(ctx, exchanges)
    cell.summary["seed_reproducible"] = ctx.reproducible
    results = []
    for name in cell.summary["_tests"]:
        if name in _STATISTICAL:
            results.append(_STATISTICAL[name](cell, ctx, exchanges))
            continue
        problems = _CHECKS[name](ctx, exchanges)
        results.append(deterministic_result(
            f"{cell.name}/{name}", not problems, n=len(exchanges),
            message="" if not problems else f"{len(problems)} replies wrong; " + "; ".join(problems[:3])))
    return results


def _min_tokens_result(cell: Cell, ctx: Context, exchanges) -> TestResult:
    problems = _problems_min_tokens(ctx, exchanges)
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


_STATISTICAL = {"min_tokens": _min_tokens_result, "n_independent": _n_result,
                "unseeded_independent": _unseeded_result}


API_CHECK = Check("api", lambda cell: len(cell.summary["_tests"]), _api_tests)


def refusal(run, prompt) -> str | None:
    """Why the engine does not allow the API check (None: it does), asked before the default set runs it: a local
    tokenizer (token texts), the OpenAI / vLLM routes (--api openai) or llama-server's native /completion (--api
    llama-server: harness.served.llama_api), and a completion with stop, stop_token_ids, seed, logprobs and
    return_token_ids answered with the token ids (the tests read ids: a server that returns only text, as
    llama-server's OpenAI route does, cannot be judged)."""
    from harness.served.probe import choice_token_ids

    if run.tokenizer is None or not isinstance(prompt, list):
        return "no local tokenizer to read token texts (give --pair NAME or --target PATH)"
    if run.config.api not in API_ROUTES:
        return f"--api {run.config.api}: the API check speaks the OpenAI / vLLM routes and llama-server's only"
    body = {"model": run.model, "prompt": list(prompt), "max_tokens": 2, "seed": 0, "logprobs": 1,
            "stop": ["<specdec: never>"], "stop_token_ids": [], "return_token_ids": True,
            "return_tokens_as_token_ids": True}
    try:
        reply = route(run).post("/v1/completions", body)
    except RequestRefused as exc:
        return f"the engine refused a completion with stop / stop_token_ids / seed / logprobs / token ids ({exc})"
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices or choice_token_ids(choices[0]) is None:
        return "the engine returns no token ids with its completions"
    return None


def streams(run, prompt: list[int], chat: bool = False, tools: bool = False) -> bool:
    """Whether the engine answers stream: true with server-sent events on its completions (`chat`: chat
    completions) route; a refusal, 4xx, means it does not. `tools`: a chat stream with `tools` and tool_choice
    "auto", which a server answers where it runs a tool-call parser (vLLM: `--enable-auto-tool-choice
    --tool-call-parser`, else 400; `specdec serve --tool-call-tokens`)."""
    body = {"model": run.model, "max_tokens": 2, "seed": 0, "stream": True}
    if tools:
        body.update(tools=TOOLS, tool_choice="auto")
    try:
        if chat or tools:
            got = route(run).stream("/v1/chat/completions",
                                    {**body, "messages": [{"role": "user", "content": decode(run.tokenizer, prompt)}]})
        else:
            got = route(run).stream("/v1/completions", {**body, "prompt": prompt})
    except RequestRefused:
        return False
    return bool(got["events"])


def takes_min_stop_ids(run, prompt: list[int]) -> bool:
    """Whether the engine answers a completion with stop_token_ids and min_tokens (vLLM does; `specdec serve` with
    an implementation that cannot mask stop ids refuses it, 4xx)."""
    body = {"model": run.model, "prompt": list(prompt), "max_tokens": 2, "seed": 0, "min_tokens": 1,
            "stop_token_ids": [int(prompt[0])]}
    try:
        route(run).post("/v1/completions", body)
    except RequestRefused:
        return False
    return True


def not_offered(run) -> dict:
    """{request field: why} of what the engine's route does not offer (llama-server: stop_token_ids, min_tokens;
    `n` = N_CHOICES where it has fewer slots): the API check leaves those requests and tests out and says so."""
    engine = route(run)
    out = dict(getattr(engine, "not_offered", {}))
    slots = getattr(engine, "slots", None)
    if isinstance(slots, int) and slots < N_CHOICES:
        out["n"] = (f"n = {N_CHOICES} needs {N_CHOICES} slots and the server has {slots} (-np): start it with "
                    f"-np {N_CHOICES} to test n")
    return out


# The optional request fields the API check sends, each with the tests that need it and the smallest request that
# shows whether the engine takes it (asked once per run, after `refusal`: a refusal, 4xx, leaves them out).
OPTIONAL_FIELDS = {"min_tokens": (("min_tokens",), {"min_tokens": 1, "stop": ["<specdec: never>"]}),
                   "n": (("n_independent",), {"n": N_CHOICES})}


def refused_fields(run, prompt: list[int], lacks: dict) -> dict:
    """{field: why} of the OPTIONAL_FIELDS the engine refuses (4xx) on a two-token completion, those `lacks`
    already names left unasked: a parameter the server refuses is a capability it lacks (`specdec serve` with a
    generate() that takes no min_new_tokens refuses min_tokens), so its tests are skipped and listed, never fatal
    to the run."""
    out = {}
    for field, (_, fields) in OPTIONAL_FIELDS.items():
        if field in lacks:
            continue
        body = {"model": run.model, "prompt": list(prompt), "max_tokens": 2, "seed": 0, **fields}
        try:
            route(run).post("/v1/completions", body)
        except RequestRefused as exc:
            out[field] = f"the engine refused a request with {field} = {fields[field]!r}: {exc}"
    return out


def skipped_tests(lacks: dict) -> dict:
    """{API test: why} of the tests left out because the engine lacks the request field they need."""
    return {test: f"needs {field}, which the engine does not offer: {lacks[field]}" for field, (tests, _) in
            OPTIONAL_FIELDS.items() if field in lacks for test in tests}


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
                 {"_run": run, "_api": dataclasses.replace(ctx, eos_law=_target_law(run, list(p), _plain_setting()),
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
