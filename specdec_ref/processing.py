"""Logits processing shared by target and draft: logits → (bias, penalties, masks) → temperature → top-k
→ top-p → min_p → softmax (the full order is documented at `process`).

The same function turns target logits into p and draft logits into q, so the two can never be
processed differently (a real bug class: transformers PR #28166, vLLM #9834).
Semantics follow transformers' logits warpers so that engines built on it are judged against the
law they intend: top-k keeps every logit ≥ the k-th largest (ties kept); top-p keeps the smallest
descending-probability prefix whose mass reaches top_p (the token that crosses it is kept).
Temperature 0 means greedy: an exact one-hot on the argmax (first index on ties), never a tiny
temperature.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from specdec_ref.errors import SpecDecInputError


def check_sampling_params(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Raise SpecDecInputError naming the argument if a sampling parameter is out of range."""
    if temperature is None or not isinstance(temperature, (int, float)) or math.isnan(temperature):
        raise SpecDecInputError(f"temperature must be a number >= 0 (0 means greedy), got {temperature!r}")
    if temperature < 0 or math.isinf(temperature):
        raise SpecDecInputError(f"temperature must be finite and >= 0 (0 means greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise SpecDecInputError(f"top_k must be an integer >= 1 or None (no top-k), got {top_k!r}")
    if top_p is not None and (not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0):
        raise SpecDecInputError(f"top_p must be in (0, 1] or None (no top-p), got {top_p!r}")


def check_finite_logits(logits: torch.Tensor, name: str = "logits") -> None:
    """NaN / +inf logits make every downstream probability meaningless: refuse them loudly."""
    bad = torch.isnan(logits) | (logits == math.inf)
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0].tolist())
        raise SpecDecInputError(
            f"{name} contains NaN or +inf (first at index {where}); check the model's numerics "
            "(e.g. fp16 overflow) before verifying"
        )
    if bool((logits == -math.inf).all(dim=-1).any()):
        raise SpecDecInputError(f"{name} has a row where every logit is -inf: no token can be sampled")


def logits_to_probs(
    logits: torch.Tensor,  # [..., V] float
    temperature: float,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    validate: bool = True,
) -> torch.Tensor:  # [..., V] float32 (float64 if logits are float64); rows sum to 1
    """Processed sampling distribution for each row of `logits` (temperature / top-k / top-p only)."""
    return process(logits, SamplingParams(temperature, top_k, top_p), validate=validate)


def _top_k(scores, top_k):
    if top_k >= scores.shape[-1]:
        return scores
    kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]  # [..., 1]
    return scores.masked_fill(scores < kth, -math.inf)


# Top-p first looks among this many largest scores (torch.topk: ~9x cheaper than sorting a 49k row);
# a row whose nucleus is not inside them is sorted whole, so the result is the same either way.
_TOP_P_CANDIDATES = 1024


def _top_p(scores, top_p):
    if top_p >= 1.0:
        return scores
    V = scores.shape[-1]
    if V <= _TOP_P_CANDIDATES or scores.numel() == 0:
        return _top_p_sorted(scores, top_p)
    flat = scores.reshape(-1, V)
    top_scores, top_index = torch.topk(flat, _TOP_P_CANDIDATES, dim=-1)  # [N, k], descending
    # The full row's softmax at the candidates, accumulated in float64 (the sorted path's float32
    # cumulative sum can differ from it only where the prefix mass is within ~1e-6 of top_p).
    log_total = torch.logsumexp(flat, dim=-1, keepdim=True).double()
    top_probs = (top_scores.double() - log_total).exp()
    mass_before = top_probs.cumsum(dim=-1) - top_probs  # exclusive prefix mass, as in the sorted path
    # The last candidate already dropped: every later token is dropped too (mass_before only grows).
    inside = mass_before[:, -1] >= top_p  # [N]; False for NaN (a row without finite scores)
    keep = torch.zeros_like(flat, dtype=torch.bool).scatter_(-1, top_index, mass_before < top_p)
    out = flat.masked_fill(~keep, -math.inf)
    if not bool(inside.all()):
        rows = (~inside).nonzero().squeeze(-1)
        out[rows] = _top_p_sorted(flat[rows], top_p)
    return out.view(scores.shape)


def _top_p_sorted(scores, top_p):
    sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
    sorted_probs = sorted_scores.softmax(dim=-1, dtype=torch.float64)  # the boundary decided in float64
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # exclusive prefix mass
    drop_sorted = mass_before >= top_p  # the first token always has mass_before == 0: kept
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return scores.masked_fill(drop, -math.inf)


# ---------------------------------------------------------------- the parameters engines serve beyond T / top-k / top-p

