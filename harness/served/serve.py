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
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

from harness.errors import HarnessError
from harness.served.text import IdTokenizer, decode, encode, token_name, tokenizer_for
from specdec_ref.generate import default_eos, eos_set
from specdec_ref.processing import logits_to_probs

LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")
DIALECTS = ("openai", "llama-cpp-python")
MASKED_LOGPROB = -9999.0  # JSON has no -inf; OpenAI uses this value for tokens that cannot be sampled
SCORE_ROWS = 64  # rows per teacher-forcing pass
SCORE_FLOATS = 2**24  # ... and at most this many float64 logits per pass (128 MiB: V = 50k stays in memory)


class RequestError(Exception):
    """A bad request: answered with HTTP `status` and an OpenAI-style error body."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class ServerStopping(RequestError):
    """The server is stopping (SIGTERM / SIGINT / `Served.stop`): a generation in flight aborts at its next forward
    pass (harness.served.lifecycle) and its request is answered 503."""

    def __init__(self):
        super().__init__("specdec serve is stopping: the generation was aborted", 503)


class Stream:
    """A reply sent as server-sent events (`stream: true`): each event one `data:` line, then `data: [DONE]`."""

    def __init__(self, events: list[dict]):
        self.events = events

    def lines(self):
        import json

        for event in self.events:
            yield f"data: {json.dumps(event)}\n\n"
        yield "data: [DONE]\n\n"


# Where the planted API and logprob bugs live (named, not imported: the zoo imports the served package, not the
# reverse).
API_MUTANTS_MODULE = "harness.mutants.api"
LOGPROBS_MUTANTS_MODULE = "harness.mutants.logprobs"


def api_bookkeeping(api_mutant: str | None):
    """The bookkeeping `specdec serve` runs: the correct one, or the planted API bug `api_mutant` of the zoo."""
    if api_mutant is None:
        from harness.served.bookkeeping import Bookkeeping

        return Bookkeeping()
    import importlib

    return importlib.import_module(API_MUTANTS_MODULE).get(api_mutant)()


def logprobs_writer(logprobs_mutant: str | None) -> LogprobsWriter:
    """What `specdec serve` writes as logprobs: the target's (`LogprobsWriter`), or the planted logprob bug
    `logprobs_mutant` of the zoo."""
    if logprobs_mutant is None:
        return LogprobsWriter()
    import importlib

    return importlib.import_module(LOGPROBS_MUTANTS_MODULE).get(logprobs_mutant)()


class LogprobsWriter:
    """The logprobs `specdec serve` reports for the tokens it returns, in two steps that engines have each got
    wrong: `laws`, the log law at each returned token (the target's, teacher-forced over prompt + continuation:
    `GenerationBackend.log_laws`), and `written`, the entries (token, logprob, top k) as they go into the reply.
    The planted logprob bugs (harness.mutants.logprobs) are subclasses that each get one of them wrong."""

    def laws(self, backend: GenerationBackend, seqs: list[list[int]], starts: list[int],
             sampling: Sampling) -> list[np.ndarray]:
        """Per sequence s, the log law [len(s) − start, V] reported for its tokens start.. ."""
        return backend.log_laws(seqs, starts, sampling)

    def written(self, entries: list[dict]) -> list[dict]:
        """The entries of `GenerationBackend._entries` as the reply carries them."""
        return entries


# Request fields of the sampling parameters beyond temperature / top-k / top-p -> generate() keywords
# (OpenAI / vLLM names; `bad_words_ids` is a token-id extension).
EXTRA_FIELDS = {"min_p": "min_p", "logit_bias": "logit_bias", "repetition_penalty": "repetition_penalty",
                "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
                "bad_words_ids": "bad_words_ids", "min_tokens": "min_new_tokens"}


@dataclasses.dataclass
class Sampling:
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    extras: dict = dataclasses.field(default_factory=dict)  # generate() keywords of the optional parameters

    @classmethod
    def from_request(cls, body: dict) -> Sampling:
        top_k = body.get("top_k")
        top_p = body.get("top_p")
        extras = {}
        for field, keyword in EXTRA_FIELDS.items():
            value = body.get(field)
            if value in (None, {}, [], 0, 0.0) or (field == "repetition_penalty" and value == 1):
                continue
            extras[keyword] = ({int(k): float(b) for k, b in value.items()} if field == "logit_bias" else
                               [[int(t) for t in w] for w in value] if field == "bad_words_ids" else
                               int(value) if field == "min_tokens" else float(value))
        return cls(float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0),
                   None if top_k in (None, -1, 0) else int(top_k),
                   None if top_p in (None, 1, 1.0) else float(top_p), extras)


@dataclasses.dataclass
class Counters:
    """What /metrics reports; guarded by the backend's lock."""

    requests: int = 0
    target_calls: int = 0  # batched target forward passes spent generating
    row_tokens: float = 0.0  # Σ over requests of the mean new tokens per row
    generated_tokens: int = 0


