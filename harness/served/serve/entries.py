"""The logprob entries `specdec serve` writes, in the shapes clients read: the OpenAI completions `logprobs` object,
a chat logprobs entry, vLLM's prompt_logprobs entry; a logprob that is not finite is written as MASKED_LOGPROB."""

from __future__ import annotations

import numpy as np

from harness.served.text import decode

MASKED_LOGPROB = -9999.0  # JSON has no -inf; OpenAI uses this value for tokens that cannot be sampled


def chat_entry(e: dict) -> dict:
    """A chat logprobs entry (OpenAI: token, logprob, bytes, top_logprobs as a list)."""
    return {"token": e["token"], "logprob": e["logprob"], "bytes": None,
            "top_logprobs": [{"token": t, "logprob": lp} for t, lp in e["top"].items()]}


def legacy_logprobs(entries: list[dict | None]) -> dict:
    """The OpenAI completions `logprobs` object (tokens, token_logprobs, top_logprobs, text_offset)."""
    offsets, at = [], 0
    for e in entries:
        offsets.append(at)
        at += len(e["token"]) if e else 0
    return {"tokens": [e["token"] if e else None for e in entries],
            "token_logprobs": [e["logprob"] if e else None for e in entries],
            "top_logprobs": [e["top"] if e else None for e in entries], "text_offset": offsets}


def vllm_prompt_entry(tokenizer, token: int, law: np.ndarray, k: int) -> dict:
    """vLLM's prompt_logprobs entry: {str(id): {logprob, rank, decoded_token}} for the actual token + top k."""
    top = np.argsort(-law, kind="stable")[:k].tolist()
    ids = top + ([token] if token not in top else [])
    return {str(t): {"logprob": finite(law[t]), "rank": int((law > law[t]).sum()) + 1,
                     "decoded_token": decode(tokenizer, [t])} for t in ids}


def finite(x: float) -> float:
    return float(x) if np.isfinite(x) else MASKED_LOGPROB
