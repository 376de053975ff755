"""`stream: true` on `specdec serve`: a reply sent as server-sent events (`Stream`), and the events of a completion
and of a chat completion, one delta per speculative step (`StreamEvents`, a part of GenerationBackend)."""

from __future__ import annotations

from harness.served.serve.entries import legacy_logprobs


class Stream:
    """A reply sent as server-sent events (`stream: true`): each event one `data:` line, then `data: [DONE]`."""

    def __init__(self, events: list[dict]):
        self.events = events

    def lines(self):
        import json

        for event in self.events:
            yield f"data: {json.dumps(event)}\n\n"
        yield "data: [DONE]\n\n"


class StreamEvents:
    """The SSE events of a reply, built by the backend (harness.served.serve.backend.GenerationBackend) from what it
    has: `bookkeeping` (the step deltas, reasoning and tool-call parts), `_decode`, `reasoning_end`,
    `tool_call_tokens` and `_content_start` (harness.served.serve.chat)."""

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
                    delta["logprobs"] = legacy_logprobs(entries[a:b])
                if "token_ids" in choice:
                    delta["token_ids"] = f.tokens[a:b]
                events.append({**head, "choices": [delta], "usage": None})
        if include_usage:
            events.append({**head, "choices": [], "usage": reply["usage"]})
        return events

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
