"""The engine behind `specdec serve` (`GenerationBackend`): one model pair and one §1b implementation, generation
(the steps of each row, the bookkeeping's stops), teacher-forced scoring for the logprobs (`LogprobsWriter`, or a
planted logprob bug), the request pieces every route shares, and /tokenize, /v1/models and /metrics. Its
completion, chat and streaming routes are its parts in harness.served.serve.completions, .chat and .streaming."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import numpy as np
import torch

from harness.errors import HarnessError
from harness.served.serve.chat import ChatRoutes
from harness.served.serve.completions import CompletionRoutes
from harness.served.serve.entries import finite
from harness.served.serve.request import RequestError, Sampling, ServerStopping
from harness.served.serve.streaming import StreamEvents
from harness.served.text import decode, encode, token_name, tokenizer_for
from specdec_ref.generate import default_eos, eos_set
from specdec_ref.processing import logits_to_probs

LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")
DIALECTS = ("openai", "llama-cpp-python")
SCORE_ROWS = 64  # rows per teacher-forcing pass
SCORE_FLOATS = 2**24  # ... and at most this many float64 logits per pass (128 MiB: V = 50k stays in memory)


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


@dataclasses.dataclass
class Counters:
    """What /metrics reports; guarded by the backend's lock."""

    requests: int = 0
    target_calls: int = 0  # batched target forward passes spent generating
    row_tokens: float = 0.0  # Σ over requests of the mean new tokens per row
    generated_tokens: int = 0


class GenerationBackend(CompletionRoutes, ChatRoutes, StreamEvents):
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
            out.append({"token": token_name(self.tokenizer, tok, as_ids), "logprob": finite(row[tok]),
                        "top": {token_name(self.tokenizer, t, as_ids): finite(row[t]) for t in shown}})
        return self.logprobs_writer.written(out)


def _split(row: list[int], sizes: list[int]) -> list[list[int]]:
    """A row cut into its steps (sizes sum to len(row))."""
    out, at = [], 0
    for size in sizes:
        out.append(row[at : at + size])
        at += size
    return out


def _max_len(model) -> int | None:
    return getattr(getattr(model, "config", None), "max_position_embeddings", None)