# The documented order (transformers' own processor order, with OpenAI's additive penalties next to
# the repetition penalty as vLLM applies them):
#   logits → constraint mask (structured outputs: disallowed tokens to −inf) → logit_bias → repetition_penalty → frequency/presence penalties → bad_words_ids
#          → min_new_tokens (EOS masked) → temperature → top-k → top-p → min_p → softmax.
# Temperature 0 (greedy) is the argmax of the scores after every step before temperature.
# Known alternative conventions (`ORDERS`; what other codebases do, used to tell a convention from a bug):
#   "top_p_before_temperature": top-k/top-p/min_p cut on the temperature-1 law, temperature applied after;
#   "top_k_after_top_p": top-p before top-k;
#   "penalties_after_temperature": the additive terms (logit_bias, frequency, presence) added to the
#   temperature-scaled logits (the repetition penalty commutes with temperature: it rescales by sign);
#   "llama_cpp": llama.cpp's sampler chain — top-k → top-p → min-p on the temperature-1 law, temperature
#   after them (as "top_p_before_temperature") — with llama.cpp's defaults for what a request leaves
#   unset: top-k 40, top-p 0.95, min-p 0.05 (`LLAMA_CPP_DEFAULTS`).
ORDERS = ("standard", "top_p_before_temperature", "top_k_after_top_p", "penalties_after_temperature", "llama_cpp")
LLAMA_CPP_DEFAULTS = {"top_k": 40, "top_p": 0.95, "min_p": 0.05}
PARAM_NAMES = ("min_p", "logit_bias", "repetition_penalty", "frequency_penalty", "presence_penalty",
               "bad_words_ids", "min_new_tokens", "constraint")
# The constraint mask first: every later step keeps −inf at −inf (bias and penalties add or scale finite
# amounts, temperature divides), so its only interaction is with the cuts, which see the constrained law.


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Every sampling parameter of one request. Defaults are no-ops; `extras()` are the non-default
    parameters beyond temperature / top-k / top-p (the keyword arguments an implementation must accept)."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None  # drop tokens with p < min_p · max p (transformers MinPLogitsWarper)
    logit_bias: tuple[tuple[int, float], ...] | None = None  # ((id, bias), ...) added to the raw logits
    repetition_penalty: float | None = None  # transformers: over prompt + generated, logit>0 → /r, else ·r
    frequency_penalty: float = 0.0  # OpenAI: − f · count(token in generated tokens)
    presence_penalty: float = 0.0  # OpenAI: − f · [token in generated tokens]
    bad_words_ids: tuple[tuple[int, ...], ...] | None = None  # a word's last id banned after its other ids
    min_new_tokens: int = 0  # EOS masked while fewer tokens than this have been generated
    # Structured outputs: a specdec_ref.constraints.TokenConstraint; tokens it does not allow after the
    # generated tokens so far are masked (EOS only where the automaton accepts).
    constraint: object | None = None

    def __post_init__(self):  # dicts / lists from callers become hashable tuples
        if isinstance(self.logit_bias, dict):
            object.__setattr__(self, "logit_bias", tuple(sorted(self.logit_bias.items())))
        if self.bad_words_ids is not None and not isinstance(self.bad_words_ids, tuple):
            object.__setattr__(self, "bad_words_ids", tuple(tuple(w) for w in self.bad_words_ids))

    def extras(self) -> dict:
        """The non-default parameters beyond temperature / top-k / top-p, as generate() keyword arguments."""
        out = {}
        for name in PARAM_NAMES:
            value = getattr(self, name)
            if value != _DEFAULTS[name]:
                out[name] = ({int(k): float(b) for k, b in value} if name == "logit_bias" else
                             [list(w) for w in value] if name == "bad_words_ids" else value)
        return out

    @property
    def needs_history(self) -> bool:
        """True when the law depends on the tokens so far (penalties, bad words, minimum length)."""
        return bool(self.repetition_penalty not in (None, 1.0) or self.frequency_penalty or self.presence_penalty
                    or self.bad_words_ids or self.min_new_tokens or self.constraint is not None)

    def without(self, *names: str) -> SamplingParams:
        """These parameters reset to their no-op defaults (mutants drop one part of the processing)."""
        return dataclasses.replace(self, **{n: _DEFAULTS[n] for n in names})


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SamplingParams)}
PENALTIES = ("repetition_penalty", "frequency_penalty", "presence_penalty")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_params(params: SamplingParams, vocab: int | None = None) -> None:
    """SpecDecInputError (one line, naming the parameter) for any out-of-range parameter."""
    check_sampling_params(params.temperature, params.top_k, params.top_p)
    bad = None
    if params.min_p is not None and (not _number(params.min_p) or not 0.0 <= params.min_p <= 1.0):
        bad = f"min_p must be in [0, 1] or None, got {params.min_p!r}"
    elif params.repetition_penalty is not None and (not _number(params.repetition_penalty)
                                                    or params.repetition_penalty <= 0):
        bad = f"repetition_penalty must be a finite number > 0 (1 = off), got {params.repetition_penalty!r}"
    elif not (_number(params.frequency_penalty) and _number(params.presence_penalty)):
        bad = (f"frequency_penalty and presence_penalty must be finite numbers, got "
               f"{params.frequency_penalty!r}, {params.presence_penalty!r}")
    elif (isinstance(params.min_new_tokens, bool) or not isinstance(params.min_new_tokens, int)
          or params.min_new_tokens < 0):
        bad = f"min_new_tokens must be an integer >= 0, got {params.min_new_tokens!r}"
    bad = bad or _check_ids(params, vocab) or _check_constraint(params.constraint, vocab)
    if bad:
        raise SpecDecInputError(bad)


