"""The context catalogue of the generation and engine levels: how its contexts are built. Its sizes (block
sizes, prompt lengths, contexts per family, continuation length) are policy, in suites/catalogues/contexts.py,
read through harness.policy; the campaign that measures what it buys is suites/campaigns/contexts.py.

A sampling cell tests the law of a whole generate() at the contexts it is given. Two prompts of four
tokens (the toy pairs' own) reach absolute positions 4–7 only; bugs that live at a cache-block boundary,
after the first few steps, once a token repeats, or when two prompts share a prefix never show there.
So the plan pools a randomized PIT (exactly U(0, 1) under H0 at every context: harness/stats/pit.py) over
many contexts with a few samples each:

- **random** (toy pairs): random-token prompts whose lengths are spread so that the generated positions
  P … P + L − 1 cover every residue of the cache-block sizes BLOCK_SIZES (16 … 256) and each continuation
  of L = CONTINUATION tokens passes at least two 16-token boundaries (any 33 consecutive positions hold
  two multiples of 16); prompts come in pairs sharing their first SHARED_PREFIX tokens (one cache block),
  so a prefix cache keyed on too short a prefix serves one prompt the other's keys;
- **resampled** (any pair): prefixes of the target's own earlier samples (plain target sampling, T = 1,
  from a short random start), cut at lengths spread the same way: contexts the model itself makes;
- **prompts**: the pair's own prompts (the toy pairs' eight 4-token prompts), now with long continuations;
- **chat / code / summarize** (real pairs): the project's prompt set (suites/prompts/prompts.jsonl)
  through the tokenizer's chat template.

Contexts of one length share one generate() call (the contract takes [B, T] prompts without padding).
"""

from __future__ import annotations

import collections.abc
import dataclasses

import torch

from harness.policy import catalogue as catalogue_module

POLICY_NAMES = ("BLOCK_SIZES", "CONTINUATION", "SHARED_PREFIX", "LENGTHS", "PAIRS_PER_LENGTH", "RESAMPLED_CHAINS",
                "RESAMPLED_LENGTHS", "REAL_KINDS", "REAL_RESAMPLED")


def _policy():
    """The catalogue's sizes (suites/catalogues/contexts.py)."""
    return catalogue_module("contexts")