class GenerationBackend:
    """One model pair + one §1b implementation; generation and scoring are serialized by a lock."""

    def __init__(self, impl: Callable, pair, *, speculative: bool = True, gamma: int = 3, model_name: str | None = None,
                 max_logprobs: int = 20, logprobs_mode: str = "raw_logprobs", tokenizer=None, max_n: int = 10_000,
                 token_ids: bool = True, logprobs: bool = True, logprobs_mutant: str | None = None,
                 dialect: str = "openai", prompt_logprobs_mode: str = "raw_logprobs", api_mutant: str | None = None,
                 reasoning_end: int | None = None, tool_call_tokens: tuple[int, int] | None = None):
        if dialect not in DIALECTS:
            raise HarnessError(f"--dialect must be one of {', '.join(DIALECTS)}, got {dialect!r}")
        if logprobs_mode not in LOGPROBS_MODES:
            raise HarnessError(f"--logprobs-mode must be one of {', '.join(LOGPROBS_MODES)}, got {logprobs_mode!r}")
        if prompt_logprobs_mode not in LOGPROBS_MODES:
            raise HarnessError(f"--prompt-logprobs-mode must be one of {', '.join(LOGPROBS_MODES)}, "
                               f"got {prompt_logprobs_mode!r}")
        self.prompt_logprobs_mode = prompt_logprobs_mode
        self.bookkeeping = api_bookkeeping(api_mutant)  # stops, limits, stream deltas, seeds (a planted bug or not)
        self.logprobs_writer = logprobs_writer(logprobs_mutant)  # the logprobs reported (a planted bug or not)
        self.reasoning_end = reasoning_end  # a reasoning parser on the chat route: the token that ends the reasoning
        # a tool-call parser on the chat route (requests with `tools`): the tokens that open and close a call
        self.tool_call_tokens = None if tool_call_tokens is None else tuple(tool_call_tokens)
        if self.tool_call_tokens is not None and (len(self.tool_call_tokens) != 2
                                                  or len(set(self.tool_call_tokens)) != 2):
            raise HarnessError(f"--tool-call-tokens must be two different token ids OPEN,CLOSE, got {tool_call_tokens}")
        from harness.adapters.control import target_only_generate

        self.impl = impl if speculative else target_only_generate
        self.pair, self.speculative, self.gamma = pair, speculative, gamma
        self.model_name = model_name or pair.name
        self.max_logprobs, self.logprobs_mode, self.max_n = max_logprobs, logprobs_mode, max_n
        self.tokenizer = tokenizer or tokenizer_for(pair)
        # False: behave like servers that ignore these request fields (to exercise clients against them)
        self.token_ids, self.logprobs = token_ids, logprobs
        self.dialect, self.pieces = dialect, None
        if dialect == "llama-cpp-python":
            from harness.served.pieces import PieceTable

            self.pieces = PieceTable.from_tokenizer(self.tokenizer)  # HarnessError for a pair without a real tokenizer
        self.eos = eos_set(default_eos(pair.target))
        self.lock = threading.Lock()
        self.counters = Counters()
        self.stopping = threading.Event()  # set when the server stops: generations in flight abort (lifecycle)
        self.in_flight = 0  # requests being handled (guarded by _flight)
        self._flight = threading.Lock()
        from specdec_ref.runners import cache_capabilities

        cache_capabilities(pair.target)  # its probe forwards run now (cached on the model), not in a counted request
        from harness.check.exact_laws import target64

        self._target64 = target64(pair)  # float64 scoring copy: the logprobs a client tests against are exact

    def _count_call(self, module, args):
        self.check_stopping()
        self.counters.target_calls += 1

    def check_stopping(self, *hook_args) -> None:
        """ServerStopping where the server is stopping (also a forward pre-hook: every target and draft pass of a
        generation checks it, so any implementation aborts within one pass)."""
        if self.stopping.is_set():
            raise ServerStopping()

    def handled(self, handler: Callable[[dict], object]) -> Callable[[dict], object]:
        """`handler` counted in `in_flight` while it runs (what a stop waits for)."""
        def counted(body: dict):
            with self._flight:
                self.in_flight += 1
            try:
                self.check_stopping()
                return handler(body)
            finally:
                with self._flight:
                    self.in_flight -= 1
        return counted

    # ------------------------------------------------------------------ generation and scoring

    def generate(self, prompts: list[list[int]], n: int, max_tokens: int, sampling: Sampling,
                 seed: int, masked: frozenset[int] = frozenset()) -> list[list[list[list[int]]]]:
        """n continuations of each prompt, each as its steps (the tokens each target pass emitted; rows cut after
        EOS, EOS included); prompts of one length share a call. `masked`: token ids masked with EOS before
        min_new_tokens (a min_tokens request's stop_token_ids; rows end at them too, as at EOS)."""
        out: list[list[list[list[int]]]] = [[] for _ in prompts]
        by_length: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            by_length.setdefault(len(p), []).append(i)
        k = self.bookkeeping.samples(n)  # independent rows per prompt (n, unless a planted bug shares them)
        for group in by_length.values():
            ids = torch.tensor([prompts[i] for i in group for _ in range(k)], dtype=torch.long)
            rows = self._call_impl(ids, max_tokens, sampling, seed + 7919 * group[0], masked)
            for j, i in enumerate(group):
                out[i] = [rows[j * k + c % k] for c in range(n)]
        return out

    def _call_impl(self, ids: torch.Tensor, max_tokens: int, sampling: Sampling,
                   seed: int, masked: frozenset[int] = frozenset()) -> list[list[list[int]]]:
        from harness.adapters.control import target_only_generate
        from harness.check.settings import accepted_parameters
        from harness.check.streams import seed_global
        from specdec_ref import adapters

        missing = sorted(set(sampling.extras) - accepted_parameters(self.impl))
        if missing:
            raise RequestError(f"the served implementation does not take {', '.join(missing)}")
        if masked and self.impl not in (adapters.generate, target_only_generate):  # CONTRACT §1b has no stop ids
            raise RequestError("stop_token_ids with min_tokens: the served implementation cannot mask them before "
                               "min_tokens (the reference adapter and --no-speculation can)")
        self.check_stopping()
        with self.lock:
            self.check_stopping()  # it may have waited for the lock while the server began to stop
            # A seeded request is reproducible whatever ran before it: torch's global RNG (what an implementation
            # that ignores its seed draws from) is seeded per call on its own stream of the request seed, never
            # with the seed itself (harness.check.streams: the implementation must not get its own draws twice).
            seed_global(seed, "serve")
            # The hook lives only for the call: targets can be shared between pairs (and deep-copied)
            hooks = [self.pair.target.register_forward_pre_hook(self._count_call),
                     self.pair.draft.register_forward_pre_hook(self.check_stopping)]
            try:
                out, sizes = self._stepped(ids, max_tokens, sampling, seed, masked)
            finally:
                for hook in hooks:
                    hook.remove()
            rows = [[t for t in row if t >= 0] for row in out.detach().cpu().tolist()]
            c = self.counters
            c.requests += 1
            c.generated_tokens += sum(map(len, rows))
            c.row_tokens += sum(map(len, rows)) / max(1, len(rows))
        if sizes is None:  # steps not known (or one token each: the target alone): one token per step
            return [[[t] for t in row] for row in rows]
        return [_split(row, s) for row, s in zip(rows, sizes, strict=True)]

    def _stepped(self, ids: torch.Tensor, max_tokens: int, sampling: Sampling, seed: int,
                 masked: frozenset[int] = frozenset()):
        """(tokens [B, N], per row the tokens each step kept, or None where the implementation does not say).

        The reference adapter is run as its own loop with an emit hook that records each row's step; the same
        call `specdec_ref.adapters:generate` makes, so the tokens are its tokens."""
        kw = dict(max_new_tokens=max_tokens, gamma=self.gamma, temperature=sampling.temperature,
                  top_k=sampling.top_k, top_p=sampling.top_p, seed=seed, **sampling.extras)
        from harness.adapters.control import target_only_generate
        from specdec_ref import adapters

        eos = sorted(eos_set(default_eos(self.pair.target)) | set(masked)) if masked else default_eos(self.pair.target)
        if masked and self.impl is target_only_generate:  # its own call, with the stop ids masked as EOS
            from specdec_ref.generate import autoregressive_generate

            del kw["gamma"]
            return autoregressive_generate(self.pair.target, ids, eos_token_id=eos,
                                           cache=adapters.cache_strategy(ids, max_tokens, self.pair.target),
                                           **kw).tokens, None
        if self.impl is not adapters.generate:
            return self.impl(self.pair.target, self.pair.draft, ids, **kw), None
        from specdec_ref.generate import speculative_generate

        sizes: list[list[int]] = [[] for _ in range(ids.shape[0])]

        def emit(rows, row: int, tokens: list[int]) -> int:
            kept = rows.emit(row, tokens)
            sizes[row].append(kept)
            return kept

        out = speculative_generate(self.pair.target, self.pair.draft, ids, eos_token_id=eos,
                                   cache=adapters.cache_strategy(ids, max_tokens, self.pair.target),
                                   hooks=self.bookkeeping.step_hooks(emit), **kw).tokens
        return out, sizes

    def reported_laws(self, seqs: list[list[int]], starts: list[int], sampling: Sampling) -> list[np.ndarray]:
        """The log laws reported for generated tokens (`LogprobsWriter.laws`: the target's, `log_laws`)."""
        return self.logprobs_writer.laws(self, seqs, starts, sampling)

    def log_laws(self, seqs: list[list[int]], starts: list[int], sampling: Sampling, model=None,
                 mode: str | None = None) -> list[np.ndarray]:
        """For each sequence s, the log law [len(s) − start, V] of tokens start.. given their prefixes, in `mode`
        (default: the server's logprobs_mode)."""
        model = self._target64 if model is None else model
        out: list[np.ndarray] = []
        step = max(1, min(SCORE_ROWS, SCORE_FLOATS // max(1, max(map(len, seqs), default=1) * self.pair.vocab_size)))
        with self.lock:
            for lo in range(0, len(seqs), step):
                self.check_stopping()
                chunk = seqs[lo : lo + step]
                width = max(map(len, chunk))
                full = torch.tensor([s + [0] * (width - len(s)) for s in chunk], dtype=torch.long)
                with torch.inference_mode():  # right padding: causal attention never sees it
                    logits = model(input_ids=full).logits[:, :-1, : self.pair.vocab_size].double()
                laws = self._law(logits, sampling, mode or self.logprobs_mode)  # [b, width - 1, V]: row t predicts token t + 1
                out += [laws[i, start - 1 : len(s) - 1].numpy()
                        for i, (s, start) in enumerate(zip(chunk, starts[lo : lo + step], strict=True))]
        return out

    def _law(self, logits: torch.Tensor, sampling: Sampling, mode: str) -> torch.Tensor:
        if sampling.extras and mode != "raw_logprobs":  # the history-dependent parameters
            raise RequestError(f"processed logprobs under {', '.join(sorted(sampling.extras))} are not served")
        if mode == "raw_logprobs":
            return torch.log_softmax(logits, dim=-1)
        probs = logits_to_probs(logits, sampling.temperature, sampling.top_k, sampling.top_p)
        return torch.log(probs)

    # ------------------------------------------------------------------ request handling

    def prompt_ids(self, prompt) -> list[list[int]]:
        """The OpenAI `prompt` field (text, ids, or a list of either) as token id lists."""
        if isinstance(prompt, str):
            return [encode(self.tokenizer, prompt)]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return [list(prompt)]
        if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            return [ids for p in prompt for ids in self.prompt_ids(p)]
        raise RequestError("prompt must be a string, a list of token ids, or a list of either")

    def check_ids(self, ids: list[int]) -> None:
        if not ids:
            raise RequestError("the prompt is empty")
        bad = [t for t in ids if not 0 <= t < self.pair.vocab_size]
        if bad:
            raise RequestError(f"prompt token ids {bad[:5]} are outside [0, {self.pair.vocab_size})")

    def completion(self, body: dict) -> dict | Stream:
        if self.pieces is not None:
            return self.pieces_completion(body)
        self._check_model(body)
        sampling = self._constrained(_sampling(body), body)
        n, max_tokens = _int(body, "n", 1, 1, self.max_n), _int(body, "max_tokens", 16, 1, 4096)
        k = self._k(body.get("logprobs"), "logprobs")
        k_prompt = self._k(body.get("prompt_logprobs"), "prompt_logprobs")
        as_ids, echo = bool(body.get("return_tokens_as_token_ids")) and self.token_ids, bool(body.get("echo"))
        stream = bool(body.get("stream"))
        if stream and (echo or k_prompt is not None):
            raise RequestError("stream=true with echo or prompt_logprobs is not supported by specdec serve")
        stops = self._stops(body, max_tokens)
        seed = self.bookkeeping.seed(_seed(body))
        prompts = self.prompt_ids(body.get("prompt"))
        for prompt in prompts:
            self.check_ids(prompt)
        done = self._finished(prompts, n, stops, sampling, seed)
        seqs = [p + f.tokens for p, rows in zip(prompts, done, strict=True) for f in rows]
        laws = iter(self.reported_laws(seqs, [len(p) for p, rows in zip(prompts, done, strict=True) for _ in rows],
                                  sampling) if k is not None else [])
        scored = [p for p in prompts if len(p) > 1] if (k_prompt is not None or (echo and k is not None)) else []
        prompt_laws = iter(self.log_laws(scored, [1] * len(scored), sampling, mode=self.prompt_logprobs_mode))
        choices, entries_of = [], []
        for prompt, rows in zip(prompts, done, strict=True):
            prompt_law = next(prompt_laws) if scored and len(prompt) > 1 else np.zeros((0, self.pair.vocab_size))
            for f in rows:
                choice = {"index": len(choices), "text": (decode(self.tokenizer, prompt) if echo else "") + f.text,
                          "finish_reason": f.reason, "stop_reason": f.stop_reason, "logprobs": None}
                entries = self._entries(f.tokens, next(laws), k, as_ids) if k is not None else None
                entries_of.append(entries)
                if k is not None:
                    shown = [None] + self._entries(prompt[1:], prompt_law, k, as_ids) + entries if echo else entries
                    choice["logprobs"] = _legacy_logprobs(shown)
                if k_prompt is not None:
                    choice["prompt_logprobs"] = [None] + [_vllm_prompt_entry(self.tokenizer, t, law, k_prompt)
                                                          for t, law in zip(prompt[1:], prompt_law, strict=True)]
                if body.get("return_token_ids") and self.token_ids:
                    choice["token_ids"], choice["prompt_token_ids"] = f.tokens, prompt
                choices.append(choice)
        prompt_tokens = sum(len(p) * n for p in prompts)
        completion_tokens = sum(len(f.tokens) for rows in done for f in rows)
        reply = {"id": f"cmpl-{os.urandom(8).hex()}", "object": "text_completion", "created": int(time.time()),
                 "model": self.model_name, "choices": choices,
                 "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                           "total_tokens": prompt_tokens + completion_tokens}}
        if not stream:
            return reply
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return Stream(self._chunks(reply, [f for rows in done for f in rows], entries_of, include_usage))

    def _stops(self, body: dict, max_tokens: int):
        from harness.served.bookkeeping import Stops

        try:
            return Stops.from_request(body, max_tokens, self.eos)
        except ValueError as exc:
            raise RequestError(str(exc)) from None

    def _finished(self, prompts: list[list[int]], n: int, stops, sampling: Sampling, seed: int) -> list[list]:
        """Per prompt, its n choices as `bookkeeping` returns them (harness.served.bookkeeping.Finished)."""
        steps = self.generate(prompts, n, self.bookkeeping.budget(stops.max_tokens, self.gamma), sampling, seed,
                              self.bookkeeping.masked(stops))
        return [[self.bookkeeping.finish(s, stops, self._decode) for s in rows] for rows in steps]

    def _decode(self, ids: list[int]) -> str:
        return decode(self.tokenizer, ids)

    def _chunks(self, reply: dict, finished: list, entries_of: list, include_usage: bool) -> list[dict]:
        """The SSE events of a completion: per choice, one delta per speculative step (its token ids, its text,
        its logprobs), finish_reason on the last; then the usage event where `stream_options.include_usage`."""
        from harness.served.bookkeeping import text_deltas

        head = {k: reply[k] for k in ("id", "object", "created", "model")}
        events = []
        for choice, f, entries in zip(reply["choices"], finished, entries_of, strict=True):
            slices = self.bookkeeping.deltas(f)
            texts = text_deltas(f.tokens, f.text, slices, self._decode)
            for j, ((a, b), text) in enumerate(zip(slices, texts, strict=True)):
                last = j == len(slices) - 1
                delta = {"index": choice["index"], "text": text, "logprobs": None,
                         "finish_reason": f.reason if last else None, "stop_reason": f.stop_reason if last else None}
                if entries is not None:
                    delta["logprobs"] = _legacy_logprobs(entries[a:b])
                if "token_ids" in choice:
                    delta["token_ids"] = f.tokens[a:b]
                events.append({**head, "choices": [delta], "usage": None})
        if include_usage:
            events.append({**head, "choices": [], "usage": reply["usage"]})
        return events

    def pieces_completion(self, body: dict) -> dict:
        """The llama-cpp-python dialect's completion (see the module docstring)."""
        if not isinstance(body.get("prompt"), str):
            raise RequestError("prompt must be a string (this server's completion route takes text)")
        sampling = _sampling(body)
        _int(body, "n", 1, 1, 1)
        max_tokens, k = _int(body, "max_tokens", 16, 1, 4096), self._k(body.get("logprobs"), "logprobs")
        prompt = encode(self.tokenizer, body["prompt"])
        self.check_ids(prompt)
        (steps,), = self.generate([prompt], 1, max_tokens, sampling, self.bookkeeping.seed(_seed(body)))
        row = [t for step in steps for t in step]
        pieces = [self.pieces.token_bytes[t].decode("utf-8", errors="ignore") for t in row]
        choice = {"index": 0, "text": b"".join(self.pieces.token_bytes[t] for t in row).decode("utf-8", errors="ignore"),
                  "finish_reason": self._finish(row), "logprobs": None}
        if k is not None:
            (law,) = self.reported_laws([prompt + row], [len(prompt)], sampling)
            entries = self._entries(row, law, k, as_ids=False)
            for entry, piece in zip(entries, pieces, strict=True):
                entry["top"] = {piece: entry["logprob"]}
                entry["token"] = piece
            choice["logprobs"] = _legacy_logprobs(entries)
        return {"id": f"cmpl-{os.urandom(8).hex()}", "object": "text_completion", "created": int(time.time()),
                "model": body.get("model"), "choices": [choice],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(row),
                          "total_tokens": len(prompt) + len(row)}}

    def extras_tokenize(self, body: dict) -> dict:
        return {"tokens": encode(self.tokenizer, str(body.get("input", "")))}

    def chat(self, body: dict) -> dict:
        self._check_model(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise RequestError("messages must be a non-empty list of {role, content} objects")
        if isinstance(self.tokenizer, IdTokenizer) or not getattr(self.tokenizer, "chat_template", None):
            prompt = [t for m in messages for t in encode(self.tokenizer, str(m.get("content", "")))]
        else:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            prompt = encode(self.tokenizer, text)
        self.check_ids(prompt)
        sampling = self._constrained(_sampling(body), body)
        n = _int(body, "n", 1, 1, self.max_n)
        max_tokens = _int(body, "max_completion_tokens", None, 1, 4096) or _int(body, "max_tokens", 16, 1, 4096)
        k = self._k(body.get("top_logprobs") or 0, "top_logprobs") if body.get("logprobs") else None
        as_ids = bool(body.get("return_tokens_as_token_ids")) and self.token_ids
        if body.get("stream") and ((body.get("tools") and self.tool_call_tokens is None) or body.get("response_format")):
            raise RequestError("stream=true with tools (without --tool-call-tokens) or response_format is not "
                               "supported by specdec serve")
        tools = self.tool_call_tokens is not None and bool(body.get("tools")) and body.get("tool_choice") != "none"
        done = self._finished([prompt], n, self._stops(body, max_tokens), sampling, self.bookkeeping.seed(_seed(body)))[0]
        rows = [f.tokens for f in done]
        laws = self.reported_laws([prompt + r for r in rows], [len(prompt)] * n, sampling) if k is not None else None
        choices, entries_of = [], []
        for i, (row, f) in enumerate(zip(rows, done, strict=True)):
            message = {"role": "assistant", "content": f.text}
            if self.reasoning_end is not None:
                from harness.served.bookkeeping import split_reasoning

                message["reasoning_content"], message["content"] = split_reasoning(row, f.text, self.reasoning_end,
                                                                                   self._decode)
            if tools:
                from harness.served.bookkeeping import parse_tool_calls

                message["content"], calls = parse_tool_calls(row, f.text, self.tool_call_tokens, self._decode,
                                                             self._content_start(row))
                message["tool_calls"] = [{"id": f"call_{os.urandom(6).hex()}", "type": "function",
                                          "function": {"name": c.name, "arguments": f.text[slice(*c.arguments)]}}
                                         for c in calls]
            reason = self.bookkeeping.chat_finish_reason(f, len(calls), streamed=False) if tools else f.reason
            choice = {"index": i, "message": message, "finish_reason": reason, "stop_reason": f.stop_reason,
                      "logprobs": None}
            entries_of.append([_chat_entry(e) for e in self._entries(row, laws[i], k, as_ids)] if k is not None
                              else None)
            if k is not None:
                choice["logprobs"] = {"content": entries_of[-1]}
            if body.get("return_token_ids") and self.token_ids:
                choice["token_ids"], choice["prompt_token_ids"] = row, prompt
            choices.append(choice)
        used = sum(map(len, rows))
        reply = {"id": f"chatcmpl-{os.urandom(8).hex()}", "object": "chat.completion", "created": int(time.time()),
                 "model": self.model_name, "choices": choices,
                 "usage": {"prompt_tokens": len(prompt), "completion_tokens": used, "total_tokens": len(prompt) + used}}
        if not body.get("stream"):
            return reply
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return Stream(self._chat_chunks(reply, done, entries_of, include_usage, tools))

    def _content_start(self, row: list[int]) -> int:
        """The first token of a reply's content: after the reasoning where the server parses it (none ended: no
        content), else the first."""
        if self.reasoning_end is None:
            return 0
        return row.index(self.reasoning_end) + 1 if self.reasoning_end in row else len(row)

    def _chat_chunks(self, reply: dict, finished: list, entries_of: list, include_usage: bool,
                     tools: bool = False) -> list[dict]:
        """The SSE events of a chat completion: per choice, a first delta with the role, then one delta per
        speculative step (its content, reasoning_content where the server parses reasoning, tool_calls where it
        parses tool calls, token ids and logprobs), finish_reason on the last; then the usage event where
        `stream_options.include_usage`."""
        from harness.served.bookkeeping import text_deltas

        head = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"],
                "model": reply["model"]}
        events = []
        for choice, f, entries in zip(reply["choices"], finished, entries_of, strict=True):
            events.append({**head, "choices": [{"index": choice["index"], "delta": {"role": "assistant", "content": ""},
                                                "logprobs": None, "finish_reason": None}], "usage": None})
            slices = self.bookkeeping.deltas(f)
            texts = text_deltas(f.tokens, f.text, slices, self._decode)
            parts = (self.bookkeeping.stream_parts(f, slices, texts, self.reasoning_end, self._decode)
                     if self.reasoning_end is not None else None)
            calls = (self.bookkeeping.stream_tool_calls(f, slices, texts, [p[1] for p in parts] if parts else texts,
                                                        self._content_start(f.tokens), self.tool_call_tokens,
                                                        self._decode) if tools else None)
            reason = (self.bookkeeping.chat_finish_reason(f, len({e["index"] for c in calls for e in c[1]}), True)
                      if calls is not None else f.reason)  # the calls the stream's parser sent
            for j, ((a, b), text) in enumerate(zip(slices, texts, strict=True)):
                last = j == len(slices) - 1
                delta = {"content": text} if parts is None else {"reasoning_content": parts[j][0],
                                                                  "content": parts[j][1]}
                if calls is not None:
                    delta["content"] = calls[j][0]
                    if calls[j][1]:
                        delta["tool_calls"] = calls[j][1]
                out = {"index": choice["index"], "delta": delta, "logprobs": None,
                       "finish_reason": reason if last else None, "stop_reason": f.stop_reason if last else None}
                if entries is not None:
                    out["logprobs"] = {"content": entries[a:b]}
                if "token_ids" in choice:
                    out["token_ids"] = f.tokens[a:b]
                events.append({**head, "choices": [out], "usage": None})
        if include_usage:
            events.append({**head, "choices": [], "usage": reply["usage"]})
        return events

    def _constrained(self, sampling: Sampling, body: dict) -> Sampling:
        """The request's structured-output constraint (harness.served.structured names), compiled for the pair."""
        from harness.check.structured import compile_for_pair
        from harness.served.structured import request_constraint

        try:
            found = request_constraint(body)
            if found is None:
                return sampling
            constraint = compile_for_pair(found[1], self.pair)
        except HarnessError as exc:
            raise RequestError(str(exc)) from None
        return dataclasses.replace(sampling, extras={**sampling.extras, "constraint": constraint})

    def tokenize(self, body: dict) -> dict:
        if body.get("model") not in (None, self.model_name):
            self._check_model(body)
        tokens = self.prompt_ids(body.get("prompt", ""))[0] if body.get("prompt") else []
        return {"tokens": tokens, "count": len(tokens), "max_model_len": _max_len(self.pair.target)}

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "specdec",
                                            "max_model_len": _max_len(self.pair.target)}]}

    def metrics(self) -> str:
        c = self.counters
        per_call = c.row_tokens / c.target_calls if c.target_calls else float("nan")
        lines = ["# HELP specdec_speculative_decoding_enabled 1 when drafts are verified, 0 for the target alone",
                 f"specdec_speculative_decoding_enabled {int(self.speculative)}",
                 f"specdec_num_requests_total {c.requests}",
                 f"specdec_generation_tokens_total {c.generated_tokens}",
                 f"specdec_target_forward_calls_total {c.target_calls}",
                 "# HELP specdec_tokens_per_target_call mean new tokens per row per target pass (1 without speculation)",
                 f"specdec_tokens_per_target_call {per_call}"]
        return "\n".join(lines) + "\n"

    def _check_model(self, body: dict) -> None:
        if body.get("model") != self.model_name:
            raise RequestError(f"The model `{body.get('model')}` does not exist. Served: {self.model_name}", 404)

    def _k(self, value, name: str) -> int | None:
        if value is None or value is False or not self.logprobs:
            return None
        k = int(value)
        if not 0 <= k <= self.max_logprobs:
            raise RequestError(f"{name} must be in [0, {self.max_logprobs}] (--max-logprobs), got {k}")
        return k

    def _finish(self, row: list[int]) -> str:
        return "stop" if row and row[-1] in self.eos else "length"

    def _entries(self, tokens: list[int], law: np.ndarray, k: int, as_ids: bool) -> list[dict]:
        """Per token: its name, logprob, and the top-k (plus itself, as vLLM does) as {name: logprob}."""
        out = []
        for tok, row in zip(tokens, law, strict=True):
            top = np.argsort(-row, kind="stable")[:k].tolist()
            shown = top + ([tok] if tok not in top else [])
            out.append({"token": token_name(self.tokenizer, tok, as_ids), "logprob": _finite(row[tok]),
                        "top": {token_name(self.tokenizer, t, as_ids): _finite(row[t]) for t in shown}})
        return self.logprobs_writer.written(out)


