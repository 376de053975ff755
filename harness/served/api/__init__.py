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

The check, one job per module (this package re-exports their public names):

- harness.served.api.records: the tests, the request kinds and the records (cell, context, reply, exchange);
- harness.served.api.replies: reading completions, chat completions and their server-sent event streams;
- harness.served.api.offers: what the engine offers, asked once per run (route, refusal, streams, optional fields);
- harness.served.api.design: the requests chosen on a base continuation and its steps (no request sent);
- harness.served.api.drawing: one cell's requests built and sent (`draw`), and where the stops landed;
- harness.served.api.checks: the deterministic tests;
- harness.served.api.statistical: the three tests that are p-values;
- harness.served.api.cells: the cells, the check that runs their tests, and the report's notes.
"""

from __future__ import annotations

from harness.served.api.cells import API_CHECK, cells, notes
from harness.served.api.design import (
    MIN_TOKENS_STOP_IDS,
    caps,
    frequent_tokens,
    min_tokens_cases,
    new_suffix,
    placement,
    stop_cases,
    stops_of,
)
from harness.served.api.drawing import (
    CAP_STEP_TRIES,
    CHAT_REQUESTS,
    MIN_TOKENS_EOS_FRACTION,
    MIN_TOKENS_EOS_REQUESTS,
    MIN_TOKENS_STOP_ID_REQUESTS,
    N_REQUESTS,
    draw,
)
from harness.served.api.offers import (
    API_ROUTES,
    OPTIONAL_FIELDS,
    not_offered,
    refusal,
    refused_fields,
    route,
    skipped_tests,
    streams,
    takes_min_stop_ids,
)
from harness.served.api.records import (
    MIN_KINDS,
    N_CHOICES,
    STOP_KINDS,
    STRING_KINDS,
    TESTS,
    TOKEN_KINDS,
    TOOLS,
    ApiCell,
    Context,
    Exchange,
    Reply,
)
from harness.served.api.replies import parse_chat, parse_chat_stream, parse_choices, parse_reply, parse_stream
from harness.served.api.statistical import eos_hazard, n_independence, unseeded_coincidence

__all__ = [
    "API_CHECK", "API_ROUTES", "CAP_STEP_TRIES", "CHAT_REQUESTS", "MIN_KINDS", "MIN_TOKENS_EOS_FRACTION",
    "MIN_TOKENS_EOS_REQUESTS", "MIN_TOKENS_STOP_IDS", "MIN_TOKENS_STOP_ID_REQUESTS", "N_CHOICES", "N_REQUESTS",
    "OPTIONAL_FIELDS", "STOP_KINDS", "STRING_KINDS", "TESTS", "TOKEN_KINDS", "TOOLS", "ApiCell", "Context",
    "Exchange", "Reply", "caps", "cells", "draw", "eos_hazard", "frequent_tokens", "min_tokens_cases",
    "n_independence", "new_suffix", "not_offered", "notes", "parse_chat", "parse_chat_stream", "parse_choices",
    "parse_reply", "parse_stream", "placement", "refusal", "refused_fields", "route", "skipped_tests", "stop_cases",
    "stops_of", "streams", "takes_min_stop_ids", "unseeded_coincidence",
]
