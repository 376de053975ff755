"""`specdec probe`: what an OpenAI-compatible server returns, and which ground truth that allows.

Each feature is found by asking, never by trusting a server name: token ids (vLLM
`return_token_ids` / "token_id:N" names), sampled-token logprobs and how many top-k, prompt scoring
(vLLM `prompt_logprobs`, or legacy `echo` + `logprobs` as llama.cpp's server does it), whether
logprobs are raw (before temperature) or processed, whether `seed` is honoured, speculation
metrics on `/metrics`, and a tokenize route (for the tokenizer-identity check).
"""

from __future__ import annotations

import math
import re

from harness.served.client import EngineClient, RequestRefused
from harness.served.structured import structured_support
from harness.served.text import PROBE_TEXT, TOKEN_ID_PREFIX

PROBE_PROMPT = "The capital of France is"
SCORING_TOLERANCE = 1e-2  # nats: float32 kernels differ between batched scoring and sampling by far less
TOP_K_TRIES = (20, 5, 1)


def _complete(client: EngineClient, model: str, prompt, **fields) -> dict | None:
    try:
        return client.post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 4, **fields})
    except RequestRefused:
        return None


def choice_token_ids(choice: dict) -> list[int] | None:
    """A choice's token ids: `token_ids`, else "token_id:N" names in its logprobs; None if neither."""
    ids = choice.get("token_ids")
    if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
        return ids
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(tokens, list) and tokens and all(isinstance(t, str) and t.startswith(TOKEN_ID_PREFIX)
                                                   for t in tokens):
        return [int(t[len(TOKEN_ID_PREFIX):]) for t in tokens]
    return None


def server_tokenize(client: EngineClient, model: str, text: str) -> list[int] | None:
    """The server's tokenization of `text` (vLLM /tokenize, llama-cpp-python /extras/tokenize), None if neither."""
    reply = client.optional("POST", "/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})
    if isinstance(reply, dict) and isinstance(reply.get("tokens"), list):
        return [int(t) for t in reply["tokens"]]
    reply = client.optional("POST", "/extras/tokenize", {"input": text})
    if isinstance(reply, dict) and isinstance(reply.get("tokens"), list):
        return [int(t) for t in reply["tokens"]]
    return None


def top_logprobs_k(client: EngineClient, model: str, prompt) -> int:
    """The largest k in TOP_K_TRIES the server lists per sampled token (0: no logprobs)."""
    for k in TOP_K_TRIES:
        reply = _complete(client, model, prompt, logprobs=k, max_tokens=1, temperature=1.0, seed=1)
        top = ((reply or {}).get("choices") or [{}])[0].get("logprobs") or {}
        listed = (top.get("top_logprobs") or [None])[0]
        if isinstance(listed, dict) and listed:
            return min(k, len(listed))
    return 0


def first_position_logprobs(client: EngineClient, model: str, prompt, temperature: float) -> dict | None:
    reply = _complete(client, model, prompt, logprobs=5, max_tokens=1, temperature=temperature, seed=1)
    try:
        return reply["choices"][0]["logprobs"]["top_logprobs"][0]
    except (TypeError, KeyError, IndexError):
        return None


def logprobs_mode(client: EngineClient, model: str, prompt) -> str:
    """'raw' if the listed logprobs at the first new position do not move with temperature, else 'processed'."""
    hot, cold = (first_position_logprobs(client, model, prompt, t) for t in (1.0, 0.5))
    if not hot or not cold:
        return "unknown"
    shared = set(hot) & set(cold)
    if not shared:
        return "processed"
    same = all(math.isclose(hot[t], cold[t], rel_tol=1e-4, abs_tol=1e-4) for t in shared)
    return "raw" if same else "processed"


def prompt_scoring(client: EngineClient, model: str, prompt) -> str | None:
    """'prompt_logprobs' (vLLM), 'echo' (legacy OpenAI / llama.cpp) or None: how the server scores a prompt."""
    reply = _complete(client, model, prompt, max_tokens=1, prompt_logprobs=1, return_tokens_as_token_ids=True)
    choice = ((reply or {}).get("choices") or [{}])[0]
    if isinstance(choice.get("prompt_logprobs"), list) and len(choice["prompt_logprobs"]) > 1:
        return "prompt_logprobs"
    reply = _complete(client, model, prompt, max_tokens=1, echo=True, logprobs=1)
    entries = (((reply or {}).get("choices") or [{}])[0].get("logprobs") or {}).get("top_logprobs") or []
    return "echo" if len(entries) > 2 else None


def _prompt_scores(client: EngineClient, model: str, prompt, how: str, temperature: float) -> list[float] | None:
    """The scores a scorer gives the prompt's own tokens at `temperature` (None: none came back)."""
    if how == "prompt_logprobs":
        reply = _complete(client, model, prompt, max_tokens=1, prompt_logprobs=1, temperature=temperature, seed=1)
        entries = ((reply or {}).get("choices") or [{}])[0].get("prompt_logprobs") or []
        values = []
        for entry in entries[1:]:  # the first prompt token has no score
            if not isinstance(entry, dict) or not entry:
                return None
            # the actual token and the top 1, in key order (the same keys at every temperature)
            values += [float(v["logprob"]) for _, v in sorted(entry.items()) if isinstance(v, dict)]
        return values or None
    reply = _complete(client, model, prompt, max_tokens=1, echo=True, logprobs=1, temperature=temperature, seed=1)
    lp = ((reply or {}).get("choices") or [{}])[0].get("logprobs") or {}
    values = [v for v in (lp.get("token_logprobs") or []) if isinstance(v, (int, float))]
    return values or None


def scoring_mode(client: EngineClient, model: str, prompt, how: str | None) -> str:
    """'raw' if the scorer's prompt scores do not move with the request's temperature, else 'processed'
    ('unknown': no scores). What ground truth (b) and the logprobs check against a reference endpoint rest on:
    an engine's prompt scores need not follow its sampled-token logprobs (vLLM 0.32 writes prompt scores raw
    whatever its --logprobs-mode)."""
    if how is None:
        return "unknown"
    hot, cold = (_prompt_scores(client, model, prompt, how, t) for t in (1.0, 0.5))
    if not hot or not cold or len(hot) != len(cold):
        return "unknown"
    same = all(math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-4) for a, b in zip(hot, cold, strict=True))
    return "raw" if same else "processed"


