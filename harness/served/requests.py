"""Request bodies and reply parsing shared by the engine-level checks (harness.served.draws, .truths,
.context_cells, .logprobs, .api)."""

from __future__ import annotations

from harness.check.settings import Setting
from harness.errors import HarnessError
from harness.served.client import EngineError
from harness.served.probe import server_tokenize


def sampling_request(model: str, prompt, n: int, max_tokens: int, setting: Setting, seed: int | None, names: bool = False,
             extra: dict | None = None) -> dict:
    """A sampling request; `names`: also ask for "token_id:N" logprob names (servers without `token_ids`);
    `seed` None: no seed field (the engine's own RNG)."""
    body = {**(extra or {}), "model": model, "prompt": prompt, "n": n, "max_tokens": max_tokens,
            "temperature": setting.temperature, "seed": seed, "return_token_ids": True}
    if seed is None:
        del body["seed"]
    if names:
        body.update(return_tokens_as_token_ids=True, logprobs=0)
    if setting.top_p is not None:
        body["top_p"] = setting.top_p
    if setting.top_k is not None:
        body["top_k"] = setting.top_k
    body.update(request_parameters(setting))
    return body


# The sampling parameters beyond temperature / top-k / top-p under their OpenAI / vLLM request names
# (`bad_words_ids` is a token-id extension: vLLM's own `bad_words` takes strings).
REQUEST_NAMES = {"min_p": "min_p", "logit_bias": "logit_bias", "repetition_penalty": "repetition_penalty",
                 "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
                 "bad_words_ids": "bad_words_ids", "min_new_tokens": "min_tokens"}


def request_parameters(setting: Setting) -> dict:
    """The setting's extra parameters as request fields (logit_bias keys as strings, as the OpenAI API has them)."""
    out = {}
    for name, value in setting.extras().items():
        if name == "constraint":  # structured outputs: OpenAI response_format / vLLM structured_outputs
            from harness.served.structured import request_fields

            out.update(request_fields(value))
            continue
        out[REQUEST_NAMES[name]] = {str(k): b for k, b in value.items()} if name == "logit_bias" else value
    return out


def reply_choices(reply, n: int, base: str) -> list[dict]:
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or len(choices) != n or not all(isinstance(c, dict) for c in choices):
        got = len(choices) if isinstance(choices, list) else "no"
        raise EngineError(f"{base} replied with {got} choices where {n} were asked for (missing or malformed "
                          "`choices`): the engine's reply is not OpenAI-compatible")
    return choices


def server_prompt_ids(run, text: str) -> list[int]:
    ids = server_tokenize(run.reference, run.reference_model, text)
    if ids is None:
        raise HarnessError("text prompts need the scorer's tokenization (no /tokenize route): give --pair/--target")
    return ids
