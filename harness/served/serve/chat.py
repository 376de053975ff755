"""`/v1/chat/completions` on `specdec serve` (`ChatRoutes`, a part of GenerationBackend): the chat template, the
reasoning parser (`reasoning_end`) and the tool-call parser (`tool_call_tokens`) on the reply, streamed or not."""

from __future__ import annotations

import os
import time

from harness.served.serve.entries import chat_entry
from harness.served.serve.request import RequestError, int_field, sampling_of, seed_of
from harness.served.serve.streaming import Stream
from harness.served.text import IdTokenizer, encode


class ChatRoutes:
    """The chat route of the backend (harness.served.serve.backend.GenerationBackend): it generates and scores
    through it (`_finished`, `reported_laws`, `_entries`) and streams through `_chat_chunks`
    (harness.served.serve.streaming)."""

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
        sampling = self._constrained(sampling_of(body), body)
        n = int_field(body, "n", 1, 1, self.max_n)
        max_tokens = int_field(body, "max_completion_tokens", None, 1, 4096) or int_field(body, "max_tokens", 16, 1, 4096)
        k = self._k(body.get("top_logprobs") or 0, "top_logprobs") if body.get("logprobs") else None
        as_ids = bool(body.get("return_tokens_as_token_ids")) and self.token_ids
        if body.get("stream") and ((body.get("tools") and self.tool_call_tokens is None) or body.get("response_format")):
            raise RequestError("stream=true with tools (without --tool-call-tokens) or response_format is not "
                               "supported by specdec serve")
        tools = self.tool_call_tokens is not None and bool(body.get("tools")) and body.get("tool_choice") != "none"
        done = self._finished([prompt], n, self._stops(body, max_tokens), sampling, self.bookkeeping.seed(seed_of(body)))[0]
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
            entries_of.append([chat_entry(e) for e in self._entries(row, laws[i], k, as_ids)] if k is not None
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
