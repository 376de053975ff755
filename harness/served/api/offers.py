"""What the engine offers the API check, asked once per run before any cell: the route the check speaks through,
whether the engine allows the check at all (`refusal`), whether it streams completions, chat and tool calls, and
which optional request fields it takes (the tests that need a field it lacks are skipped and listed)."""

from __future__ import annotations

from harness.served.api.records import N_CHOICES, TOOLS
from harness.served.client import RequestRefused
from harness.served.text import decode

API_ROUTES = ("openai", "llama-server", "llama-server-processed")  # --api values the check speaks (see route)


def route(run):
    """The client the API check speaks through: the engine's own, or the route it names for the API check
    (`api_route`: llama-server's native /completion, harness.served.llama_api)."""
    make = getattr(run.engine, "api_route", None)
    return make() if make is not None else run.engine


def refusal(run, prompt) -> str | None:
    """Why the engine does not allow the API check (None: it does), asked before the default set runs it: a local
    tokenizer (token texts), the OpenAI / vLLM routes (--api openai) or llama-server's native /completion (--api
    llama-server: harness.served.llama_api), and a completion with stop, stop_token_ids, seed, logprobs and
    return_token_ids answered with the token ids (the tests read ids: a server that returns only text, as
    llama-server's OpenAI route does, cannot be judged)."""
    from harness.served.probe import choice_token_ids

    if run.tokenizer is None or not isinstance(prompt, list):
        return "no local tokenizer to read token texts (give --pair NAME or --target PATH)"
    if run.config.api not in API_ROUTES:
        return f"--api {run.config.api}: the API check speaks the OpenAI / vLLM routes and llama-server's only"
    body = {"model": run.model, "prompt": list(prompt), "max_tokens": 2, "seed": 0, "logprobs": 1,
            "stop": ["<specdec: never>"], "stop_token_ids": [], "return_token_ids": True,
            "return_tokens_as_token_ids": True}
    try:
        reply = route(run).post("/v1/completions", body)
    except RequestRefused as exc:
        return f"the engine refused a completion with stop / stop_token_ids / seed / logprobs / token ids ({exc})"
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices or choice_token_ids(choices[0]) is None:
        return "the engine returns no token ids with its completions"
    return None


def streams(run, prompt: list[int], chat: bool = False, tools: bool = False) -> bool:
    """Whether the engine answers stream: true with server-sent events on its completions (`chat`: chat
    completions) route; a refusal, 4xx, means it does not. `tools`: a chat stream with `tools` and tool_choice
    "auto", which a server answers where it runs a tool-call parser (vLLM: `--enable-auto-tool-choice
    --tool-call-parser`, else 400; `specdec serve --tool-call-tokens`)."""
    body = {"model": run.model, "max_tokens": 2, "seed": 0, "stream": True}
    if tools:
        body.update(tools=TOOLS, tool_choice="auto")
    try:
        if chat or tools:
            got = route(run).stream("/v1/chat/completions",
                                    {**body, "messages": [{"role": "user", "content": decode(run.tokenizer, prompt)}]})
        else:
            got = route(run).stream("/v1/completions", {**body, "prompt": prompt})
    except RequestRefused:
        return False
    return bool(got["events"])


def takes_min_stop_ids(run, prompt: list[int]) -> bool:
    """Whether the engine answers a completion with stop_token_ids and min_tokens (vLLM does; `specdec serve` with
    an implementation that cannot mask stop ids refuses it, 4xx)."""
    body = {"model": run.model, "prompt": list(prompt), "max_tokens": 2, "seed": 0, "min_tokens": 1,
            "stop_token_ids": [int(prompt[0])]}
    try:
        route(run).post("/v1/completions", body)
    except RequestRefused:
        return False
    return True


def not_offered(run) -> dict:
    """{request field: why} of what the engine's route does not offer (llama-server: stop_token_ids, min_tokens;
    `n` = N_CHOICES where it has fewer slots): the API check leaves those requests and tests out and says so."""
    engine = route(run)
    out = dict(getattr(engine, "not_offered", {}))
    slots = getattr(engine, "slots", None)
    if isinstance(slots, int) and slots < N_CHOICES:
        out["n"] = (f"n = {N_CHOICES} needs {N_CHOICES} slots and the server has {slots} (-np): start it with "
                    f"-np {N_CHOICES} to test n")
    return out


# The optional request fields the API check sends, each with the tests that need it and the smallest request that
# shows whether the engine takes it (asked once per run, after `refusal`: a refusal, 4xx, leaves them out).
OPTIONAL_FIELDS = {"min_tokens": (("min_tokens",), {"min_tokens": 1, "stop": ["<specdec: never>"]}),
                   "n": (("n_independent",), {"n": N_CHOICES})}


def refused_fields(run, prompt: list[int], lacks: dict) -> dict:
    """{field: why} of the OPTIONAL_FIELDS the engine refuses (4xx) on a two-token completion, those `lacks`
    already names left unasked: a parameter the server refuses is a capability it lacks (`specdec serve` with a
    generate() that takes no min_new_tokens refuses min_tokens), so its tests are skipped and listed, never fatal
    to the run."""
    out = {}
    for field, (_, fields) in OPTIONAL_FIELDS.items():
        if field in lacks:
            continue
        body = {"model": run.model, "prompt": list(prompt), "max_tokens": 2, "seed": 0, **fields}
        try:
            route(run).post("/v1/completions", body)
        except RequestRefused as exc:
            out[field] = f"the engine refused a request with {field} = {fields[field]!r}: {exc}"
    return out


def skipped_tests(lacks: dict) -> dict:
    """{API test: why} of the tests left out because the engine lacks the request field they need."""
    return {test: f"needs {field}, which the engine does not offer: {lacks[field]}" for field, (tests, _) in
            OPTIONAL_FIELDS.items() if field in lacks for test in tests}
