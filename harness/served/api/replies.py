"""The API check's reading of what an engine returns: a completion (one choice or n), a chat completion, and the
server-sent events of a completion or chat stream (deltas concatenated, tokens per delta, the steps a stream tags),
each as a `Reply`."""

from __future__ import annotations

from harness.check.driver import MalformedTrials
from harness.served.api.records import Reply


def parse_reply(reply: dict, base: str) -> Reply:
    from harness.served.probe import choice_token_ids

    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise MalformedTrials(f"{base} replied without the one choice asked for")
    choice, lp = choices[0], choices[0].get("logprobs") or {}
    usage = (reply.get("usage") or {}).get("completion_tokens")
    return Reply(choice_token_ids(choice), str(choice.get("text") or ""), choice.get("finish_reason"), usage,
                 lp.get("tokens"), lp.get("token_logprobs"))


def parse_choices(reply: dict, n: int, base: str) -> list[Reply]:
    """The n choices of one reply, each with usage = its own token count where usage.completion_tokens equals their
    sum (else the reply's total, which the usage test then rejects)."""
    from harness.served.probe import choice_token_ids

    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or len(choices) != n or not all(isinstance(c, dict) for c in choices):
        raise MalformedTrials(f"{base} replied without the {n} choices asked for")
    choices = sorted(choices, key=lambda c: c.get("index", 0))
    total = (reply.get("usage") or {}).get("completion_tokens")
    out = []
    for choice in choices:
        lp = choice.get("logprobs") or {}
        out.append(Reply(choice_token_ids(choice), str(choice.get("text") or ""), choice.get("finish_reason"), None,
                         lp.get("tokens"), lp.get("token_logprobs")))
    exact = all(r.ids is not None for r in out) and total == sum(len(r.ids) for r in out)
    for r in out:
        r.usage = len(r.ids) if exact else total
    return out


def _reasoning_of(part: dict) -> str | None:
    value = part.get("reasoning_content", part.get("reasoning"))
    return None if value is None else str(value)


def parse_chat(reply: dict, base: str) -> Reply:
    """A chat reply's one choice: content, reasoning, token ids (where returned), finish_reason, usage."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise MalformedTrials(f"{base} replied to a chat request without the one choice asked for")
    choice = choices[0]
    message = choice.get("message") or {}
    ids = choice.get("token_ids")
    calls = [((c.get("function") or {}).get("name") or "", (c.get("function") or {}).get("arguments") or "")
             for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    return Reply(list(ids) if isinstance(ids, list) else None, str(message.get("content") or ""),
                 choice.get("finish_reason"), (reply.get("usage") or {}).get("completion_tokens"), None, None,
                 reasoning=_reasoning_of(message), tool_calls=calls)


def parse_chat_stream(streamed: dict) -> Reply:
    """A chat stream's deltas of choice 0 concatenated (content, reasoning, token ids, tool calls: each call's
    name and arguments pieces joined by its index), tokens per delta."""
    ids, text, reasoning, deltas, reason, usage, has_ids, any_reasoning = [], [], [], [], None, None, True, False
    calls: dict[int, list[str]] = {}
    tool_delta = None
    for event in streamed["events"]:
        if isinstance(event.get("usage"), dict):
            usage = event["usage"].get("completion_tokens")
        for choice in event.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            got = choice.get("token_ids")
            entries = [e for e in delta.get("tool_calls") or [] if isinstance(e, dict)]
            if got is None and (delta.get("content") or _reasoning_of(delta) or entries):
                has_ids = False
            for e in entries:
                call = calls.setdefault(int(e.get("index", 0)), ["", ""])
                call[0] += (e.get("function") or {}).get("name") or ""
                call[1] += (e.get("function") or {}).get("arguments") or ""
            if entries and tool_delta is None:
                tool_delta = len(got or [])
            ids += got or []
            text.append(str(delta.get("content") or ""))
            part = _reasoning_of(delta)
            any_reasoning = any_reasoning or part is not None
            reasoning.append(part or "")
            if got:
                deltas.append(len(got))
            reason = choice.get("finish_reason") or reason
    return Reply(ids if has_ids else None, "".join(text), reason, usage, None, None, deltas,
                 streamed.get("done", False), "".join(reasoning) if any_reasoning else None,
                 [tuple(calls[k]) for k in sorted(calls)], tool_delta)


def parse_stream(streamed: dict) -> Reply:
    """A stream's deltas of choice 0 concatenated: ids, text, logprobs; the last finish_reason; the usage event."""
    from harness.served.probe import choice_token_ids

    ids, text, names, values, deltas, reason, usage, has_ids = [], [], [], [], [], None, None, True
    tagged: list | None = []  # (step, tokens) of every event carrying tokens, None: some event has no step
    for event in streamed["events"]:
        if isinstance(event.get("usage"), dict):
            usage = event["usage"].get("completion_tokens")
        for choice in event.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            got = choice_token_ids(choice) if (choice.get("token_ids") or choice.get("logprobs")) else []
            has_ids = has_ids and got is not None
            ids += got or []
            text.append(str(choice.get("text") or ""))
            lp = choice.get("logprobs") or {}
            names += lp.get("tokens") or []
            values += lp.get("token_logprobs") or []
            if got:
                deltas.append(len(got))
                if tagged is not None and isinstance(choice.get("step"), int):
                    tagged.append((choice["step"], len(got)))
                else:
                    tagged = None
            reason = choice.get("finish_reason") or reason
    steps = None
    if tagged:
        steps = []
        for k, (step, size) in enumerate(tagged):
            if k and step == tagged[k - 1][0]:
                steps[-1] += size
            else:
                steps.append(size)
    return Reply(ids if has_ids else None, "".join(text), reason, usage, names or None, values or None, deltas,
                 streamed.get("done", False), steps=steps)
