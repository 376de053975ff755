"""Token ids <-> text, for the server and the client alike.

Pairs without a tokenizer (the toy pairs) have no text: their "text" is the ids written out, one
space-separated integer per token (" 3 11 0"), so that a prompt string, a returned text and the
tokenizer-identity probe all mean the same thing on both sides of the wire. vLLM's
`return_tokens_as_token_ids` names a token "token_id:N"; the client reads both.
"""

from __future__ import annotations

TOKEN_ID_PREFIX = "token_id:"
PROBE_TEXT = "Speculative decoding must not change the law: 12 tokens, naïve café, 3.14!"


class IdTokenizer:
    """The toy pairs' tokenizer: text is the ids as decimal integers separated by spaces."""

    def __init__(self, vocab_size: int, offset: int = 0):
        self.vocab_size = vocab_size
        self.offset = offset  # nonzero only to build a deliberately different tokenizer in tests

    def encode(self, text: str) -> list[int]:
        try:
            ids = [(int(t) + self.offset) % self.vocab_size for t in text.split()]
        except ValueError:
            # Any string must tokenize (the identity probe sends prose): characters become ids.
            ids = [(ord(c) + self.offset) % self.vocab_size for c in text if not c.isspace()]
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join(f" {(i - self.offset) % self.vocab_size}" for i in ids)


def tokenizer_for(pair) -> object:
    """The pair's tokenizer, or the id tokenizer for pairs that have none."""
    return pair.tokenizer if pair.tokenizer is not None else IdTokenizer(pair.vocab_size)


def encode(tokenizer, text: str) -> list[int]:
    if isinstance(tokenizer, IdTokenizer):
        return tokenizer.encode(text)
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def decode(tokenizer, ids: list[int]) -> str:
    if isinstance(tokenizer, IdTokenizer):
        return tokenizer.decode(ids)
    return tokenizer.decode(ids, skip_special_tokens=False)


def token_name(tokenizer, token: int, as_ids: bool) -> str:
    return f"{TOKEN_ID_PREFIX}{token}" if as_ids else decode(tokenizer, [token])
