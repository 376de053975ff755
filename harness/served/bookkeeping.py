"""What a server does with the tokens of each speculative step before they become a response.

A speculative step hands the serving layer 1..γ+1 tokens at once, and every piece of API bookkeeping
written for "one token per step" can break there while the token law stays exact (docs/BUGS.md, "API
bookkeeping"). `Bookkeeping` is that layer of `specdec serve`, written step by step as engines write it:

- `budget`: the max_new_tokens the implementation is called with (the request's max_tokens);
- `finish`: the step's tokens are taken one at a time, and after each one, in vLLM's StopChecker order,
  EOS / `stop_token_ids`, then the `stop` strings searched in the whole generated text so far, then the
  cap. The first condition met ends the response: its token is the last one returned (a stop string's
  token included, as vLLM returns it), the text is cut where the stop string starts, and nothing after it
  in the same step is returned;
- `deltas`: the slices of the returned tokens a stream sends, one speculative step per SSE delta;
- `seed`: the seed an unseeded request runs with (fresh randomness per request);
- `samples`: how many independent rows the n choices of a request are drawn as (n);
- `step_hooks`: the hooks of the reference's speculative loop (the emit hook that records the steps);
- `min_tokens` (`Stops.min_tokens`, vLLM's): no end condition is honoured before min_tokens tokens: EOS is
  masked by the implementation (`min_new_tokens`), and EOS, stop token ids and stop strings that complete at or
  before token min_tokens do not end the reply (vLLM's StopChecker: `num_tokens < min_tokens`; its detokenizer
  searches stop strings only in the text after them);
- `stream_parts`: a reasoning parser's split of each delta into reasoning and content (vLLM
  `--reasoning-parser`), where the server has one (`reasoning_end`: the token that ends the reasoning);
- `stream_tool_calls`: a tool-call parser's split of each delta's content into content and `tool_calls` entries
  (vLLM `--tool-call-parser`, Hermes style: `<tool_call>` ... `</tool_call>`), where the server has one
  (`tool_call_tokens`: the tokens that open and close a call; see `tool_calls`);
- `masked`: the token ids that `min_tokens` masks besides EOS (the request's `stop_token_ids`, as vLLM's
  min_tokens logits processor does: they cannot be generated before min_tokens).

The planted API bugs (harness.mutants.api) are subclasses that each get one of these wrong.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Stops:
    """A request's end conditions."""

    max_tokens: int
    strings: tuple[str, ...] = ()  # `stop`
    token_ids: frozenset[int] = frozenset()  # `stop_token_ids` (vLLM)
    eos: frozenset[int] = frozenset()  # the model's EOS ids (unless `ignore_eos`)
    min_tokens: int = 0  # no end condition before this many tokens (vLLM `min_tokens`)

    @classmethod
    def from_request(cls, body: dict, max_tokens: int, eos: set[int]) -> Stops:
        """`stop` (a string or a list of them), `stop_token_ids`, `ignore_eos`, `min_tokens`; ValueError when
        malformed."""
        stop = body.get("stop")
        strings = (stop,) if isinstance(stop, str) else tuple(stop or ())
        if not all(isinstance(s, str) and s for s in strings):
            raise ValueError(f"stop must be a non-empty string or a list of them, got {stop!r}")
        ids = body.get("stop_token_ids") or ()
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise ValueError(f"stop_token_ids must be a list of integers, got {ids!r}")
        least = body.get("min_tokens") or 0
        if not isinstance(least, int) or isinstance(least, bool) or least < 0:
            raise ValueError(f"min_tokens must be an integer >= 0, got {least!r}")
        return cls(max_tokens, strings, frozenset(ids), frozenset() if body.get("ignore_eos") else frozenset(eos),
                   least)


@dataclasses.dataclass
class Finished:
    """One returned choice."""

    tokens: list[int]  # the token ids returned
    text: str  # the text returned
    reason: str  # finish_reason: "stop" | "length"
    stop_reason: str | int | None = None  # the stop string or token id that ended it (vLLM's stop_reason)
    steps: list[int] = dataclasses.field(default_factory=list)  # tokens of each step returned (sum = len(tokens))