def __getattr__(name: str):  # harness.contexts.BLOCK_SIZES etc.: read from the policy, never written here
    if name in POLICY_NAMES:
        return getattr(_policy(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass(frozen=True)
class Context:
    tokens: tuple[int, ...]
    family: str  # "random", "resampled", "chat", ...
    name: str  # stable id within the catalogue, e.g. "random/len37/b"


@dataclasses.dataclass(frozen=True)
class Slot:
    """What a plan needs of a context before any token of it is drawn: its family, name and length."""

    family: str
    name: str
    length: int


class Catalogue(collections.abc.Sequence):
    """The contexts of a plan, built on first use. The resampled family samples the target (seconds on a toy pair
    under load), and a run that stops at its first decided cell never reaches the contexts cells; so the plan is
    declared from `slots` (families, names, lengths: known without sampling) and the contexts are built the first
    time one is read (indexing or iterating)."""

    def __init__(self, slots: list[Slot], build):
        self.slots, self._build, self._items = list(slots), build, None

    def __len__(self) -> int:
        return len(self.slots)

    def __getitem__(self, index):
        return self.items[index]

    @property
    def built(self) -> bool:
        return self._items is not None

    @property
    def items(self) -> list[Context]:
        if self._items is None:
            items = list(self._build())
            got = [Slot(c.family, c.name, len(c.tokens)) for c in items]
            if got != self.slots:  # the declared plan and what was built must be the same catalogue
                raise RuntimeError(f"context catalogue built {len(got)} contexts unlike its {len(self.slots)} slots")
            self._items = items
        return self._items


def slots(contexts) -> list[Slot]:
    """The slots of a catalogue (a Catalogue's without building it; a plain list's from its contexts)."""
    if isinstance(contexts, Catalogue):
        return contexts.slots
    return [Slot(c.family, c.name, len(c.tokens)) for c in contexts or ()]


def random_contexts(vocab: int, *, seed: int = 0, lengths=None, pairs: int | None = None) -> list[Context]:
    """`pairs` pairs of random-token prompts per length; a pair shares its first SHARED_PREFIX tokens when longer."""
    policy = _policy()
    lengths, pairs, shared = lengths or policy.LENGTHS, pairs or policy.PAIRS_PER_LENGTH, policy.SHARED_PREFIX
    g = torch.Generator().manual_seed(seed)
    out = []
    for length in lengths:
        for i in range(pairs):
            a = torch.randint(0, vocab, (length,), generator=g)
            b = torch.randint(0, vocab, (length,), generator=g)
            if length > shared:
                b[:shared] = a[:shared]
                while torch.equal(a, b):  # a pair must differ after the shared block
                    b[shared:] = torch.randint(0, vocab, (length - shared,), generator=g)
            out += [Context(tuple(a.tolist()), "random", f"random/len{length}/{i}a"),
                    Context(tuple(b.tolist()), "random", f"random/len{length}/{i}b")]
    return out


def resampled_slots(chains: int | None = None, lengths=None) -> list[Slot]:
    """The slots of resampled_contexts (same order and names), without sampling."""
    chains, lengths = chains or _policy().RESAMPLED_CHAINS, lengths or _policy().RESAMPLED_LENGTHS
    return [Slot("resampled", f"resampled/chain{c}/len{n}", n) for c in range(chains) for n in lengths]


def resampled_contexts(target, vocab: int, *, seed: int = 0, chains: int | None = None,
                       lengths=None) -> list[Context]:
    """Prefixes of the target's own samples: `chains` plain T = 1 continuations of 4 random tokens, cut at `lengths`
    (names as resampled_slots)."""
    chains, lengths = chains or _policy().RESAMPLED_CHAINS, lengths or _policy().RESAMPLED_LENGTHS
    g = torch.Generator().manual_seed(seed + 1)
    start = torch.randint(0, vocab, (chains, 4), generator=g)
    sample = target_samples(target, start, max(lengths) - 4, vocab, seed=seed + 2)
    out = []
    for c in range(chains):
        chain = start[c].tolist() + sample[c].tolist()
        out += [Context(tuple(chain[:n]), "resampled", f"resampled/chain{c}/len{n}") for n in lengths]
    return out


def target_samples(target, start: torch.Tensor, new_tokens: int, vocab: int, *, seed: int) -> torch.Tensor:
    """[chains, new_tokens] plain T = 1 samples of `target` after `start` [chains, T0]: one KV-cached forward per
    token (the model's own cache: whatever class the model builds on its first pass, KV, recurrent, conv or
    windowed), the law softmax(logits[:vocab]) in float64. These only make contexts (the ground truth of every test
    is the scorer at whatever context it is given), so this loop need not be the reference's generate(); it is
    ~20x faster than the reference's per-row bookkeeping on the toy pairs."""
    from specdec_ref.runners import cache_kwarg, returned_cache

    g = torch.Generator().manual_seed(seed)
    device = next(target.parameters()).device
    ids, out = start.to(device), []
    past: dict = {}  # empty on the first pass: the model builds its own cache
    length = ids.shape[1]
    with torch.inference_mode():
        for _ in range(new_tokens):
            positions = torch.arange(length - ids.shape[1], length, device=device).expand(len(ids), -1)
            step = target(input_ids=ids, attention_mask=torch.ones(len(ids), length, dtype=torch.long, device=device),
                          position_ids=positions, use_cache=True, **past)
            past = {cache_kwarg(type(target)): returned_cache(step)}
            probs = torch.softmax(step.logits[:, -1, :vocab].double().cpu(), -1)
            nxt = torch.multinomial(probs, 1, generator=g)
            out.append(nxt)
            ids = nxt.to(device)
            length += 1
    return torch.cat(out, 1) if out else torch.zeros(len(start), 0, dtype=torch.long)


def real_contexts(tokenizer, kinds=None) -> list[Context]:
    """The project's chat / code / summarize prompts, encoded with the tokenizer's chat template."""
    from harness.prompts import encode_prompts, load_prompts

    kinds = kinds or _policy().REAL_KINDS
    out = []
    for kind in kinds:
        prompts = load_prompts(kind)
        for p, ids in zip(prompts, encode_prompts(tokenizer, prompts), strict=True):
            out.append(Context(tuple(ids), kind, f"{kind}/{p.id}"))
    return out


def catalogue(pair, *, seed: int = 0) -> list[Context]:
    """The contexts of the generation / engine batteries for `pair`: random + resampled on small vocabularies
    (toy pairs), the prompt set + resampled on real pairs (those with a tokenizer)."""
    tokenizer = getattr(pair, "tokenizer", None)
    if tokenizer is not None:
        chains, lengths = _policy().REAL_RESAMPLED
        return real_contexts(tokenizer) + resampled_contexts(pair.target, pair.vocab_size, seed=seed, chains=chains,
                                                             lengths=lengths)
    key = ("_contexts", seed)
    if key not in pair.meta:  # built once per pair object (the resampled family samples the target) ...
        shared = (pair.name, pair.vocab_size, seed, str(next(pair.target.parameters()).dtype))
        if shared not in _TOY_CACHE:  # ... and once per process for a registered toy pair (same models by name)
            own = [Context(tuple(p), "prompts", f"prompts/{i}") for i, p in enumerate(pair.prompts or [])]
            built = own + random_contexts(pair.vocab_size, seed=seed) + resampled_contexts(
                pair.target, pair.vocab_size, seed=seed)
            if not _registered_toy(pair.name):
                pair.meta[key] = built
                return built
            _TOY_CACHE[shared] = built
        pair.meta[key] = _TOY_CACHE[shared]
    return pair.meta[key]


_TOY_CACHE: dict = {}


def _registered_toy(name: str) -> bool:
    from harness.models.toy_pairs import PAIRS

    return any(spec.name == name for spec in PAIRS)


def coverage(contexts: list[Context], continuation: int | None = None) -> dict:
    """What the catalogue reaches: per block size, the residues of the generated positions it misses and the
    fewest boundaries a continuation passes (the catalogue's requirements, checked by tests/check/test_contexts.py)."""
    continuation = continuation or _policy().CONTINUATION
    out = {}
    for size in _policy().BLOCK_SIZES:
        reached = {(len(c.tokens) + j) % size for c in contexts for j in range(continuation)}
        crossings = [sum((len(c.tokens) + j) % size == 0 for j in range(continuation)) for c in contexts]
        out[size] = {"missing_residues": sorted(set(range(size)) - reached), "min_boundaries_passed": min(crossings),
                     "contexts_straddling": sum(x > 0 for x in crossings)}
    return out


def plan(pair, *, seed: int = 0) -> dict:
    """The `contexts` argument of harness.check.generation.GenerationSource for `pair`."""
    policy = _policy()
    return {"contexts": lazy_catalogue(pair, seed=seed), "block_sizes": policy.BLOCK_SIZES,
            "length": policy.CONTINUATION if pair.vocab_size <= 64 else None}


def lazy_catalogue(pair, *, seed: int = 0) -> Catalogue:
    """catalogue(pair, seed) as a Catalogue: its slots now (the cheap families built, the resampled family's
    declared), the contexts when first read."""
    tokenizer = getattr(pair, "tokenizer", None)
    if tokenizer is not None:
        chains, lengths = _policy().REAL_RESAMPLED
        eager = real_contexts(tokenizer)
    else:
        chains = lengths = None
        eager = [Context(tuple(p), "prompts", f"prompts/{i}") for i, p in enumerate(pair.prompts or [])]
        eager += random_contexts(pair.vocab_size, seed=seed)
    return Catalogue(slots(eager) + resampled_slots(chains, lengths), lambda: catalogue(pair, seed=seed))
