"""The API check's vocabulary: the tests it runs, the kinds of request it makes, and what it records of them (a
cell, the context its tests read, one reply, one request with its replies)."""

from __future__ import annotations

import dataclasses

TESTS = ("max_tokens", "usage", "finish_reason", "stop_strings", "stop_token_ids", "logprobs_aligned",
         "seed_reproducible", "unseeded_independent", "min_tokens", "n_independent")
# + "stream" where the engine streams completions, "chat_stream" where it streams chat completions,
# "tool_calls_finish_reason" where it streams chat completions with tools (a tool-call parser)
MIN_KINDS = ("min_tokens_stop", "min_tokens_skip")  # stop strings with min_tokens (see min_tokens_cases)
STRING_KINDS = ("stop_in_step", "stop_across_steps", "stop_in_cap_step", "stop_string") + MIN_KINDS
TOKEN_KINDS = ("stop_token_in_step", "stop_token")  # stop_string / stop_token: no multi-token step to place them in
STOP_KINDS = STRING_KINDS + TOKEN_KINDS


N_CHOICES = 24  # choices per n > 1 request (n_independent: 2 requests give 12 + 12 disjoint pairs)
# The tool sent with every chat request where the engine streams chat with tools (a tool-call parser: `streams`)
TOOLS = [{"type": "function", "function": {"name": "specdec_probe", "description": "a tool the model may call",
                                           "parameters": {"type": "object", "properties": {}}}}]


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
