"""Planted API bugs: `specdec serve`'s bookkeeping (harness.served.bookkeeping) with one part wrong.

Each models a public bug of a speculative engine in which the token law stayed exact and the response was
wrong (docs/BUGS.md, "API bookkeeping under multi-token steps"). They are served with the hidden
`specdec serve --api-mutant NAME` (or `serving(..., api_mutant=NAME)`), and `specdec verify --level engine
--engine-checks api` must FAIL each one (tests/served/test_served_api.py). They are not generate()
implementations, so they are not in the `specdec mutants` catalogue (harness.mutants.registry): they are a
property of the server around the implementation.
"""

from __future__ import annotations

import dataclasses

import torch

from harness.errors import UnknownNameError
from harness.served.bookkeeping import Bookkeeping, Finished, Stops


class CapBeforeStop(Bookkeeping):
    """After each step the cap is checked first: a step that reaches max_tokens ends the response with "length",
    and a stop string, stop token or EOS inside that step is never looked at (the text after it leaks)."""

    name = "cap_before_stop"
    models = "SGLang #31599 / PR #31569 (max_new_tokens checked before stop strings)"

    def finish(self, steps, stops, decode):
        tokens, sizes = [], []
        for step in steps:
            if len(tokens) + len(step) >= stops.max_tokens:
                keep = stops.max_tokens - len(tokens)
                tokens += step[:keep]
                return Finished(tokens, decode(tokens), "length", steps=sizes + [keep])
            for i, token in enumerate(step):
                tokens.append(token)
                end = self.token_end(tokens, stops, decode)
                if end is not None:
                    return Finished(tokens, *end, steps=sizes + [i + 1])
            sizes.append(len(step))
        return Finished(tokens, decode(tokens), "length", steps=sizes)


class StopInStepTail(Bookkeeping):
    """Stop strings are searched once per step, in the text of the last len(stop) + 1 tokens only: a stop early
    in a long accepted block is missed, and generation runs on past it."""

    name = "stop_in_step_tail"
    models = "SGLang PR #23802 (stop search decodes only the last len(stop) + 1 tokens)"

    def finish(self, steps, stops, decode):
        tokens, sizes = [], []
        strings_off = Stops(stops.max_tokens, (), stops.token_ids, stops.eos)
        for step in steps:
            for i, token in enumerate(step):
                tokens.append(token)
                end = self.token_end(tokens, strings_off, decode)  # EOS, stop ids and the cap: per token
                if end is not None:
                    return Finished(tokens, *end, steps=sizes + [i + 1])
            sizes.append(len(step))
            for s in stops.strings:
                tail = decode(tokens[-(len(s) + 1):])
                if s in tail:
                    text = decode(tokens)
                    return Finished(tokens, text[: text.rfind(s)], "stop", s, steps=sizes)
        return Finished(tokens, decode(tokens), "length", steps=sizes)


class IdsPastStop(Bookkeeping):
    """The text is cut at the stop string, but the token ids (and their logprobs) of the whole step that held it
    are returned."""

    name = "ids_past_stop"
    models = "vLLM PR #47616 (token_ids and logprobs past the stop returned)"

    def finish(self, steps, stops, decode):
        done = super().finish(steps, stops, decode)
        if done.reason != "stop" or not isinstance(done.stop_reason, str):
            return done
        step = len(done.steps) - 1
        whole = steps[step]
        tokens = done.tokens + whole[done.steps[-1]:]
        return Finished(tokens, done.text, "stop", done.stop_reason, steps=done.steps[:-1] + [len(whole)])


class MaxTokensPerStep(Bookkeeping):
    """max_tokens counts steps, not tokens: the engine runs max_tokens steps of up to γ + 1 tokens each."""

    name = "max_tokens_per_step"
    models = "ferrox PR #311 (max_tokens counted steps: a limit of 6 returned 9 tokens)"

    def budget(self, max_tokens, gamma):
        return max_tokens * (gamma + 1)

    def finish(self, steps, stops, decode):
        uncapped = Stops(10**9, stops.strings, stops.token_ids, stops.eos)
        return super().finish(steps[: stops.max_tokens], uncapped, decode)  # ends "length" after the last step


class StreamLastTokenOnly(Bookkeeping):
    """A stream delta carries only the last token of its step (ids, text and logprobs); the non-streamed response
    is right."""

    name = "stream_last_token_only"
    models = "vLLM #42781, #56077, #55082 (streaming parsers advance once per delta of 3-8 tokens)"

    def deltas(self, finished):
        return [(end - 1, end) for _, end in super().deltas(finished)]


class UnseededSharedStream(Bookkeeping):
    """Every request without a seed runs with the same one: unseeded requests return identical samples."""

    name = "unseeded_shared_stream"
    models = "TRT-LLM #19487 / PR #17599 (unseeded requests shared one stream under one-model speculation)"

    def seed(self, requested):
        return 0 if requested is None else requested


