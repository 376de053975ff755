"""llama-server's native `/completion` route for the API check (`--engine-checks api --api llama-server`).

llama-server's OpenAI routes return no token ids, and the tests of the API check read ids. Its native route does:
this client takes the API check's OpenAI-shaped completion requests and sends each as *one* native request, with
every field the check asks about sent natively (nothing emulated here, so a bug of the server stays its bug):

| OpenAI field (the check's) | native field | reply field read back |
|---|---|---|
| `max_tokens` | `n_predict` | |
| `return_token_ids` | `return_tokens` | `tokens` |
| `stop` (strings) | `stop` | `content` (cut at the stop), `stop_type` "word", `stopping_word` |
| `seed` | `seed` | |
| `logprobs` k | `n_probs` k | `completion_probabilities` |
| `n` | `n_cmpl` (its alias `n`) | one reply per completion (`index`) |
| `stream` | `stream` + `timings_per_token` | SSE partials, one token each; the last has `stop: true` |
| finish_reason | | `stop_type` eos / word -> "stop", limit -> "length" (and `stopped_eos` / `stopped_word` / `stopped_limit` where a server sends them: they must agree) |
| usage.completion_tokens | | `tokens_predicted` (summed over the `n_cmpl` completions) |

**Not offered** (`NOT_OFFERED`): `stop_token_ids` and `min_tokens` have no native field; a request that asks for
them is refused here (HTTP 400, as a server refuses a field it lacks) and the API check leaves their requests out
and says so in its report. `n` beyond the server's slots (`-np`, GET /props `total_slots`) is refused too:
llama-server defers a request whose `n_cmpl` children find no free slot, forever.

**Steps.** llama-server streams one token per event even when a speculative step accepted several. The tokens of
one step are emitted together after its verification, so they carry the same `timings` (`predicted_ms`, taken
once per step, and the draft counters `draft_n` / `draft_n_accepted`); a new step changes `predicted_ms`. With
`timings_per_token` every partial carries them: each translated event is tagged with its `step` (the index of the
step it belongs to), which `harness.served.api.parse_stream` reads as the speculative steps. The native stream has
no `data: [DONE]`: it is done when the final event (`stop: true`) came.
"""

from __future__ import annotations

from harness.served.client import CONSTRAINT_FIELDS, EngineClient, RequestRefused

NOT_OFFERED = {"stop_token_ids": "llama-server's /completion has no stop_token_ids (stop strings only)",
               "min_tokens": "llama-server's /completion has no min_tokens (n_indent / ignore_eos only)"}
FINISH = {"eos": "stop", "word": "stop", "limit": "length"}
FLAGS = {"stopped_eos": "eos", "stopped_word": "word", "stopped_limit": "limit"}  # older servers' booleans
SAMPLING = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "presence_penalty",
            "frequency_penalty", "logit_bias")


def native_body(payload: dict, slots: int | None = None) -> dict:
    """The native /completion request for an OpenAI-shaped completion request (RequestRefused: a field that is not
    offered, see NOT_OFFERED)."""
    asked = [k for k in NOT_OFFERED if payload.get(k)]
    if asked:
        raise RequestRefused(400, "; ".join(NOT_OFFERED[k] for k in asked))
    constrained = [k for k in CONSTRAINT_FIELDS if payload.get(k) is not None]
    if constrained or payload.get("echo") or payload.get("prompt_logprobs") is not None:
        raise RequestRefused(400, f"the llama-server API route sends no {', '.join(constrained) or 'prompt scoring'}")
    n = int(payload.get("n") or 1)
    if slots is not None and n > slots:
        raise RequestRefused(400, f"n = {n} exceeds the server's {slots} slots (-np): llama-server would defer the "
                             "request forever")
    body = {"prompt": payload["prompt"], "n_predict": int(payload.get("max_tokens", 16)), "return_tokens": True,
            "cache_prompt": False, "stream": bool(payload.get("stream"))}
    body.update({k: payload[k] for k in SAMPLING if payload.get(k) is not None})
    if payload.get("seed") is not None:
        body["seed"] = int(payload["seed"])
    if payload.get("stop"):
        stop = payload["stop"]
        body["stop"] = [stop] if isinstance(stop, str) else list(stop)
    if n > 1:
        body["n_cmpl"] = n
    k = payload.get("logprobs")
    if k is not None and k is not False:
        body["n_probs"] = max(1, int(k))
    if body["stream"]:
        body["timings_per_token"] = True
    return body


def finish_reason(reply: dict, stops: list[str]) -> str:
    """The OpenAI finish_reason of a native final reply; a reply whose end fields disagree with each other (or name
    a stop string that was not asked for) gets a reason that says so, which no finish_reason test accepts."""
    kind = reply.get("stop_type")
    word = reply.get("stopping_word") or ""
    wrong = [f"{flag} {reply[flag]!r}" for flag, of in FLAGS.items() if flag in reply and bool(reply[flag]) != (kind == of)]
    if kind == "word" and word not in stops:
        wrong.append(f"stopping_word {word!r} not among the stop strings asked for")
    if kind != "word" and word:
        wrong.append(f"stopping_word {word!r}")
    if wrong:
        return f"inconsistent end (stop_type {kind!r}, {', '.join(wrong)})"
    return FINISH.get(kind, f"stop_type {kind!r}")


