"""`specdec serve`: an OpenAI-compatible server around any generation-level implementation (CONTRACT §1b).

Routes: `/v1/models`, `/v1/completions`, `/v1/chat/completions`, `/tokenize`, `/metrics`, `/health`.
Token ids and logprobs are returned the way vLLM returns them, so the engine-level check (and any
other client written for vLLM) runs against the reference and every generation mutant over HTTP:

- `return_token_ids: true` adds `token_ids` / `prompt_token_ids` to each choice;
  `return_tokens_as_token_ids: true` names tokens "token_id:N" in logprobs;
- `logprobs: k` (completions) / `top_logprobs: k` (chat): the sampled token's logprob and the top k,
  capped at `max_logprobs` (vLLM `--max-logprobs`, default 20); `prompt_logprobs: k` scores the prompt
  (the sampled/actual token plus the top k at every prompt position after the first); `echo` with
  `logprobs` scores the prompt the legacy OpenAI way (what llama.cpp's server does);
- `logprobs_mode`: "raw_logprobs" (vLLM's default: log-softmax of the raw logits, whatever the
  temperature) or "processed_logprobs" (the law actually sampled: temperature → top-k → top-p);
- `prompt_logprobs_mode`: how prompt scores (`prompt_logprobs`, `echo`) are written. "raw_logprobs" by default,
  whatever `logprobs_mode` says, as vLLM does (its model runner: "prompt tokens skip sampling processors, so
  processed_* and raw_* yield the same scores"); "processed_logprobs" applies the request's temperature, top-k
  and top-p to them too, a scorer that ground truth (b) can use at T != 1 (no vLLM release does this);
- `seed`, `n`, `temperature`, `top_p`, `top_k` (vLLM's extension; -1 = off), `max_tokens`;
- `stop` (strings), `stop_token_ids`, `ignore_eos`: applied step by step to the tokens each speculative step
  emits (harness.served.bookkeeping: EOS / stop ids, then stop strings, then the cap, per token); choices carry
  `stop_reason` as vLLM's do;
- `min_tokens`: EOS masked by the implementation (`min_new_tokens`) and no end condition honoured before it;
- `stream: true` (completions and chat): server-sent events, one delta per speculative step (its token ids, text
  and logprobs), finish_reason on the last, a usage event with `stream_options.include_usage`, then `[DONE]`. The
  steps are the reference adapter's own (recorded by an emit hook); the target alone, and implementations that
  do not report steps, stream one token per delta;
- `reasoning_end` (`specdec serve --reasoning-end-token ID`): a reasoning parser on the chat route, as vLLM's
  `--reasoning-parser` (DeepSeek-R1 style): the text before the first token ID is `reasoning_content`, the text
  after it `content`, in the reply and in each streamed delta;
- `tool_call_tokens` (`specdec serve --tool-call-tokens OPEN,CLOSE`): a tool-call parser on the chat route, as
  vLLM's `--tool-call-parser hermes` with `--enable-auto-tool-choice` (requests with `tools`, `tool_choice` not
  "none"): each OPEN ... CLOSE span of the content is a call in `message.tool_calls` (streamed: `delta.tool_calls`,
  the name once, then the arguments as they arrive), its first token's text the function name, the rest of its
  text the arguments (harness.served.bookkeeping.tool_calls: a toy model writes no JSON); without it, `tools` is
  ignored and a streamed request with `tools` is refused.

`api_mutant` (hidden `specdec serve --api-mutant NAME`) swaps that bookkeeping for a planted API bug of
harness.mutants.api, to test `specdec verify --level engine --engine-checks api`.

Logprobs are the target's, teacher-forced over the returned tokens in float64 (engines report the
target's law at the emitted token, speculation or not): `LogprobsWriter`. `logprobs_mutant` (hidden
`specdec serve --logprobs-mutant NAME`) swaps it for a planted logprob bug of harness.mutants.logprobs, to test
`specdec verify --level engine --engine-checks logprobs`. Speculation off serves the target alone
(`harness.adapters.control:target_only_generate`). `/metrics` (Prometheus text) counts target forward
passes per generated token, the speculation metric a black-box client can read.

`dialect="llama-cpp-python"` (`specdec serve --dialect llama-cpp-python`) answers the way llama-cpp-python's
server does instead, to test the client path that reads it (`specdec verify --api llama-cpp-python`): the
completion route takes text and serves n = 1, returns no token ids, and names each generated token by its
piece (its bytes decoded with errors ignored, special tokens and tokens over 32 bytes as ""); `/tokenize`
is replaced by `/extras/tokenize` ({"input": text} -> {"tokens": ids}).

`serving(...)` runs the server in a thread on a free 127.0.0.1 port and always stops it.

The server, one job per module (this package re-exports their public names):

- harness.served.serve.request: a request's fields read and checked (`Sampling`), and the errors it is answered with;
- harness.served.serve.backend: `GenerationBackend`, generation and scoring (`LogprobsWriter`), /tokenize, /metrics;
- harness.served.serve.completions: `/v1/completions`, and the llama-cpp-python dialect's routes;
- harness.served.serve.chat: `/v1/chat/completions`, with the reasoning and tool-call parsers;
- harness.served.serve.streaming: `stream: true`, one server-sent event per speculative step;
- harness.served.serve.entries: the logprob entries in the shapes of the OpenAI / vLLM replies;
- harness.served.serve.app: the FastAPI app, `serving` and `serve_forever`.
"""

from __future__ import annotations

from harness.served.serve.app import Served, build_app, serve_forever, serving
from harness.served.serve.backend import (
    API_MUTANTS_MODULE,
    DIALECTS,
    LOGPROBS_MODES,
    LOGPROBS_MUTANTS_MODULE,
    SCORE_FLOATS,
    SCORE_ROWS,
    Counters,
    GenerationBackend,
    LogprobsWriter,
    api_bookkeeping,
    logprobs_writer,
)
from harness.served.serve.entries import MASKED_LOGPROB
from harness.served.serve.request import EXTRA_FIELDS, RequestError, Sampling, ServerStopping
from harness.served.serve.streaming import Stream

__all__ = [
    "API_MUTANTS_MODULE", "DIALECTS", "EXTRA_FIELDS", "LOGPROBS_MODES", "LOGPROBS_MUTANTS_MODULE", "MASKED_LOGPROB",
    "SCORE_FLOATS", "SCORE_ROWS", "Counters", "GenerationBackend", "LogprobsWriter", "RequestError", "Sampling",
    "ServerStopping", "Served", "Stream", "api_bookkeeping", "build_app", "logprobs_writer", "serve_forever",
    "serving",
]