class Bookkeeping:
    """The correct bookkeeping (see the module docstring)."""

    name = "correct"

    def budget(self, max_tokens: int, gamma: int) -> int:
        return max_tokens

    def finish(self, steps: list[list[int]], stops: Stops, decode: Callable[[list[int]], str]) -> Finished:
        tokens: list[int] = []
        sizes: list[int] = []
        for step in steps:
            for i, token in enumerate(step):
                tokens.append(token)
                end = self.token_end(tokens, stops, decode)
                if end is not None:
                    return Finished(tokens, *end, steps=sizes + [i + 1])
            sizes.append(len(step))
        return Finished(tokens, decode(tokens), "length", steps=sizes)  # the implementation ended the row itself

    def token_end(self, tokens: list[int], stops: Stops, decode) -> tuple[str, str, str | int | None] | None:
        """(text, finish_reason, stop_reason) when the response ends at its last token, else None."""
        last = tokens[-1]
        if len(tokens) > stops.min_tokens:
            if last in stops.eos or last in stops.token_ids:
                return decode(tokens), "stop", (last if last in stops.token_ids else None)
            if stops.strings:
                text = decode(tokens)
                after = len(decode(tokens[: stops.min_tokens])) if stops.min_tokens else 0
                found = first_stop(text, stops.strings, after)
                if found is not None:
                    return text[: found[0]], "stop", found[1]
        if len(tokens) >= stops.max_tokens:
            return decode(tokens), "length", None
        return None

    def chat_finish_reason(self, finished: Finished, calls: int, streamed: bool) -> str:
        """A chat reply's finish_reason where the server runs a tool-call parser for the request (auto tool choice):
        "tool_calls" when the parser produced at least one call (`calls`: the calls of the reply, or, streamed, the
        calls the stream's parser sent), whatever ended the reply, "stop" or "length" (vLLM's serving_chat: "tool_calls"
        if auto tools were called, else the output's finish_reason, non-streamed and streamed alike); else the
        reply's own."""
        return "tool_calls" if calls else finished.reason

    def masked(self, stops: Stops) -> frozenset[int]:
        """Token ids the implementation masks with EOS while fewer than min_tokens tokens are out: the request's
        stop_token_ids (vLLM: "before EOS or stop_token_ids can be generated")."""
        return stops.token_ids if stops.min_tokens else frozenset()

    def deltas(self, finished: Finished) -> list[tuple[int, int]]:
        """[(start, end)) slices of the returned tokens, one per SSE delta: one speculative step each."""
        out, at = [], 0
        for size in finished.steps:
            out.append((at, at + size))
            at += size
        return out

    def seed(self, requested: int | None) -> int:
        return int.from_bytes(os.urandom(4), "little") if requested is None else requested

    def samples(self, n: int) -> int:
        """Independent rows drawn for a request's n choices (choice i is row i % samples)."""
        return n

    def step_hooks(self, emit):
        """The hooks the reference's speculative loop runs with (`emit` records each row's steps)."""
        from specdec_ref.generate import StepHooks

        return StepHooks(emit=emit)

    def stream_parts(self, finished: Finished, slices: list[tuple[int, int]], texts: list[str], end: int,
                     decode) -> list[tuple[str, str]]:
        """(reasoning, content) text of each delta, for a reasoning parser whose reasoning ends at the first token
        `end`: the parser keeps its state across deltas and splits a delta wherever the marker falls in it."""
        reasoning, content = split_reasoning(finished.tokens, finished.text, end, decode)
        start_content = len(finished.text) - len(content)
        out, at = [], 0
        for text in texts:
            lo, hi = at, at + len(text)
            out.append((finished.text[lo: min(hi, len(reasoning))], finished.text[max(lo, start_content): hi]))
            at = hi
        return out


    def stream_tool_calls(self, finished: Finished, slices: list[tuple[int, int]], texts: list[str],
                          contents: list[str], start: int, tools: tuple[int, int], decode) -> list[tuple[str, list]]:
        """(content, tool_calls entries) of each delta for a tool-call parser (`tool_calls`) over the reply from
        token `start` on. `contents[j]` is the content delta j carries before tool calls are parsed out of it (its
        text, or a reasoning parser's content part): the last characters of the delta. The parser keeps its state
        across deltas and splits a delta wherever a marker falls in it: the content outside the markup; a call's
        name (with its id and type) in the delta where the name token has arrived; its arguments as they arrive."""
        calls = tool_calls(finished.tokens, finished.text, tools, decode, start)
        spans = content_spans(calls, len(finished.text), _offset(decode, finished.tokens, finished.text, start))
        out, hi, named = [], 0, set()
        for text, content in zip(texts, contents, strict=True):
            lo, hi = hi, hi + len(text)
            seen = hi - len(content)  # the characters of this delta the parser gets
            kept = "".join(finished.text[max(s, seen): min(e, hi)] for s, e in spans if min(e, hi) > max(s, seen))
            entries = []
            for k, call in enumerate(calls):
                args = finished.text[max(call.arguments[0], seen): min(call.arguments[1], hi)]
                if k not in named and call.name_span[1] <= hi and seen <= max(call.name_span[0], lo):
                    named.add(k)
                    entries.append({"index": k, "id": f"call_{os.urandom(6).hex()}", "type": "function",
                                    "function": {"name": call.name, "arguments": args}})
                elif k in named and args:
                    entries.append({"index": k, "function": {"arguments": args}})
            out.append((kept, entries))
        return out


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One tool call of a reply, in characters of its text."""

    name: str
    name_span: tuple[int, int]  # the name token's characters (the name is their text, stripped)
    arguments: tuple[int, int]  # the arguments' characters (the rest of the call, up to the closing marker)
    markup: tuple[int, int]  # from the opening marker to the end of the closing one (or of the reply)
    open: int  # the opening marker's token index


def tool_calls(tokens: list[int], text: str, tools: tuple[int, int], decode, start: int = 0) -> list[ToolCall]:
    """The tool calls of a reply for a Hermes-style parser whose calls are `<tool_call>` BODY `</tool_call>`, the
    markers being the tokens `tools` = (open, close), looked for from token `start` on. A toy model writes no JSON,
    so the body is read token-wise: its first token's text (stripped) names the function, the text of the rest is
    the arguments. A call still open at the end of the reply ends there (as vLLM's Hermes parser reads it)."""
    opening, closing = tools
    out, i = [], start
    while i < len(tokens):
        if tokens[i] != opening:
            i += 1
            continue
        c = next((j for j in range(i + 1, len(tokens)) if tokens[j] == closing), len(tokens))
        ns, ne = _offset(decode, tokens, text, i + 1), _offset(decode, tokens, text, min(i + 2, c))
        out.append(ToolCall(text[ns:ne].strip(), (ns, ne), (ne, _offset(decode, tokens, text, c)),
                            (_offset(decode, tokens, text, i), _offset(decode, tokens, text, c + 1)), i))
        i = c + 1
    return out


def content_spans(calls: list[ToolCall], length: int, begin: int = 0) -> list[tuple[int, int]]:
    """The characters [begin, length) of a reply outside its tool calls' markup."""
    out, at = [], begin
    for call in calls:
        out.append((at, call.markup[0]))
        at = call.markup[1]
    out.append((at, length))
    return [(s, e) for s, e in out if e > s]


def parse_tool_calls(tokens: list[int], text: str, tools: tuple[int, int], decode,
                     start: int = 0) -> tuple[str, list[ToolCall]]:
    """(content, calls) of a reply's text from token `start` on (`tool_calls`)."""
    calls = tool_calls(tokens, text, tools, decode, start)
    spans = content_spans(calls, len(text), _offset(decode, tokens, text, start))
    return "".join(text[s:e] for s, e in spans), calls


def _offset(decode, tokens: list[int], text: str, m: int) -> int:
    """Characters of `text` the first m tokens account for (all of it from the last token on)."""
    return len(text) if m >= len(tokens) else _shown(decode, tokens, text, m)


def split_reasoning(tokens: list[int], text: str, end: int, decode) -> tuple[str, str]:
    """(reasoning, content) of a reply for a parser whose reasoning ends at the first token `end` (its text is in
    neither; no `end`: all reasoning, as vLLM's DeepSeek-R1 parser does)."""
    if end not in tokens:
        return text, ""
    e = tokens.index(end)
    return text[: _shown(decode, tokens, text, e)], text[_shown(decode, tokens, text, e + 1):]


def _shown(decode, tokens: list[int], text: str, m: int) -> int:
    """Characters of `text` the first m tokens account for."""
    n = 0
    for a, b in zip(decode(tokens[:m]), text, strict=False):
        if a != b:
            break
        n += 1
    return n


def first_stop(text: str, strings: tuple[str, ...], after: int = 0) -> tuple[int, str] | None:
    """(where, which) of the earliest occurrence of any stop string in `text` that ends past character `after`
    (ties: the longer string)."""
    found = []
    for s in strings:
        at = text.find(s, max(0, after - len(s) + 1))
        if at >= 0:
            found.append((at, -len(s), s))
    if not found:
        return None
    at, _, which = min(found)
    return at, which


def text_deltas(tokens: list[int], text: str, slices: list[tuple[int, int]], decode) -> list[str]:
    """The text each delta carries: the growth of the returned text over the delta's tokens. A prefix's decoding
    is clipped to the returned text (a stop string cut it; a partial character is held back until complete), so
    the deltas concatenate to `text` whatever the slicing."""

    def shown(m: int) -> int:  # characters of `text` that the first m tokens account for
        prefix = decode(tokens[:m])
        n = 0
        for a, b in zip(prefix, text, strict=False):
            if a != b:
                break
            n += 1
        return n

    out = []
    for start, end in slices:
        out.append(text[shown(start): shown(end)] if end < len(tokens) else text[shown(start):])
    return out
