"""Token ids from text pieces: llama-cpp-python's server (`python -m llama_cpp.server`) as an engine with ids.

That server returns no token ids. With `logprobs` it returns, per generated token, the token's own text:
`logprobs.tokens[i]` is `detokenize([id]).decode("utf-8", errors="ignore")`, special tokens rendered as
nothing. Most ids have a piece no other id has, so the piece names the id. A few share theirs (SmolLM2:
380 of 49,152: byte tokens that are not UTF-8 on their own, special tokens, a space with a stray byte,
and the 47 tokens longer than 32 bytes, which llama-cpp-python renders as nothing: its fixed buffer,
abetlen/llama-cpp-python#2362). The full text does not always tell shared pieces apart (two byte tokens
of one CJK character can split in more than one way), and guessing, or dropping the rows that need a
guess, would bias the test. So:

- `PieceTable`: every id's bytes as llama.cpp renders them without special tokens (byte-level BPE tokens
  decoded from their byte alphabet; SentencePiece tokens with "▁" as a space and <0xNN> bytes; special
  tokens as no bytes), the piece the server reports for it, and its class (the ids sharing that piece).
- `ids_from_pieces`: a row's ids up to and including its first shared piece; that position holds the
  class's representative (its smallest id) and the row ends there (`SHARED_PIECE`). Where a row ends is
  decided by its tokens so far (a stopping rule), and the check scores the last position under the
  target's law coarsened to the classes (`harness.check.pit.pit_values(classes=...)`): exact.
  The server leaves a generated BOS out of its pieces; `usage.completion_tokens` shows it, and then the
  ids cannot be known (`UnresolvedPieces`, exit 2). A setting with `logit_bias` {BOS: -100} rules it out.
- `PiecesClient`: the engine check's vLLM-style requests (`n`, `seed`, `return_token_ids`) sent as one
  request per continuation (seed + i: the server serves n = 1), the prompt's ids as their text (its
  completion route takes text only; the server's tokenization of it is checked to be the ids), the
  replies given `token_ids`. `specdec verify --level engine --api llama-cpp-python --pair NAME`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from harness.errors import HarnessError
from harness.served.client import EngineClient, RequestRefused

# llama-cpp-python 0.3.36 renders a token through a 32-byte buffer (`_internals.LlamaModel.detokenize`): a longer
# token comes back as no bytes at all, in its pieces and in its text (SmolLM2: 47 ids, such as a line of 64 dashes).
LLAMA_CPP_PYTHON_PIECE_BYTES = 32
SHARED_PIECE = "shared-piece"  # the finish reason of a row cut at its first shared piece


class UnresolvedPieces(HarnessError):
    """The server's pieces cannot be read as this tokenizer's ids (a dropped BOS, an unknown piece): the run
    cannot be done (exit 2)."""


@functools.cache
def _byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-ins: character -> the byte it stands for (GPT-2's convention: the
    printable Latin-1 bytes stand for themselves, the other 68 bytes are shifted to 256 + k in order)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, shifted = {chr(b): b for b in printable}, 0
    for b in range(256):
        if b not in printable:
            out[chr(256 + shifted)] = b
            shifted += 1
    return out


def _sentencepiece_bytes(token: str) -> bytes:
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        return bytes([int(token[3:5], 16)])
    return token.replace("\u2581", " ").encode("utf-8")


class PieceTable:
    """Every id's bytes (as llama.cpp renders it without special tokens), reported piece and class."""

    def __init__(self, token_bytes: Sequence[bytes]):
        import torch

        self.token_bytes = list(token_bytes)
        self.by_piece: dict[str, list[int]] = {}
        for i, b in enumerate(self.token_bytes):
            self.by_piece.setdefault(b.decode("utf-8", errors="ignore"), []).append(i)
        self.classes = torch.arange(len(self.token_bytes))  # id -> its class's representative (smallest id)
        for members in self.by_piece.values():
            self.classes[members] = members[0]

    @classmethod
    def from_tokenizer(cls, tokenizer, max_piece_bytes: int | None = LLAMA_CPP_PYTHON_PIECE_BYTES) -> PieceTable:
        """From a transformers tokenizer (byte-level BPE or SentencePiece vocabulary). `max_piece_bytes`: a token
        longer than this renders as nothing (llama-cpp-python's fixed buffer; None: no limit)."""
        if not hasattr(tokenizer, "convert_ids_to_tokens"):
            raise HarnessError("--api llama-cpp-python needs the model's own tokenizer (a transformers one) to read the "
                               "server's text pieces; this pair has none")
        size = len(tokenizer)
        tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        for i, added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
            if getattr(added, "special", False):
                special.add(int(i))
        alphabet = _byte_alphabet()
        ordinary = [t for i, t in enumerate(tokens) if i not in special and t is not None]
        byte_level = all(c in alphabet for t in ordinary for c in t)
        if not byte_level and not any("\u2581" in t or t.startswith("<0x") for t in ordinary):
            raise HarnessError("token ids from text pieces need a byte-level BPE or SentencePiece vocabulary; this "
                               "tokenizer is neither: use a server that returns token ids")
        out = []
        for i, t in enumerate(tokens):
            if i in special or t is None:
                out.append(b"")
            elif byte_level:
                out.append(bytes(alphabet[c] for c in t))
            else:
                out.append(_sentencepiece_bytes(t))
        if max_piece_bytes is not None:
            out = [b if len(b) <= max_piece_bytes else b"" for b in out]
        return cls(out)

    def ambiguous(self) -> int:
        """How many ids share their piece with another id."""
        return sum(len(ids) for ids in self.by_piece.values() if len(ids) > 1)