def _logprobs(entries: list[dict]) -> dict:
    from harness.served.text import TOKEN_ID_PREFIX

    return {"tokens": [f"{TOKEN_ID_PREFIX}{e['id']}" for e in entries],
            "token_logprobs": [float(e.get("logprob", 0.0)) for e in entries],
            "top_logprobs": [{f"{TOKEN_ID_PREFIX}{t['id']}": float(t.get("logprob", 0.0))
                              for t in e.get("top_logprobs") or []} for e in entries]}


def _stops(payload: dict) -> list[str]:
    stop = payload.get("stop") or []
    return [stop] if isinstance(stop, str) else list(stop)


def openai_reply(native, payload: dict) -> dict:
    """A native non-streamed reply (one object, or a list of them for n_cmpl > 1) in the OpenAI completions shape."""
    replies = native if isinstance(native, list) else [native]
    if not all(isinstance(r, dict) and isinstance(r.get("tokens"), list) for r in replies):
        from harness.served.client import EngineError

        raise EngineError(f"llama-server /completion replied without `tokens` (return_tokens): {str(native)[:120]}")
    with_probs = payload.get("logprobs") is not None and payload.get("logprobs") is not False
    choices = [{"index": int(r.get("index", j)), "text": str(r.get("content") or ""),
                "token_ids": [int(t) for t in r["tokens"]], "finish_reason": finish_reason(r, _stops(payload)),
                "logprobs": _logprobs(r.get("completion_probabilities") or []) if with_probs else None}
               for j, r in enumerate(replies)]
    usage = sum(int(r["tokens_predicted"]) if isinstance(r.get("tokens_predicted"), int) else 0 for r in replies)
    if any(not isinstance(r.get("tokens_predicted"), int) for r in replies):
        usage = None  # no count: the usage test says so
    return {"object": "text_completion", "model": payload.get("model"),
            "choices": sorted(choices, key=lambda c: c["index"]), "usage": {"completion_tokens": usage}}


def _step_key(event: dict):
    t = event.get("timings") or {}
    return (t.get("predicted_ms"), t.get("draft_n"), t.get("draft_n_accepted"))


def openai_stream(events: list[dict], payload: dict) -> dict:
    """A native stream's events in the OpenAI shape {"events", "done"}: one event per native partial (its token,
    text, logprobs where it carried them, and its `step`: see the module docstring), the final event's
    finish_reason, then a usage event (tokens_predicted). Done: every completion's final event came."""
    out, steps, finals = [], {}, {}
    for event in events:
        index = int(event.get("index", 0))
        if event.get("stop") is True:
            finals[index] = event
            out.append({"choices": [{"index": index, "text": str(event.get("content") or ""),
                                     "token_ids": [int(t) for t in event.get("tokens") or []],
                                     "finish_reason": finish_reason(event, _stops(payload))}]})
            continue
        key, (last, step) = _step_key(event), steps.get(index, (None, -1))
        step = step + 1 if key != last or key == (None, None, None) else step
        steps[index] = (key, step)
        probs = event.get("completion_probabilities")
        out.append({"choices": [{"index": index, "text": str(event.get("content") or ""),
                                 "token_ids": [int(t) for t in event.get("tokens") or []],
                                 "logprobs": _logprobs(probs) if probs else None, "finish_reason": None,
                                 "step": step}]})
    n = int(payload.get("n") or 1)
    counts = [f.get("tokens_predicted") for f in finals.values()]
    if finals and all(isinstance(c, int) for c in counts):
        out.append({"choices": [], "usage": {"completion_tokens": sum(counts)}})
    return {"events": out, "done": len(finals) == n}


class LlamaServerApiClient(EngineClient):
    """The API check's completion requests over llama-server's native /completion (module docstring); every other
    route (chat completions, /v1/models) goes to the server as it is."""

    not_offered = NOT_OFFERED

    def __init__(self, endpoint: str, **options):
        super().__init__(endpoint, **options)
        self._slots: int | None = None

    @property
    def slots(self) -> int:
        if self._slots is None:
            props = self.optional("GET", "/props")
            slots = props.get("total_slots") if isinstance(props, dict) else None
            self._slots = int(slots) if isinstance(slots, int) and slots >= 1 else 1
        return self._slots

    def request(self, method: str, path: str, payload: dict | None = None, *, parse_json: bool = True):
        if method != "POST" or path != "/v1/completions":
            return super().request(method, path, payload, parse_json=parse_json)
        return openai_reply(super().request("POST", "/completion", native_body(payload or {}, self.slots)),
                            payload or {})

    def stream(self, path: str, payload: dict) -> dict:
        if path != "/v1/completions":
            return super().stream(path, payload)
        got = super().stream("/completion", native_body(payload, self.slots))
        return openai_stream(got["events"], payload)
