"""`/v1/completions` on `specdec serve` (`CompletionRoutes`, a part of GenerationBackend): the OpenAI / vLLM
completion (token ids, logprobs, prompt_logprobs, echo, n, stops, streamed or not), and the llama-cpp-python
dialect's completion and `/extras/tokenize`."""

from __future__ import annotations

import os
import time

import numpy as np

from harness.served.serve.entries import legacy_logprobs, vllm_prompt_entry
from harness.served.serve.request import RequestError, int_field, sampling_of, seed_of
from harness.served.serve.streaming import Stream
from harness.served.text import decode, encode


class CompletionRoutes:
    """The completion routes of the backend (harness.served.serve.backend.GenerationBackend): they generate and
    score through it (`_finished`, `generate`, `reported_laws`, `log_laws`, `_entries`) and stream through
    `_chunks` (harness.served.serve.streaming)."""

    def completion(self, body: dict) -> dict | Stream:
        if self.pieces is not None:
            return self.pieces_completion(body)
        self._check_model(body)
        sampling = self._constrained(sampling_of(body), body)
        n, max_tokens = int_field(body, "n", 1, 1, self.max_n), int_field(body, "max_tokens", 16, 1, 4096)
        k = self._k(body.get("logprobs"), "logprobs")
        k_prompt = self._k(body.get("prompt_logprobs"), "prompt_logprobs")
        as_ids, echo = bool(body.get("return_tokens_as_token_ids")) and self.token_ids, bool(body.get("echo"))
        stream = bool(body.get("stream"))
        if stream and (echo or k_prompt is not None):
            raise RequestError("stream=true with echo or prompt_logprobs is not supported by specdec serve")
        stops = self._stops(body, max_tokens)
        seed = self.bookkeeping.seed(seed_of(body))
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
                    choice["logprobs"] = legacy_logprobs(shown)
                if k_prompt is not None:
                    choice["prompt_logprobs"] = [None] + [vllm_prompt_entry(self.tokenizer, t, law, k_prompt)
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

    def pieces_completion(self, body: dict) -> dict:
        """The llama-cpp-python dialect's completion (see the module docstring)."""
        if not isinstance(body.get("prompt"), str):
            raise RequestError("prompt must be a string (this server's completion route takes text)")
        sampling = sampling_of(body)
        int_field(body, "n", 1, 1, 1)
        max_tokens, k = int_field(body, "max_tokens", 16, 1, 4096), self._k(body.get("logprobs"), "logprobs")
        prompt = encode(self.tokenizer, body["prompt"])
        self.check_ids(prompt)
        (steps,), = self.generate([prompt], 1, max_tokens, sampling, self.bookkeeping.seed(seed_of(body)))
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
            choice["logprobs"] = legacy_logprobs(entries)
        return {"id": f"cmpl-{os.urandom(8).hex()}", "object": "text_completion", "created": int(time.time()),
                "model": body.get("model"), "choices": [choice],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(row),
                          "total_tokens": len(prompt) + len(row)}}

    def extras_tokenize(self, body: dict) -> dict:
        return {"tokens": encode(self.tokenizer, str(body.get("input", "")))}