def raw_law_suffices(settings) -> bool:
    """Every sampling setting samples the raw law (T = 1, no truncation, no other parameter): a scorer that
    writes raw scores is then the ground truth as it stands."""
    return all(s.temperature == 1 and s.top_k is None and s.top_p is None and not s.extras()
               for s in settings if s.temperature > 0)


def scoring_consistency(client: EngineClient, model: str, prompt: str, how: str | None) -> float | None:
    """Largest |logprob from generation − logprob from scoring the same text| over the generated tokens.

    A scorer whose prompt logprobs disagree with the logprobs it reports while sampling cannot be
    ground truth (b). None: not measurable (no scoring, or the pieces do not line up)."""
    if how is None:
        return None
    gen = _complete(client, model, prompt, max_tokens=4, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3,
                    logprobs=1, return_tokens_as_token_ids=True, return_token_ids=True)
    try:
        choice = gen["choices"][0]
        sampled = choice["logprobs"]["token_logprobs"]
        pieces = choice["logprobs"]["tokens"]
    except (TypeError, KeyError, IndexError):
        return None
    ids = choice_token_ids(choice)
    if how == "prompt_logprobs" and ids is not None and isinstance(choice.get("prompt_token_ids"), list):
        scored = _complete(client, model, choice["prompt_token_ids"] + ids, max_tokens=1, prompt_logprobs=1)
        entries = ((scored or {}).get("choices") or [{}])[0].get("prompt_logprobs") or []
        tail = entries[-len(ids):]
        try:
            scored_lp = [e[str(t)]["logprob"] for e, t in zip(tail, ids, strict=True)]
        except (KeyError, TypeError):
            return None
    else:
        scored = _complete(client, model, prompt + choice.get("text", ""), max_tokens=1, echo=True, logprobs=1)
        lp = ((scored or {}).get("choices") or [{}])[0].get("logprobs") or {}
        tokens, values = lp.get("tokens") or [], lp.get("token_logprobs") or []
        if tokens[-len(pieces):] != pieces:  # some servers also echo the one new token: drop it
            tokens, values = tokens[:-1], values[:-1]
        if len(tokens) < len(pieces) or tokens[-len(pieces):] != pieces:
            return None
        scored_lp = values[-len(pieces):]
    return max(abs(a - b) for a, b in zip(sampled, scored_lp, strict=True))


