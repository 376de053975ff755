"""The API check's choice of requests on a base continuation and its steps: stop strings and stop token ids that land
inside (or across) accepted multi-token steps, max_tokens that cut a step, min_tokens with a stop string, the stop ids
of the min_tokens requests; and where an end condition falls among the steps (`placement`). No request is sent here."""

from __future__ import annotations

from harness.served.bookkeeping import Bookkeeping, Stops

MIN_TOKENS_STOP_IDS = 3  # the stop ids of those: the most frequent tokens of the base continuations


def token_steps(steps: list[int]) -> list[int]:
    """Step index of each token."""
    return [k for k, size in enumerate(steps) for _ in range(size)]


def new_suffix(tokens: list[int], pos: int, decode_, longer_than: int = 0) -> str | None:
    """The shortest non-blank suffix (longer than `longer_than` characters) of the text of tokens[:pos + 1]
    whose first occurrence there ends at its end: a stop string the correct engine stops at on token `pos`."""
    text = decode_(tokens[: pos + 1])
    for n in range(longer_than + 1, len(text) + 1):
        cand = text[-n:]
        if cand.strip() and text.find(cand) == len(text) - n:
            return cand
    return None


def stop_cases(tokens: list[int], steps: list[int] | None, capped: bool, eos: set[int],
               decode_) -> list[tuple[str, dict]]:
    """(kind, request fields) of the stop requests chosen on a base continuation and its steps (None: unknown)."""
    if not tokens:
        return []
    if steps is None or max(steps) < 2:  # no multi-token step seen: positions spread over the continuation
        return _spread_cases(tokens, eos, decode_)
    starts = [sum(steps[:k]) for k in range(len(steps))]

    def suffix(pos: int, longer_than: int = 0) -> str | None:  # never on EOS: that token ends the reply anyway
        return None if tokens[pos] in eos else new_suffix(tokens, pos, decode_, longer_than)

    by_size = sorted(range(len(steps)), key=lambda k: (-steps[k], k))
    out = []
    for k in by_size:  # a stop string that ends before the last token of its step: earliest in the longest step
        found = next((c for pos in range(starts[k], starts[k] + steps[k] - 1)
                      if (c := suffix(pos))), None)
        if steps[k] >= 2 and found:
            out.append(("stop_in_step", {"stop": [found]}))
            break
    for k in range(1, len(steps)):  # a stop string that starts in one step and ends in the next
        b = starts[k]
        piece = len(decode_(tokens[: b + 1])) - len(decode_(tokens[:b]))
        found = suffix(b, longer_than=piece)
        if found:
            out.append(("stop_across_steps", {"stop": [found]}))
            break
    if capped and steps[-1] >= 2:  # inside the step that reaches max_tokens
        found = suffix(starts[-1])
        if found:
            out.append(("stop_in_cap_step", {"stop": [found]}))
    for k in by_size:  # a stop token id before the last token of its step (its first occurrence)
        pos = next((p for p in range(starts[k], starts[k] + steps[k] - 1)
                    if tokens[p] not in tokens[:p] and tokens[p] not in eos), None)
        if steps[k] >= 2 and pos is not None:
            out.append(("stop_token_in_step", {"stop_token_ids": [tokens[pos]]}))
            break
    return out


def _spread_cases(tokens: list[int], eos: set[int], decode_) -> list[tuple[str, dict]]:
    out = []
    for pos in sorted({len(tokens) // 3, (2 * len(tokens)) // 3}):
        cand = None if tokens[pos] in eos else new_suffix(tokens, pos, decode_)
        if cand:
            out.append(("stop_string", {"stop": [cand]}))
    pos = next((p for p in range(len(tokens) // 2, len(tokens)) if tokens[p] not in tokens[:p] and tokens[p] not in eos),
               None)
    if pos is not None:
        out.append(("stop_token", {"stop_token_ids": [tokens[pos]]}))
    return out


def caps(steps: list[int] | None, length: int) -> list[int]:
    """max_tokens that cut a step: 1, and one token into the longest step (below the base's cap)."""
    out = {1}
    if steps:
        k = max(range(len(steps)), key=lambda j: (steps[j], -j))
        if steps[k] >= 2:
            out.add(sum(steps[:k]) + 1)
    return sorted(c for c in out if c < length)


def min_tokens_cases(tokens: list[int], steps: list[int] | None, eos: set[int], decode_) -> list[tuple[str, dict]]:
    """min_tokens requests chosen on a base continuation (stop strings that the correct engine ends at or skips):

    - `min_tokens_stop`: min_tokens = c − 1 and a stop string completing at token c, where the first c − 1 steps
      held at least c tokens: an engine that counts min_tokens in steps does not end there yet;
    - `min_tokens_skip`: a stop string completing at token c <= min_tokens = c + 1: it must not end the reply.
    Where the model has an EOS, min_tokens changes the draws (EOS masked), so these replies are judged on their own
    tokens, not against the base."""
    out, text_at = [], [len(decode_(tokens[:c])) for c in range(len(tokens) + 1)]
    usable = [c for c in range(1, len(tokens)) if tokens[c - 1] not in eos and text_at[c] > text_at[c - 1]]
    if steps:
        for c in usable:
            if c >= 2 and sum(steps[: c - 1]) >= c and (found := new_suffix(tokens, c - 1, decode_)):
                out.append(("min_tokens_stop", {"stop": [found], "min_tokens": c - 1}))
                break
    for c in usable:
        if c + 1 < len(tokens) and (found := new_suffix(tokens, c - 1, decode_)):
            out.append(("min_tokens_skip", {"stop": [found], "min_tokens": c + 1}))
            break
    return out


def stops_of(body: dict, eos: set[int]) -> Stops:
    return Stops.from_request(body, body["max_tokens"], eos)


def placement(tokens: list[int], steps: list[int], stops: Stops, decode_) -> dict | None:
    """Where the first end condition falls in a base continuation: {inside, across} (None: nowhere)."""
    done = Bookkeeping().finish([[t] for t in tokens], stops, decode_)
    if done.reason != "stop" or len(done.tokens) > sum(steps):
        return None
    step_of, end = token_steps(steps), len(done.tokens) - 1
    start = end
    if isinstance(done.stop_reason, str):  # the token holding the stop string's first character
        at = len(done.text)
        start = next(j for j in range(len(tokens)) if len(decode_(tokens[: j + 1])) > at)
    inside = end + 1 < len(step_of) and step_of[end + 1] == step_of[end]
    return {"inside": inside, "across": step_of[start] != step_of[end]}


def frequent_tokens(continuations: list[list[int]], eos: set[int], k: int = MIN_TOKENS_STOP_IDS) -> list[int]:
    """The k most frequent tokens of the base continuations, EOS excluded (ties: the smaller id): stop ids that a
    correct engine draws often past min_tokens, so that masking them too long shows."""
    counts: dict[int, int] = {}
    for ids in continuations:
        for t in ids:
            if t not in eos:
                counts[t] = counts.get(t, 0) + 1
    return sorted(sorted(counts), key=lambda t: -counts[t])[:k]