def _check_ids(params: SamplingParams, vocab: int | None) -> str | None:
    def bad_id(t) -> bool:
        return isinstance(t, bool) or not isinstance(t, int) or t < 0 or (vocab is not None and t >= vocab)

    where = f"[0, {vocab})" if vocab is not None else ">= 0"
    for token, bias in params.logit_bias or ():
        if bad_id(token):
            return f"logit_bias keys must be token ids in {where}, got {token!r}"
        if not _number(bias):
            return f"logit_bias values must be finite numbers, got {bias!r} for token {token}"
    for word in params.bad_words_ids or ():
        if not word or any(bad_id(t) for t in word):
            return f"bad_words_ids must be non-empty lists of token ids in {where}, got {list(word)!r}"
    return None


def _check_constraint(constraint, vocab: int | None) -> str | None:
    if constraint is None:
        return None
    from specdec_ref.constraints import TokenConstraint

    if not isinstance(constraint, TokenConstraint):
        return f"constraint must be a specdec_ref.constraints.TokenConstraint, got {type(constraint).__name__}"
    if vocab is not None and constraint.vocab != vocab:
        return f"the constraint masks {constraint.vocab} tokens, the logits have {vocab}"
    return None


@dataclasses.dataclass(frozen=True)
class History:
    """What the law at a position depends on beyond its logits: the tokens before it."""

    seq: torch.Tensor  # [..., L] int64 prompt + generated tokens so far, left-padded with -1 (latest last)
    n_generated: torch.Tensor  # [...] int64 how many of the last tokens in seq were generated
    eos: tuple[int, ...] = ()  # EOS ids (min_new_tokens masks them)


def history_of(rows: list[torch.Tensor], n_generated: list[int], eos=()) -> History:
    """Left-pad ragged 1-D token rows (prompt + generated) into a History."""
    width = max(len(r) for r in rows)
    seq = torch.full((len(rows), width), -1, dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            seq[i, width - len(r):] = r.to("cpu", torch.long)
    return History(seq, torch.tensor(n_generated, dtype=torch.long), tuple(eos))


def extend_history(history: History, drafts: torch.Tensor) -> History:  # drafts [A, g]
    """[A] histories -> [A, g+1]: position i has the first i drafts appended (the block's accepted prefix)."""
    A, g = drafts.shape
    seq = torch.cat([history.seq, drafts.to(history.seq.device)], dim=1)  # [A, L+g]
    shifted = [torch.cat([torch.full((A, g - i), -1, dtype=torch.long), seq[:, : seq.shape[1] - (g - i)]], 1)
               for i in range(g + 1)]
    n = history.n_generated.unsqueeze(1) + torch.arange(g + 1)  # [A, g+1]
    return History(torch.stack(shifted, dim=1), n, history.eos)


def _penalize(scores, params, history):
    """logit_bias, repetition / frequency / presence penalties, bad words, EOS before min_new_tokens."""
    seq = history.seq.to(scores.device)
    valid = seq >= 0
    generated = valid & (torch.arange(seq.shape[-1], device=seq.device) >= seq.shape[-1]
                         - history.n_generated.to(seq.device).unsqueeze(-1))
    ids = seq.clamp_min(0)
    if params.repetition_penalty not in (None, 1.0):
        seen = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, ids, valid)
        r = params.repetition_penalty
        scores = torch.where(seen, torch.where(scores < 0, scores * r, scores / r), scores)
    if params.frequency_penalty or params.presence_penalty:
        counts = torch.zeros_like(scores).scatter_add_(-1, ids, generated.to(scores.dtype))
        scores = scores - params.frequency_penalty * counts - params.presence_penalty * (counts > 0)
    return _mask_words_and_eos(scores, params, seq, history)