def _chat_entry(e: dict) -> dict:
    """A chat logprobs entry (OpenAI: token, logprob, bytes, top_logprobs as a list)."""
    return {"token": e["token"], "logprob": e["logprob"], "bytes": None,
            "top_logprobs": [{"token": t, "logprob": lp} for t, lp in e["top"].items()]}


def _legacy_logprobs(entries: list[dict | None]) -> dict:
    """The OpenAI completions `logprobs` object (tokens, token_logprobs, top_logprobs, text_offset)."""
    offsets, at = [], 0
    for e in entries:
        offsets.append(at)
        at += len(e["token"]) if e else 0
    return {"tokens": [e["token"] if e else None for e in entries],
            "token_logprobs": [e["logprob"] if e else None for e in entries],
            "top_logprobs": [e["top"] if e else None for e in entries], "text_offset": offsets}


def _vllm_prompt_entry(tokenizer, token: int, law: np.ndarray, k: int) -> dict:
    """vLLM's prompt_logprobs entry: {str(id): {logprob, rank, decoded_token}} for the actual token + top k."""
    top = np.argsort(-law, kind="stable")[:k].tolist()
    ids = top + ([token] if token not in top else [])
    return {str(t): {"logprob": _finite(law[t]), "rank": int((law > law[t]).sum()) + 1,
                     "decoded_token": decode(tokenizer, [t])} for t in ids}


