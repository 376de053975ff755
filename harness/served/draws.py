"""What an engine-level check asks of an endpoint: continuations in requests of `--chunk` (`sample_rows`), the
reference's scores of them (ground truth b, `score_rows`), and the format test of what came back.

Every request goes through the client's `run_all` (concurrent, retried, kept under `--out` so that a run resumes);
`run` is the check run (harness.served.check.EngineRun).
"""

from __future__ import annotations

import math

import numpy as np

from harness.check.report import deterministic_result
from harness.check.settings import Setting
from harness.served import battery
from harness.served.client import EngineClient, EngineError
from harness.served.pieces import SHARED_PIECE
from harness.served.probe import choice_token_ids
from harness.served.requests import reply_choices, sampling_request
from harness.served.text import TOKEN_ID_PREFIX, encode


def sample_rows(run, client: EngineClient, model: str, role: str, prompt, setting: Setting, n: int,
                max_tokens: int, seed: int, allow_text: bool = False) -> tuple[list[list], list[str]]:
    """n continuations (token ids) and finish reasons from one endpoint, in requests of run.config.chunk.

    `allow_text` (two-sample tests only): a server without ids gives its logprob token pieces, else its
    text split by a fixed function; any fixed function of the output is a valid coarsening there."""
    jobs = []
    for i, lo in enumerate(range(0, n, run.config.chunk)):
        b = min(run.config.chunk, n - lo)
        jobs.append((f"{role}/{setting.label}/{prompt!r}/{seed}/{i}",
                     sampling_request(model, prompt, b, max_tokens, setting,
                                      seed + 104_729 * i if run.config.seeded else None,
                                      not allow_text and needs_token_names(client, model, prompt),
                                      run.config.extra_body)))
    replies = client.run_all("/v1/completions", jobs, run.store, run.progress)
    rows, reasons = [], []
    for key, payload in jobs:
        choices = reply_choices(replies[key], payload["n"], client.base)
        for choice in choices:
            ids = choice_token_ids(choice)
            if ids is None and allow_text:
                ids = _text_tokens(run, choice)
            if ids is None:
                raise EngineError(f"{client.base} returned no token ids (no `token_ids`, no 'token_id:N' logprob "
                                  "tokens): ground truths a and b need them; enable them (vLLM: "
                                  "return_tokens_as_token_ids) or use --ground-truth two-sample")
            rows.append(ids)
            reasons.append(str(choice.get("finish_reason")))
    return rows, reasons


def _text_tokens(run, choice: dict) -> list:
    pieces = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(pieces, list) and all(isinstance(t, str) for t in pieces):
        return pieces
    text = str(choice.get("text", ""))
    return encode(run.tokenizer, text) if run.tokenizer is not None else text.split(" ")


def needs_token_names(client: EngineClient, model: str, prompt) -> bool:
    """Whether this server returns ids only as logprob names (asked once per client, with the run's own prompt:
    a fixed text such as "1" tokenizes to nothing in some vocabularies; logprobs cost the server time)."""
    if client.needs_token_names is None:
        reply = client.post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 1, "seed": 0,
                                                "return_token_ids": True})  # a 4xx here is a clear error too
        choice = (reply.get("choices") or [{}])[0] if isinstance(reply, dict) else {}
        client.needs_token_names = not isinstance(choice.get("token_ids"), list)
    return client.needs_token_names


SCORE_ENTRIES = 1_000_000  # listed logprobs per scoring request (~75 MB of vLLM JSON): a wide top k stays in memory


def score_rows(run, prompt: list[int], rows: list[list[int]], setting: Setting) -> list[np.ndarray]:
    """Ground truth (b): the reference scores prompt + continuation; per row, the `battery.coarse_masses` of its
    tokens under the scorer's top k at each position ([len(row), 3]).

    A scorer lists k values at every position of the prompt as well (vLLM's prompt_logprobs): at k = 1000 that is
    ~3 MB of JSON per 45-token sequence, so requests hold at most SCORE_ENTRIES listed values, a few are in flight
    at a time, and each reply is cut to the three numbers per emitted token the test reads as it arrives (also
    what --out keeps)."""
    k = run.config.top_logprobs
    longest = len(prompt) + max((len(r) for r in rows), default=0)
    per_request = max(1, min(run.config.chunk, SCORE_ENTRIES // max(1, (k + 1) * longest)))
    jobs, batch = [], {}
    for i, lo in enumerate(range(0, len(rows), per_request)):
        body = sampling_request(run.reference_model, [prompt + r for r in rows[lo : lo + per_request]], 1, 1, setting, 0)
        body["prompt_logprobs"] = k
        key = f"score-masses/{setting.label}/{prompt!r}/{hash(tuple(map(tuple, rows)))}/{k}/{per_request}/{i}"
        jobs.append((key, body))
        batch[key] = rows[lo : lo + per_request]

    def reduce(key: str, reply: dict) -> dict:
        choices = reply_choices(reply, len(batch[key]), run.reference.base)
        masses = []
        for choice, row in zip(choices, batch[key], strict=True):
            entries = choice.get("prompt_logprobs")
            if not isinstance(entries, list) or len(entries) != len(prompt) + len(row):
                raise EngineError(f"{run.reference.base} did not return prompt_logprobs for every prompt token: it "
                                  "cannot score (ground truth b); use --ground-truth two-sample")
            masses.append([battery.coarse_masses(_top_k(e, k), y) for e, y in zip(entries[len(prompt):], row,
                                                                                   strict=True)])
        return {"masses": masses}

    out = []
    step = max(1, run.reference.concurrency)
    for g in range(0, len(jobs), step):
        group = jobs[g : g + step]
        replies = run.reference.run_all("/v1/completions", group, run.store, run.progress, reduce=reduce)
        for key, _ in group:
            out += [np.array(m, dtype=float).reshape(-1, 3) for m in replies[key]["masses"]]
    return out


def _top_k(entry: dict, k: int) -> dict[int, float]:
    """The scorer's top k by rank (the actual token, listed only because it was emitted, is left out)."""
    ranked = [(int(t.removeprefix(TOKEN_ID_PREFIX)), v) for t, v in entry.items()]
    ranked = [(t, v) for t, v in ranked if v.get("rank", 1) <= k]
    return {t: math.exp(v["logprob"]) for t, v in ranked}


def format_result(prefix: str, rows: list[list[int]], reasons: list[str], length: int, pair):
    """Ids in the vocabulary, at most max_tokens, and a row shorter than max_tokens only if it stopped."""
    vocab = pair.vocab_size if pair is not None else None
    problems = []
    long = sum(len(r) > length for r in rows if all(isinstance(t, int) for t in r))  # text pieces: not counted
    if long:
        problems.append(f"{long} continuations exceed max_tokens={length}")
    if vocab is not None and any(not isinstance(t, int) or not 0 <= t < vocab for r in rows for t in r):
        problems.append(f"token ids outside [0, {vocab})")
    short = sum(len(r) < length and reason not in ("stop", SHARED_PIECE) and all(isinstance(t, int) for t in r)
                for r, reason in zip(rows, reasons, strict=True))
    if short:
        problems.append(f"{short} continuations end before max_tokens without a stop")
    return deterministic_result(f"{prefix}/format", not problems, n=len(rows), message="; ".join(problems))