def seed_honoured(client: EngineClient, model: str, prompt) -> bool:
    runs = [_complete(client, model, prompt, max_tokens=8, temperature=1.0, seed=s) for s in (7, 7, 8, 8)]
    texts = [r["choices"][0].get("text") if r else None for r in runs]
    return None not in texts and texts[0] == texts[1] and texts[2] == texts[3]


def speculation_metrics(client: EngineClient) -> dict:
    """Speculation counters on /metrics (vLLM spec_decode_*, specdec_*, llama.cpp drafted/accepted)."""
    text = client.optional("GET", "/metrics", parse_json=False)
    if not isinstance(text, str):
        return {}
    found = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z_:][\w:]*(?:\{[^}]*\})?)\s+(\S+)$", line.strip())
        if m and re.search(r"spec|draft|accept|tokens_per_target_call", m.group(1)):
            try:
                found[m.group(1)] = float(m.group(2))
            except ValueError:
                continue
    return found


def probe(endpoint: str, model: str | None = None, *, api: str = "openai", **client_options) -> dict:
    """Everything the engine check needs to know about a server, with what each missing piece costs.
    `api`: the route the engine check would use (harness.served.llama_server.client_for)."""
    from harness.served.llama_server import client_for

    with client_for(api, endpoint, **client_options) as client:
        model = client.resolve_model(model)
        prompt = PROBE_PROMPT
        base = _complete(client, model, prompt, return_token_ids=True, return_tokens_as_token_ids=True, logprobs=0,
                         seed=1)
        choice = ((base or {}).get("choices") or [{}])[0]
        ids = choice_token_ids(choice)
        k = top_logprobs_k(client, model, prompt)
        info = {
            "endpoint": client.base, "model": model, "api": api,
            "token_ids": ids is not None,
            "token_ids_via": ("token_ids" if choice.get("token_ids") is not None else "token_id:N names")
            if ids is not None else None,
            "logprobs": k > 0, "top_logprobs_k": k,
            "logprobs_mode": logprobs_mode(client, model, prompt) if k else "none",
            "prompt_scoring": (how := prompt_scoring(client, model, prompt)),
            "scoring_gap": scoring_consistency(client, model, prompt, how),
            "scoring_mode": scoring_mode(client, model, prompt, how),
            "seed_honoured": seed_honoured(client, model, prompt),
            "tokenize_route": server_tokenize(client, model, PROBE_TEXT) is not None,
            "speculation_metrics": speculation_metrics(client),
            "structured_outputs": structured_support(client, model, prompt),
        }
    info["speculative"] = _speculative(info["speculation_metrics"])
    info["rows"] = explain(info)
    info["ground_truths"] = {g: r for g, r in possible_ground_truths(info).items()}
    return info


def _probe_fields(info: dict) -> dict:
    """The result envelope's fields of a probe (kind "probe"). The engine's device and dtype are the server's own,
    which a client cannot see: recorded as not recorded."""
    from harness.envelope import NOT_RECORDED
    from harness.records import git_commit, machine, utc_now, versions

    meta = {"seed": None, "git_commit": git_commit(), "machine": machine(), "versions": versions(),
            "device": NOT_RECORDED, "dtype": NOT_RECORDED, "utc_time": utc_now()}
    return {"provenance": meta, "report": info,
            "summary": {"ground_truths": info.get("ground_truths"), "speculative": info.get("speculative")}}


def probe_result(info: dict, config=None) -> dict:
    """`specdec probe --json`: the probe as a result envelope (docs/RESULTS-FORMAT.md), as a dict to print."""
    from harness.envelope import Envelope, config_dict
    from harness.records import json_safe

    return json_safe(Envelope("probe", config_dict(config), **_probe_fields(info)).to_dict())


def write_probe(path, info: dict, config=None):
    """The probe as a result envelope file at `path`."""
    from harness.envelope import write_result

    return write_result(path, "probe", config=config, **_probe_fields(info))


def _speculative(metrics: dict) -> bool | None:
    for name, value in metrics.items():
        if name.endswith("speculative_decoding_enabled"):
            return bool(value)
    drafted = [v for n, v in metrics.items() if "draft" in n and v > 0]
    return True if drafted else None


