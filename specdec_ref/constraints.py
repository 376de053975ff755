"""Token constraints for structured outputs: the allowed-token mask after every prefix of generated tokens.

A constraint is a token automaton: a start state, the set of tokens allowed in a state (the mask),
a transition per allowed token, and accepting states. Constrained decoding samples, at every position,
from the processed law restricted to the allowed tokens and renormalized; EOS is allowed only in an
accepting state (a complete match), and a state where the match is complete and nothing may follow
allows EOS alone (the constraint forces the end).

- `GrammarConstraint.compile(kind, source, tokenizer)`: a regex, a JSON schema or a Lark grammar,
  compiled once per tokenizer by llguidance (the mask library vLLM, SGLang and llama.cpp use;
  `pip install specdec[structured]`). States are llguidance matchers; a state is never mutated
  (advancing copies it), so rolling back after a rejection is keeping the earlier state.
- `toy_tokenizer(vocab, eos)`: the toy pairs' tokenizer — token i is the letter chr(ord('a') + i), the
  EOS id (if the model has one) is a special token. A regex over the toy vocabulary is a regex over these
  letters: `[a-d]+` allows tokens 0..3.
- `PrefixFnConstraint(fn, vocab)`: transformers-style `prefix_allowed_tokens_fn(batch_id, input_ids)`
  (input_ids = prompt + tokens so far; batch_id is always 0: the constraint is the same for every row).

`TokenConstraint.allowed(generated, context)` -> bool [V] is what the processing calls
(specdec_ref.processing); masks are cached per prefix.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence

import numpy as np
import torch

from specdec_ref.errors import SpecDecInputError

KINDS = ("regex", "json_schema", "lark")
INSTALL_HINT = "pip install 'specdec[structured]' (llguidance)"
TOY_FIRST_LETTER = ord("a")


def _llguidance():
    try:
        import llguidance
    except ImportError:
        raise SpecDecInputError(f"structured-output constraints need llguidance: {INSTALL_HINT}") from None
    return llguidance


class TokenConstraint:
    """The interface the processing uses. Subclasses implement `_mask(generated, context)`."""

    vocab: int
    description: str = "constraint"

    def __init__(self):
        self._cache: dict[tuple[int, ...], torch.Tensor] = {}

    def allowed(self, generated: Sequence[int], context: Sequence[int] = ()) -> torch.Tensor:  # -> [V] bool
        """Tokens allowed after the generated tokens `generated` (`context`: prompt + generated)."""
        key = tuple(generated)
        mask = self._cache.get(key)
        if mask is None:
            mask = self._cache[key] = self._mask(key, tuple(context) or key)
        return mask

    def _mask(self, generated: tuple[int, ...], context: tuple[int, ...]) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def first_violation(self, tokens: Sequence[int], context: Sequence[int] = ()) -> int | None:
        """Index of the first token the automaton does not allow after the tokens before it (None: all allowed)."""
        context = list(context)
        for j, tok in enumerate(tokens):
            if not bool(self.allowed(tokens[:j], context + list(tokens[:j]))[tok]):
                return j
        return None

    def mask_rows(self, seq: torch.Tensor, n_generated: torch.Tensor) -> torch.Tensor:
        """seq [..., L] (left-padded with -1, latest last), n_generated [...] -> allowed [..., V] bool."""
        flat = seq.reshape(-1, seq.shape[-1]).tolist()
        counts = n_generated.reshape(-1).tolist()
        out = torch.stack([self.allowed(row[len(row) - n:] if n else (), [t for t in row if t >= 0])
                           for row, n in zip(flat, counts, strict=True)]) if flat else \
            torch.zeros(0, self.vocab, dtype=torch.bool)
        return out.reshape(*seq.shape[:-1], self.vocab)

    def __repr__(self) -> str:
        return self.description


# ---------------------------------------------------------------- tokenizers for llguidance


class _ToyTokenizer:
    """What llguidance.TokenizerWrapper reads: token byte strings, EOS / BOS ids and an encoder."""

    def __init__(self, vocab: int, eos: int | None):
        self.vocab = vocab
        self.eos_token_id = eos if eos is not None else vocab  # no EOS in the model: a phantom id past V
        self.bos_token_id = None
        self.tokens = [bytes([TOY_FIRST_LETTER + i]) for i in range(vocab)]
        if eos is None:
            self.tokens.append(b"<eos>")
        else:
            self.tokens[eos] = b"<eos>"
        self.special_token_ids = [self.eos_token_id]

    def __call__(self, text):
        data = text.encode() if isinstance(text, str) else text
        return [b - TOY_FIRST_LETTER for b in data if 0 <= b - TOY_FIRST_LETTER < self.vocab]


@dataclasses.dataclass(frozen=True)
class Tokenizer:
    """A tokenizer as llguidance sees it, with the model vocabulary V the masks are cut to."""

    ll: object  # llguidance.LLTokenizer
    vocab: int  # model vocabulary (mask width)
    eos: int | None  # the model's EOS id inside [0, V), None if it has none
    name: str
    # Confirm every allowed token by consuming it (small vocabularies): llguidance assumes the tokens cover
    # every byte and allows the tokens after bytes a grammar forces (a JSON '"'), which the toy letters cannot spell.
    check_each: bool = False


def toy_tokenizer(vocab: int, eos: int | None = None) -> Tokenizer:
    """Token i = the letter chr(ord('a') + i); `eos` (a model EOS id, or None) is a special token."""
    if vocab > 26:
        raise SpecDecInputError(f"the toy tokenizer spells tokens as the letters a..z: vocab {vocab} > 26")
    llg = _llguidance()
    return Tokenizer(llg.LLTokenizer(llg.TokenizerWrapper(_ToyTokenizer(vocab, eos)), slices=[]), vocab, eos,
                     f"toy(V={vocab}, eos={eos})", check_each=True)


def hf_tokenizer(tokenizer, vocab: int, eos: int | None) -> Tokenizer:
    """A transformers fast tokenizer for llguidance (~1 s: build once); masks cut to the model vocabulary."""
    _llguidance()
    import llguidance.hf

    ll = llguidance.hf.from_tokenizer(tokenizer, n_vocab=max(vocab, len(tokenizer)),
                                      eos_token=eos if eos is not None else tokenizer.eos_token_id)
    return Tokenizer(ll, vocab, eos, getattr(tokenizer, "name_or_path", "hf") or "hf")


# ---------------------------------------------------------------- grammar constraints (llguidance)


def grammar_text(kind: str, source) -> str:
    """llguidance's grammar for a regex / JSON schema (str or dict) / Lark grammar."""
    llg = _llguidance()
    if kind not in KINDS:
        raise SpecDecInputError(f"constraint kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "regex":
        return llg.LLMatcher.grammar_from_regex(source)
    if kind == "lark":
        return llg.LLMatcher.grammar_from_lark(source)
    if isinstance(source, str):
        try:
            source = json.loads(source)
        except json.JSONDecodeError as exc:
            raise SpecDecInputError(f"json_schema is not valid JSON ({exc.msg} at character {exc.pos})") from None
    try:
        return llg.LLMatcher.grammar_from_json_schema(source)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise SpecDecInputError(f"json_schema rejected by llguidance: {_one_line(exc)}") from None


def _one_line(text) -> str:
    return " ".join(str(text).split())[:300]


class GrammarConstraint(TokenConstraint):
    """A regex / JSON schema / Lark grammar compiled by llguidance for one tokenizer."""

    def __init__(self, kind: str, source, tokenizer: Tokenizer):
        super().__init__()
        llg = _llguidance()
        self.kind, self.source, self.tokenizer, self.vocab = kind, source, tokenizer, tokenizer.vocab
        text = source if isinstance(source, str) else json.dumps(source)
        self.description = f"{kind}={text}"
        grammar = grammar_text(kind, source)
        error = llg.LLMatcher.validate_grammar(grammar, tokenizer.ll)
        if error and not error.startswith("WARNING"):
            raise SpecDecInputError(f"{kind} rejected by llguidance: {_one_line(error)}")
        start = llg.LLMatcher(tokenizer.ll, grammar, log_level=0)
        if start.is_error():
            raise SpecDecInputError(f"{kind} rejected by llguidance: {_one_line(start.get_error())}")
        self._states = {(): start}  # generated prefix -> matcher in the state after it (never mutated)
        if not bool(self.allowed(()).any()):
            raise SpecDecInputError(f"{self.description} allows no token of this vocabulary ({tokenizer.name}) "
                                    "at the first position: it accepts nothing here")

    def state(self, generated: tuple[int, ...]):
        """The matcher after `generated` (advanced from the longest known prefix; earlier states kept)."""
        matcher = self._states.get(generated)
        if matcher is None:
            parent = self.state(generated[:-1])
            matcher = parent.deep_copy()
            matcher.consume_token(generated[-1])  # a disallowed token: the matcher enters its error state
            self._states[generated] = matcher
        return matcher

    def accepting(self, generated: Sequence[int]) -> bool:
        return bool(self.state(tuple(generated)).is_accepting())

    def _mask(self, generated, context):
        eos = self.tokenizer.eos
        if eos is not None and eos in generated:  # after EOS: nothing more is emitted
            return torch.ones(self.vocab, dtype=torch.bool)
        matcher = self.state(generated)
        if matcher.is_error():
            # After a token the automaton does not allow (a draft that verification must reject) nothing is
            # emitted: the position's law is never used, so it is left unconstrained. A complete match
            # (matcher stopped) allows EOS alone (none of the model's tokens if it has no EOS: a dead end).
            return torch.ones(self.vocab, dtype=torch.bool)
        bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        mask = torch.from_numpy(bits[: self.vocab].astype(bool))
        if self.tokenizer.check_each:
            for t in mask.nonzero().flatten().tolist():
                if t != eos and matcher.validate_tokens([t]) != 1:
                    mask[t] = False
        return mask


class PrefixFnConstraint(TokenConstraint):
    """transformers-style `prefix_allowed_tokens_fn(batch_id, input_ids) -> list[int]` as a constraint."""

    def __init__(self, fn: Callable, vocab: int):
        super().__init__()
        self.fn, self.vocab = fn, vocab
        self.description = f"prefix_allowed_tokens_fn={getattr(fn, '__name__', 'fn')}"

    def allowed(self, generated, context=()):
        return self._mask(tuple(generated), tuple(context) or tuple(generated))  # the fn may read the prompt

    def _mask(self, generated, context):
        ids = list(self.fn(0, torch.tensor(context, dtype=torch.long)))
        mask = torch.zeros(self.vocab, dtype=torch.bool)
        if any(not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < self.vocab for t in ids):
            raise SpecDecInputError(f"prefix_allowed_tokens_fn returned ids outside [0, {self.vocab}): {ids[:8]}")
        mask[ids] = True
        return mask


def as_constraint(constraint, prefix_allowed_tokens_fn, vocab: int) -> TokenConstraint | None:
    """generate()'s `constraint` / `prefix_allowed_tokens_fn` keywords -> one TokenConstraint (or None)."""
    if constraint is not None and prefix_allowed_tokens_fn is not None:
        raise SpecDecInputError("give either constraint or prefix_allowed_tokens_fn, not both")
    if prefix_allowed_tokens_fn is not None:
        if not callable(prefix_allowed_tokens_fn):
            raise SpecDecInputError("prefix_allowed_tokens_fn must be callable (batch_id, input_ids) -> list[int]")
        return PrefixFnConstraint(prefix_allowed_tokens_fn, vocab)
    if constraint is None:
        return None
    if not isinstance(constraint, TokenConstraint):
        raise SpecDecInputError(f"constraint must be a specdec_ref.constraints.TokenConstraint (e.g. "
                                f"GrammarConstraint(kind, source, tokenizer)), got {type(constraint).__name__}")
    if constraint.vocab != vocab:
        raise SpecDecInputError(f"constraint masks {constraint.vocab} tokens, the models have {vocab}")
    return constraint