def _split(row: list[int], sizes: list[int]) -> list[list[int]]:
    """A row cut into its steps (sizes sum to len(row))."""
    out, at = [], 0
    for size in sizes:
        out.append(row[at : at + size])
        at += size
    return out


def _finite(x: float) -> float:
    return float(x) if np.isfinite(x) else MASKED_LOGPROB


def _int(body: dict, key: str, default, lo: int, hi: int):
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise RequestError(f"{key} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _sampling(body: dict) -> Sampling:
    try:
        s = Sampling.from_request(body)
    except (TypeError, ValueError) as exc:
        raise RequestError(f"bad sampling parameters: {exc}") from exc
    from specdec_ref.processing import check_sampling_params

    try:
        check_sampling_params(s.temperature, s.top_k, s.top_p)
    except ValueError as exc:
        raise RequestError(str(exc)) from exc
    return s


def _seed(body: dict) -> int | None:
    """The request's seed (None: unseeded)."""
    seed = body.get("seed")
    if seed is None:
        return None
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise RequestError(f"seed must be an integer, got {seed!r}")
    return seed


def _max_len(model) -> int | None:
    return getattr(getattr(model, "config", None), "max_position_embeddings", None)


def build_app(backend: GenerationBackend):
    """The FastAPI app: thin routes over the backend; errors as OpenAI error bodies."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

    app = FastAPI(title="specdec serve", docs_url=None, redoc_url=None)

    def error(message: str, status: int) -> JSONResponse:
        kind = {404: "NotFoundError", 500: "server_error", 503: "service_unavailable"}.get(status,
                                                                                      "invalid_request_error")
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    def route(handler):
        async def endpoint(request: Request):
            try:
                body = await request.json()
            except ValueError:
                return error("the request body is not valid JSON", 400)
            if not isinstance(body, dict):
                return error("the request body must be a JSON object", 400)
            try:  # the model runs in a worker thread: the event loop keeps serving /health and /metrics
                from starlette.concurrency import run_in_threadpool

                reply = await run_in_threadpool(backend.handled(handler), body)
                if isinstance(reply, Stream):
                    return StreamingResponse(reply.lines(), media_type="text/event-stream")
                return JSONResponse(reply)
            except RequestError as exc:
                return error(str(exc), exc.status)
            except Exception as exc:  # noqa: BLE001 - the implementation under test raised: a 500, said plainly
                from specdec_ref.errors import SpecDecInputError

                if backend.stopping.is_set():  # the abort, however the implementation wrapped it
                    stopping = ServerStopping()
                    return error(str(stopping), stopping.status)
                status = 400 if isinstance(exc, SpecDecInputError) else 500
                return error(f"{type(exc).__name__}: {exc}", status)
        endpoint.__annotations__ = {"request": Request}  # postponed annotations would hide the local import
        return endpoint

    app.post("/v1/completions")(route(backend.completion))
    app.post("/v1/chat/completions")(route(backend.chat))
    if backend.dialect == "llama-cpp-python":
        app.post("/extras/tokenize")(route(backend.extras_tokenize))
    else:
        app.post("/tokenize")(route(backend.tokenize))
    app.get("/v1/models")(backend.models)
    app.get("/health")(lambda: {"status": "ok"})
    app.get("/metrics")(lambda: PlainTextResponse(backend.metrics()))
    return app


@dataclasses.dataclass
class Served:
    url: str  # http://127.0.0.1:PORT (no /v1)
    backend: GenerationBackend
    stop: Callable[[], None]  # stops the server now (a test can kill it mid-run)


@contextlib.contextmanager
def serving(impl: Callable, pair, *, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 30.0,
            **backend_options) -> Iterator[Served]:
    """Serve `impl` on `pair` in a background thread; always stopped on exit (generations in flight aborted,
    open connections not drained). port 0: a free port."""
    from harness.served import lifecycle

    backend = GenerationBackend(impl, pair, **backend_options)
    running = lifecycle.start(build_app(backend), backend, lifecycle.bind(host, port))

    def stop():
        running.server.force_exit = True  # abrupt: open connections are not drained
        running.stop(join_s=15)

    try:
        running.wait_started(startup_timeout_s)
        yield Served(f"http://{host}:{running.port}", backend, stop)
    finally:
        stop()


def serve_forever(impl: Callable, pair, *, host: str, port: int, max_requests: int | None = None,
                  startup_timeout_s: float = 60.0, **backend_options) -> int:
    """Blocking server for the CLI: runs until SIGTERM / SIGINT (or after `max_requests` requests), then stops
    within seconds (harness.served.lifecycle); returns the exit code, 0."""
    from harness.served import lifecycle

    if host not in ("127.0.0.1", "localhost", "::1"):
        raise HarnessError(f"specdec serve listens on localhost only (got --host {host}): it runs untrusted code")
    backend = GenerationBackend(impl, pair, **backend_options)
    running = lifecycle.start(build_app(backend), backend, lifecycle.bind(host, port), max_requests=max_requests)
    running.wait_started(startup_timeout_s)
    return lifecycle.run_until_stopped(running)
