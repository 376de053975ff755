"""What a request to `specdec serve` asks for, read and checked: its sampling parameters (`Sampling`), its integer
fields and seed, and the errors a bad request (or a stopping server) is answered with."""

from __future__ import annotations

import dataclasses


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


def int_field(body: dict, key: str, default, lo: int, hi: int):
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise RequestError(f"{key} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def sampling_of(body: dict) -> Sampling:
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


def seed_of(body: dict) -> int | None:
    """The request's seed (None: unseeded)."""
    seed = body.get("seed")
    if seed is None:
        return None
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise RequestError(f"seed must be an integer, got {seed!r}")
    return seed