def ids_from_pieces(pieces: Sequence[str], table: PieceTable, count: int | None = None) -> tuple[list[int], bool]:
    """(ids, cut): the row's ids up to its first shared piece, which holds its class's representative; cut is
    whether the row ended there (see the module docstring)."""
    if count is not None and count != len(pieces):
        raise UnresolvedPieces(f"the server generated {count} tokens but listed {len(pieces)} pieces (it leaves a "
                               "generated BOS out): the ids cannot be recovered; bias BOS out (logit_bias -100)")
    ids: list[int] = []
    for piece in pieces:
        members = table.by_piece.get(piece)
        if members is None:
            raise UnresolvedPieces(f"the piece {piece!r} is no token of the local tokenizer: point --pair/--target "
                                   "at the model the server runs")
        ids.append(members[0])
        if len(members) > 1:
            return ids, True
    return ids, False


class PiecesClient(EngineClient):
    """llama-cpp-python's server with token ids (see the module docstring). `attach(tokenizer)` gives it the
    local tokenizer (the engine check does, from --pair / --target) before the first completion."""

    def __init__(self, endpoint: str, **options):
        super().__init__(endpoint, **options)
        self.table: PieceTable | None = None
        self.tokenizer = None
        self._prompt_checked: set[tuple[int, ...]] = set()
        self.needs_token_names = False  # its replies carry `token_ids` (recovered here): no probe request needed

    def attach(self, tokenizer) -> None:
        self.tokenizer, self.table = tokenizer, PieceTable.from_tokenizer(tokenizer)
        self.classes = self.table.classes  # the coarsening the check scores this client's rows under

    def request(self, method: str, path: str, payload: dict | None = None, *, parse_json: bool = True):
        if method != "POST" or path != "/v1/completions":
            return super().request(method, path, payload, parse_json=parse_json)
        if self.table is None:
            raise HarnessError("--api llama-cpp-python maps text pieces to ids with the local tokenizer: give --pair "
                               "NAME or --target PATH")
        payload = dict(payload or {})
        if payload.get("echo") or payload.get("prompt_logprobs") is not None:
            return super().request(method, path, payload, parse_json=parse_json)
        if payload.get("logprobs") not in (None, False, 0):
            raise RequestRefused(400, "--api llama-cpp-python: this server keys top logprobs by text, not by id; "
                                      "ask for logprobs with --api openai")
        prompt = payload.get("prompt")
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            payload["prompt"] = self._prompt_text(prompt)
        n, seed = int(payload.pop("n", 1) or 1), payload.get("seed")
        for key in ("return_token_ids", "return_tokens_as_token_ids"):
            payload.pop(key, None)
        choices = []
        for i in range(n):
            body = {**payload, "logprobs": 0}
            if seed is not None:
                body["seed"] = int(seed) + i
            reply = super().request("POST", path, body)
            choice = (reply.get("choices") or [None])[0] if isinstance(reply, dict) else None
            pieces = ((choice or {}).get("logprobs") or {}).get("tokens")
            if not isinstance(pieces, list):
                raise HarnessError(f"{self.base}/v1/completions returned no logprobs.tokens: not llama-cpp-python's "
                                   "server started with --logits_all True?")
            count = (reply.get("usage") or {}).get("completion_tokens")
            ids, cut = ids_from_pieces(pieces, self.table, int(count) if isinstance(count, int) else None)
            choices.append({"index": i, "text": choice.get("text", ""), "token_ids": ids,
                            "finish_reason": SHARED_PIECE if cut else choice.get("finish_reason"), "logprobs": None})
        return {"object": "text_completion", "model": payload.get("model"), "choices": choices,
                "usage": {"completion_tokens": sum(len(c["token_ids"]) for c in choices)}}

    def _prompt_text(self, ids: list[int]) -> str:
        """The prompt's text; the server must tokenize it back into these ids (checked once per prompt)."""
        from harness.served.text import decode

        text = decode(self.tokenizer, ids)
        if tuple(ids) not in self._prompt_checked:
            reply = super().request("POST", "/extras/tokenize", {"input": text})
            got = [int(t) for t in (reply or {}).get("tokens", [])]
            if got != ids and got[1:] != ids:
                raise HarnessError(f"{self.base} tokenizes the prompt's text into other ids ({got[:8]}... vs "
                                   f"{ids[:8]}...): its completion route takes text only, so this prompt cannot be sent")
            self._prompt_checked.add(tuple(ids))
        return text