def explain(info: dict) -> list[dict]:
    """One row per feature: what the server returns, and what its absence costs."""
    k = info["top_logprobs_k"]
    return [
        {"feature": "token ids", "value": info["token_ids_via"] or "no",
         "cost": "none" if info["token_ids"] else
         "re-tokenizing text is not exact: (a) and (b) need ids; (c) compares texts only"},
        {"feature": "sampled-token logprobs, top-k", "value": f"k = {k}" if k else "no",
         "cost": "none" if k else "no scoring by this server"},
        {"feature": "logprobs mode (sampled tokens)", "value": info["logprobs_mode"],
         "cost": "none: the logprobs check compares in the engine's own mode" if info["logprobs_mode"] in ("raw", "processed")
         else "no logprobs check"},
        {"feature": "prompt scoring", "value": info["prompt_scoring"] or "no",
         "cost": "none" if info["prompt_scoring"] else "this server cannot be the scorer of ground truth (b)"},
        {"feature": "prompt scoring mode", "value": info.get("scoring_mode", "unknown"),
         "cost": "none" if info.get("scoring_mode") == "processed" else
         "prompt scores are the law before temperature/top-k/top-p (vLLM: whatever --logprobs-mode): scoring (b) "
         "and logprobs against this server only at T = 1 without truncation" if info.get("scoring_mode") == "raw"
         else "-"},
        {"feature": "scoring = sampling logprobs", "value": "-" if info["scoring_gap"] is None else
         f"max gap {info['scoring_gap']:.2g} nats",
         "cost": "none" if info["scoring_gap"] is not None and info["scoring_gap"] < SCORING_TOLERANCE else
         "prompt scores disagree with the logprobs reported while sampling: not a scorer for (b)"
         if info["scoring_gap"] is not None else "not measured"},
        {"feature": "top-k coarsening", "value": f"k = {k}" if k else "-",
         "cost": "detectable TV grows by the mass outside the top k (reported per run as hidden mass)"
         if k else "-"},
        {"feature": "seed honoured", "value": "yes" if info["seed_honoured"] else "no",
         "cost": "none" if info["seed_honoured"] else "runs are not reproducible; a resumed run draws new samples"},
        {"feature": "tokenize route", "value": "yes" if info["tokenize_route"] else "no",
         "cost": "none" if info["tokenize_route"] else "tokenizer identity is checked on returned ids/text instead"},
        {"feature": "speculation metrics", "value": ", ".join(f"{n}={v:g}" for n, v in
                                                              info["speculation_metrics"].items()) or "none",
         "cost": "none" if info["speculation_metrics"] else
         "cannot tell from outside whether speculation is on; acceptance is not reported"},
        _structured_row(info.get("structured_outputs", {})),
    ]


def _structured_row(support: dict) -> dict:
    from harness.served.structured import NOT_SENT

    if support and set(support.values()) == {NOT_SENT}:
        return {"feature": "structured outputs", "value": "not probed: this client does not send them",
                "cost": "constrained settings run through their own client (`specdec campaign structured --parts "
                        "llama-server`)"}
    return {"feature": "structured outputs", "value": ", ".join(f"{n}: {v}" for n, v in support.items()) or "-",
            "cost": "none" if "honoured" in support.values() else "constrained settings cannot be checked against this server"}


def possible_ground_truths(info: dict) -> dict[str, str]:
    ids = info["token_ids"]
    gap = info["scoring_gap"]
    scoring = info["prompt_scoring"] if gap is None or gap < SCORING_TOLERANCE else None
    return {
        "a (local target)": "possible with --pair/--target" if ids else "not possible: no token ids",
        "b (scoring endpoint)": ("possible against this server with speculation off"
                                 + ("" if info.get("scoring_mode") == "processed"
                                    else ", at T = 1 only without truncation (raw prompt scores)")
                                 + (f"; coarsened to the top {info['top_logprobs_k']}" if scoring else ""))
        if ids and scoring else "not possible: " + ("no token ids" if not ids else "no (consistent) prompt scoring"),
        "c (two samples)": "possible against a second endpoint with speculation off"
        + ("" if ids else " (on texts)"),
        "greedy equality": "possible",
    }