def _mask_words_and_eos(scores, params, seq, history):
    banned = torch.zeros_like(scores, dtype=torch.bool)  # [..., V]
    for word in params.bad_words_ids or ():
        head = torch.tensor(word[:-1], dtype=torch.long, device=seq.device)
        if len(head) > seq.shape[-1]:
            continue
        hit = (seq[..., seq.shape[-1] - len(head):] == head).all(-1)  # [...]; an empty head always hits
        banned[..., word[-1]] |= hit
    if params.min_new_tokens and history.eos:
        early = (history.n_generated.to(scores.device) < params.min_new_tokens)  # [...]
        for e in history.eos:
            banned[..., e] |= early
    return scores.masked_fill(banned, -math.inf)


def _constrain(scores, constraint, history):
    """Tokens the constraint does not allow after each row's generated tokens -> −inf."""
    allowed = constraint.mask_rows(history.seq, history.n_generated).to(scores.device)  # [..., V]
    empty = ~allowed.any(dim=-1)
    if bool(empty.any()):
        index = tuple(int(i) for i in empty.nonzero()[0])
        seq = history.seq[index].tolist()
        n = int(history.n_generated[index])
        raise SpecDecInputError(f"the constraint ({constraint}) allows no token after the generated tokens "
                                f"{seq[len(seq) - n:] if n else []}: nothing can be sampled (a dead end, or a "
                                "complete match and the model has no EOS to end on)")
    return scores.masked_fill(~allowed, -math.inf)


def _bias(scores, params):
    if not params.logit_bias:
        return scores
    bias = torch.zeros(scores.shape[-1], dtype=scores.dtype, device=scores.device)
    for token, b in params.logit_bias:
        bias[token] += b
    return scores + bias


def _min_p(scores, min_p):
    probs = scores.softmax(dim=-1)
    return scores.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), -math.inf)


def process(
    logits: torch.Tensor,  # [..., V]
    params: SamplingParams,
    history: History | None = None,  # leading dims as logits'; needed when params.needs_history
    *,
    order: str = "standard",
    validate: bool = True,
) -> torch.Tensor:  # [..., V] float32 (float64 for float64 logits); rows sum to 1
    """The processed sampling law under `params` (the one function for p and q), in the documented order."""
    if validate:
        check_params(params, logits.shape[-1])
        check_finite_logits(logits)
        if order not in ORDERS:
            raise SpecDecInputError(f"processing order must be one of {', '.join(ORDERS)}, got {order!r}")
    if params.needs_history and history is None:
        raise SpecDecInputError("penalties, bad_words_ids and min_new_tokens need the tokens so far (history)")
    if order == "llama_cpp":  # llama.cpp's defaults for the unset cuts, then its order
        unset = {k: v for k, v in LLAMA_CPP_DEFAULTS.items() if getattr(params, k) is None}
        params = dataclasses.replace(params, **unset) if unset else params
        order = "top_p_before_temperature"
    work_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    scores = logits.to(work_dtype)
    if params.constraint is not None:
        scores = _constrain(scores, params.constraint, history)
    late_bias = order == "penalties_after_temperature" and params.temperature != 0
    additive = ("logit_bias", "frequency_penalty", "presence_penalty")
    early = params.without(*additive) if late_bias else params
    scores = _bias(scores, early)
    if early.needs_history:
        scores = _penalize(scores, early, history)
    if bool((scores == -math.inf).all(dim=-1).any()):
        raise SpecDecInputError("the bad words / minimum length mask every token of a row: nothing can be sampled")
    if params.temperature == 0:
        return torch.nn.functional.one_hot(scores.argmax(dim=-1), scores.shape[-1]).to(work_dtype)
    if order != "top_p_before_temperature":
        scores = scores / params.temperature
    if late_bias:
        late = SamplingParams(**{n: getattr(params, n) for n in additive})
        scores = _bias(scores, late)
        scores = _penalize(scores, late, history) if late.needs_history else scores
    scores = _cut(scores, params, top_k_first=order != "top_k_after_top_p")
    if order == "top_p_before_temperature":
        scores = scores / params.temperature
    return scores.softmax(dim=-1)


def _cut(scores, params, *, top_k_first: bool):
    """top-k and top-p (in either order), then min_p: masks only, the kept scores are unchanged."""
    steps = [("k", params.top_k), ("p", params.top_p)]
    for kind, value in steps if top_k_first else steps[::-1]:
        if value is not None:
            scores = _top_k(scores, value) if kind == "k" else _top_p(scores, value)
    return _min_p(scores, params.min_p) if params.min_p else scores