class MinTokensPerStep(Bookkeeping):
    """min_tokens counts steps, not tokens: EOS stays masked until min_tokens speculative steps have been emitted,
    and stop strings / stop token ids are not honoured before then (about L times too long, L = mean tokens per
    step). One token per step (speculation off) is the same as correct."""

    name = "min_tokens_per_step"
    models = "SGLang PR #33643 (min_new_tokens counted steps: EOS masked about L times too long)"

    def finish(self, steps, stops, decode):
        if not stops.min_tokens:
            return super().finish(steps, stops, decode)
        least = sum(len(s) for s in steps[: stops.min_tokens])  # the tokens of the first min_tokens steps
        return super().finish(steps, dataclasses.replace(stops, min_tokens=least), decode)

    def step_hooks(self, emit):
        from specdec_ref.generate import StepHooks, draft_laws, target_law
        from specdec_ref.processing import History

        state = {"rows": None, "steps": {}}

        def per_step(history):  # the EOS mask reads the steps emitted so far, at every position of the block
            if history is None:
                return None
            rows = state["rows"]
            active = list(rows.active) if rows is not None else list(range(history.n_generated.shape[0]))
            steps = torch.tensor([state["steps"].get(r, 0) for r in active], dtype=torch.long)
            shape = history.n_generated.shape
            return History(history.seq, steps.view(-1, *[1] * (len(shape) - 1)).expand(shape).clone(), history.eos)

        def counted_emit(rows, row, tokens):
            state["rows"] = rows
            state["steps"][row] = state["steps"].get(row, 0) + 1
            return emit(rows, row, tokens)

        return StepHooks(target_probs=lambda logits, params, history: target_law(logits, params, per_step(history)),
                         draft_probs=lambda logits, params, history: draft_laws(logits, params, per_step(history)),
                         emit=counted_emit)


class ChoicesShareSeed(Bookkeeping):
    """The n choices of a request are drawn with one seed: every choice is the same sample."""

    name = "n_choices_share_seed"
    models = "TRT-LLM #19487 / PR #17599 (one random stream shared where each sample needs its own)"

    def samples(self, n):
        return 1


class ReasoningOncePerDelta(Bookkeeping):
    """The streaming reasoning parser takes one transition per delta: the delta that holds the end of the reasoning
    emits only its reasoning before the marker (or, when the marker opens the delta, only the content after it),
    so content after a marker in the middle of a multi-token delta is dropped. Deltas of one token (speculation
    off) never show it; the non-streamed reply is right."""

    name = "reasoning_parser_once_per_delta"
    models = "vLLM #42781, #56077, #55082 (reasoning / tool-call parsers advance once per delta of 3-8 tokens)"

    def stream_parts(self, finished, slices, texts, end, decode):
        right = super().stream_parts(finished, slices, texts, end, decode)
        out, thinking = [], True
        for (a, b), (reasoning, content) in zip(slices, right, strict=True):
            if thinking and end in finished.tokens[a:b]:
                thinking = False
                out.append((reasoning, "") if reasoning else ("", content))
            else:
                out.append((reasoning, content))
        return out


class ToolCallOncePerDelta(Bookkeeping):
    """The streaming tool-call parser takes one transition per delta: the delta that holds `<tool_call>` only moves
    it into the call, so the call's name and the arguments that came in the same delta are never sent (its later
    arguments are, without a name; a call opened and closed in one delta is lost). Deltas of one token (speculation
    off) never show it; the non-streamed reply is right."""

    name = "tool_call_parser_once_per_delta"
    models = "vLLM #42781, #56077, #55082 (tool-call parsers advance once per delta: <tool_call> and its arguments " \
             "in one delta are dropped)"

    def stream_tool_calls(self, finished, slices, texts, contents, start, tools, decode):
        from harness.served.bookkeeping import tool_calls

        right = super().stream_tool_calls(finished, slices, texts, contents, start, tools, decode)
        opened = [c.open for c in tool_calls(finished.tokens, finished.text, tools, decode, start)]
        out = []
        for (a, b), (content, entries) in zip(slices, right, strict=True):
            dropped = {k for k, at in enumerate(opened) if a <= at < b}  # the calls whose marker is in this delta
            out.append((content, [e for e in entries if e["index"] not in dropped]))
        return out


class StopIdsUnmaskedUnderMinTokens(Bookkeeping):
    """min_tokens masks EOS only: a stop token id can be drawn before min_tokens (it is then skipped, and the reply
    goes on past it), where vLLM's contract is that neither EOS nor stop_token_ids can be generated before
    min_tokens. What `specdec serve` did until the API check tested it."""

    name = "stop_ids_unmasked_under_min_tokens"
    models = "vLLM min_tokens (\"before EOS or stop_token_ids can be generated\"; PR #32642 masks the stop tokens " \
             "at every draft position below min_tokens)"

    def masked(self, stops):
        return frozenset()


class ToolCallsFinishStreamStop(Bookkeeping):
    """A stream that parsed and sent tool calls ends with the reply's own finish_reason ("stop" / "length")
    instead of "tool_calls"; the non-streamed reply says "tool_calls". Clients that branch on the last
    finish_reason then treat the turn as plain text and drop its calls."""

    name = "tool_calls_finish_stream_stop"
    models = "vLLM PR #9209 (streamed finish_reason \"stop\" instead of \"tool_calls\")"

    def chat_finish_reason(self, finished, calls, streamed):
        return finished.reason if streamed else super().chat_finish_reason(finished, calls, streamed)


API_MUTANTS = {cls.name: cls for cls in (CapBeforeStop, StopInStepTail, IdsPastStop, MaxTokensPerStep,
                                         StreamLastTokenOnly, UnseededSharedStream, MinTokensPerStep,
                                         ChoicesShareSeed, ReasoningOncePerDelta, ToolCallOncePerDelta,
                                         StopIdsUnmaskedUnderMinTokens, ToolCallsFinishStreamStop)}


def get(name: str) -> type[Bookkeeping]:
    """The planted API bug `name`; UnknownNameError with close matches otherwise."""
    try:
        return API_MUTANTS[name]
    except KeyError:
        raise UnknownNameError("API mutant", name, list(API_MUTANTS)) from None


