"""Generation-level losslessness check (docs/CONTRACT.md §1b): whole generate() over two causal LMs.

The ground truth is the target alone with the shared processing (specdec_ref.processing):
- **joint law** (toy pairs, V ≤ 64): the exact law of every L-token continuation of a prompt is
  enumerated in float64 and the implementation's continuations are tested against it (support,
  pooled Pearson and G on the likeliest sequences + the rest);
- **randomized PIT** (any pair, real models included): every generated token is teacher-forced
  through the target in float64 and u = F(y−) + V·p(y) is computed in surprisal order; under H0 the
  u are iid U(0, 1) (Czado, Gneiting & Held 2009), tested pooled, per position, and for serial
  independence within sequences (reused random numbers show up there);
- **greedy** (temperature 0): token equality with the target's own greedy output; at the first
  divergence the target's logit margin there tells a near-tie numerics divergence (reported) from
  a logic bug (failed).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import math
import time
from collections.abc import Callable

import numpy as np
import torch

from harness.adapters.calling import MalformedOutput
from harness.check.engine import (
    Cell,
    Check,
    CheckConfig,
    MalformedTrials,
    TrialSource,
    run_battery,
)
from harness.check.report import CheckReport, deterministic_result
from harness.check.sampler import GATE_MIN_EXPECTED, call_impl
from harness.check.scoring import score_continuations
from harness.check.streams import numpy_rng, seed_global
from harness.check.structured import bind_constraints, checks_for, setting_record
from harness.contexts import slots
from harness.errors import HarnessError
from harness.pairs import ModelPair
from harness.policy import catalogue
from harness.stats import (
    TestResult,
    mass_above_descending,
    per_position_uniformity,
    pit_from_masses,
    pooled_gtest,
    pooled_pearson,
    probit_mean_test,
    probit_per_stratum_test,
    serial_independence_test,
    stratified_uniformity_test,
    support_check,
    uniformity_test,
)
from specdec_ref.errors import SpecDecInputError
from specdec_ref.generate import autoregressive_generate, default_eos, eos_set
from specdec_ref.processing import (
    ORDERS,
    PARAM_NAMES,
    History,
    SamplingParams,
    check_params,
    extend_history,
    process,
)

MAX_JOINT_CELLS = 64  # joint-law omnibus tests: the 63 likeliest continuations + the rest
ENUMERATION_MAX_VOCAB = 64
NEAR_TIE = 1e-3  # logit margin below which a greedy divergence is attributed to numerics


@dataclasses.dataclass(frozen=True)
class Setting(SamplingParams):
    """One sampling setting of the battery: every parameter of specdec_ref.processing.SamplingParams."""

    @property
    def label(self) -> str:
        parts = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top_k={self.top_k}")
        if self.top_p is not None:
            parts.append(f"top_p={self.top_p:g}")
        for name, value in self.extras().items():
            text = (" ".join(f"{k}:{b:+g}" for k, b in value.items()) if name == "logit_bias" else
                    "|".join(".".join(map(str, w)) for w in value) if name == "bad_words_ids" else
                    str(value) if name == "constraint" else f"{value:g}")
            parts.append(text if name == "constraint" else f"{name}={text}")  # "regex=...", last (may hold commas)
        return ",".join(parts)


def default_settings() -> tuple[Setting, ...]:
    """The policy's default sampling settings (suites/catalogues/generation.py), in run order."""
    return tuple(catalogue("generation").DEFAULT_SETTINGS)


def parameter_settings() -> tuple[Setting, ...]:
    """The policy's `battery`: every sampling parameter alone, then a combination."""
    return tuple(catalogue("generation").PARAMETER_SETTINGS)


def target64(pair: ModelPair):
    """A float64 copy of the target for exact conditionals (cached on the pair); float32 where a kernel refuses
    float64 (harness.models.precision: the reason is kept in pair.meta["score_precision_note"])."""
    if "_target64" not in pair.meta:
        from harness.models.precision import scoring_copy

        pair.meta["_target64"], pair.meta["score_precision_note"] = scoring_copy(pair.target)
    return pair.meta["_target64"]


def _next_probs(model, seqs: torch.Tensor, setting: Setting, vocab: int, n_generated: int = 0, eos=(),
                order: str = "standard") -> torch.Tensor:
    """Processed next-token law after each full sequence in seqs [N, L] -> [N, V] float64.

    The last `n_generated` tokens of each sequence are the generated ones (penalties count them)."""
    with torch.inference_mode():
        logits = model(input_ids=seqs, attention_mask=torch.ones_like(seqs)).logits[:, -1, :vocab]
    history = History(seqs.cpu(), torch.full((len(seqs),), n_generated), tuple(sorted(eos)))
    return process(logits.double(), setting, history, order=order)


def continuation_law(model, prompt: list[int], length: int, setting: Setting, vocab: int,
                     eos: set[int], order: str = "standard") -> dict[tuple[int, ...], float]:
    """Exact law of the next `length` tokens (shorter if EOS) by enumeration, float64; the processing at
    each position sees the continuation so far (penalties, bad words, minimum length)."""
    law: dict[tuple[int, ...], float] = {}
    frontier = [((), 1.0)]
    for step in range(length):
        if not frontier:  # every continuation has ended with EOS
            break
        seqs = torch.tensor([list(prompt) + list(prefix) for prefix, _ in frontier], dtype=torch.long)
        probs = _next_probs(model, seqs, setting, vocab, step, eos, order).numpy()
        nxt = []
        for (prefix, mass), row in zip(frontier, probs, strict=True):
            for tok in np.nonzero(row)[0]:
                key, m = prefix + (int(tok),), mass * float(row[tok])
                (law.__setitem__(key, law.get(key, 0.0) + m) if int(tok) in eos else nxt.append((key, m)))
        frontier = nxt
    for key, m in frontier:
        law[key] = law.get(key, 0.0) + m
    return law


def total_variation(a: dict, b: dict) -> float:
    """TV between two laws given as {outcome: probability}."""
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def _rows_to_keys(tokens: torch.Tensor) -> list[tuple[int, ...]]:
    return [tuple(t for t in row if t >= 0) for row in tokens.tolist()]


def joint_law_tests(keys: list[tuple[int, ...]], law: dict, level: float, power: float, prefix: str) -> list[TestResult]:
    cells = sorted(law, key=lambda k: -law[k])
    index = {k: i for i, k in enumerate(cells)}
    p = np.array([law[k] for k in cells])
    counts = np.zeros(len(cells) + 1, dtype=np.int64)  # last cell: continuations with zero probability
    for k in keys:
        counts[index.get(k, len(cells))] += 1
    full_p = np.append(p, 0.0)
    out = [support_check(counts, full_p, f"{prefix}/joint_support", power=power)]
    head = min(MAX_JOINT_CELLS - 1, len(cells))
    coarse_counts = np.append(counts[:head], counts[head:-1].sum())
    coarse_p = np.append(p[:head], p[head:].sum())
    if coarse_p[-1] == 0:
        coarse_counts, coarse_p = coarse_counts[:-1], coarse_p[:-1]
    kw = {"level": level, "power": power, "min_expected": GATE_MIN_EXPECTED}
    out.append(pooled_pearson(coarse_counts, coarse_p, f"{prefix}/joint_pooled_pearson", **kw))
    out.append(pooled_gtest(coarse_counts, coarse_p, f"{prefix}/joint_pooled_g", **kw))
    for t in out[1:]:
        t.details.update(scope="one law", guarantee=(
            f"TV between the emitted and the target law of the whole continuation at this prompt (its {head} likeliest "
            f"values and the rest) ≥ {t.detectable_tv:.3g} is detected with probability ≥ {power:g}; a position whose "
            "law deviates by TV ε at a prefix of probability π moves it by π·ε"))
    return out


class SupportCount(int):
    """The number of scored tokens with probability 0 under the target; `boundary` more lay just outside a
    truncation cut (`relax_boundary_tokens`) and were scored under the relaxed law instead."""

    boundary: int = 0

    def __new__(cls, off: int, boundary: int = 0):
        obj = super().__new__(cls, off)
        obj.boundary = boundary
        return obj


def coarsen(probs: torch.Tensor, classes: torch.Tensor | None) -> torch.Tensor:
    """probs [..., V] with each class's mass moved onto its representative (classes: [V] representative ids)."""
    if classes is None:
        return probs
    size = probs.shape[-1]
    index = classes[:size].to(probs.device)
    if len(index) < size:  # ids beyond the tokenizer's (a padded vocabulary): each its own class
        index = torch.cat([index, torch.arange(len(index), size, device=probs.device)])
    index = index.expand(probs.shape)
    return torch.zeros_like(probs).scatter_add_(-1, index, probs)


def coarsen_law(law: dict[tuple[int, ...], float], classes: torch.Tensor | None) -> dict[tuple[int, ...], float]:
    """A continuation law (`continuation_law`) as an engine that reports tokens only up to `classes` gives it:
    each continuation up to and including its first token of a class with more than one member, that token
    as its class's representative (the rule of harness.served.pieces.ids_from_pieces)."""
    if classes is None:
        return law
    rep = classes.tolist()
    counts = np.bincount(np.asarray(rep), minlength=len(rep))
    shared = {i for i, r in enumerate(rep) if counts[r] > 1}
    out: dict[tuple[int, ...], float] = {}
    for key, mass in law.items():
        cut = []
        for t in key:
            cut.append(rep[t] if t < len(rep) else t)
            if t in shared:
                break
        out[tuple(cut)] = out.get(tuple(cut), 0.0) + mass
    return out


def relax_boundary_tokens(logits, tokens, mask, setting: Setting, history, order: str, flat_p, flat_y, p_y,
                          classes: torch.Tensor | None = None):
    """Tokens with probability 0 whose own logit, raised by the numerics margin (NEAR_TIE · the largest |logit|,
    the greedy check's margin), lands inside the support: a top-k / top-p / min-p cut that another runtime's
    arithmetic places on the other side of the token (an engine in float32 against a float64 ground truth).
    Their positions are scored under that relaxed law; a token that a mask forbids (a grammar, bad words,
    min_new_tokens, a -inf bias) stays impossible. Returns (flat_p, p_y, boundary count)."""
    off = p_y <= 0
    if not off.any():
        return flat_p, p_y, 0
    margin = NEAR_TIE * max(1.0, float(logits.abs().max()))
    bumped = logits.double().clone()
    y = tokens.clamp_min(0).unsqueeze(-1)
    bumped.scatter_add_(-1, y, torch.full(y.shape, margin, dtype=bumped.dtype))
    relaxed = coarsen(process(bumped, setting, history, order=order), classes)[mask].numpy()
    r_y = relaxed[np.arange(len(flat_y)), flat_y]
    boundary = off & (r_y > 0)
    if boundary.any():
        flat_p, p_y = flat_p.copy(), p_y.copy()
        flat_p[boundary], p_y[boundary] = relaxed[boundary], r_y[boundary]
    return flat_p, p_y, int(boundary.sum())


def _support_message(off) -> str:
    text = f"{int(off)} generated tokens have probability 0 under the target" if off else ""
    boundary = getattr(off, "boundary", 0)
    if boundary:
        text += ("; " if text else "") + (f"{boundary} tokens just outside a truncation cut (within the numerics "
                                          "margin) were scored under the relaxed law, not counted")
    return text


# Teacher-forced positions per scoring batch: one forward over many rows shares the prompt's prefill,
# and [positions, V] float64 laws stay ≈ 400 MB at V = 49,152.
PIT_BATCH_POSITIONS = 1024


def pit_values(model, prompt: list[int], tokens: torch.Tensor, setting: Setting, vocab: int, rng,
               batch: int | None = None, eos=(), order: str = "standard",
               effects: dict | None = None, classes: torch.Tensor | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Teacher-force rows of generated tokens; returns (u, position, sequence id, off-support count).

    Position j's law is processed with the prompt and the row's first j tokens as its history.
    `classes` ([V] ids: each id's class representative): a coarsened law, every class's mass on its
    representative (an engine that reports only which class a token is in; harness.served.pieces). A row's
    token must then be a representative where its class has other members, and the row ends there.
    `batch`: rows per forward (default: PIT_BATCH_POSITIONS positions' worth). `effects` (a dict) receives,
    per optional parameter of the setting, the largest TV its removal makes at a scored position
    (`parameter_effects`): 0 means the parameter never acted on these contexts."""
    batch = batch or max(1, PIT_BATCH_POSITIONS // max(1, tokens.shape[1]))
    us, positions, seq_ids, off_support, boundary = [], [], [], 0, 0
    for start in range(0, tokens.shape[0], batch):
        rows = tokens[start : start + batch]
        n_valid = (rows >= 0).sum(1)
        logits = score_continuations(model, [prompt], rows, vocab=vocab)  # [b, L, V], prompt computed once
        history = None
        if setting.needs_history:
            start_hist = History(torch.tensor(prompt).expand(len(rows), -1), torch.zeros(len(rows), dtype=torch.long),
                                 tuple(sorted(eos)))
            history = extend_history(start_hist, rows.clamp_min(0)[:, :-1])  # [b, L]: position j sees rows[:j]
        probs = coarsen(process(logits.double(), setting, history, order=order), classes)  # [b, L, V]
        mask = torch.arange(rows.shape[1]).unsqueeze(0) < n_valid.unsqueeze(1)
        if effects is not None:
            for name, tv in parameter_effects(logits.double(), probs, setting, history, mask, order).items():
                effects[name] = max(effects.get(name, 0.0), tv)
        flat_p = probs[mask].numpy()
        flat_y = rows[mask].numpy()
        p_y = flat_p[np.arange(len(flat_y)), flat_y]
        flat_p, p_y, near = relax_boundary_tokens(logits, rows, mask, setting, history, order, flat_p, flat_y, p_y,
                                                  classes)
        boundary += near
        off_support += int((p_y <= 0).sum())
        us.append(pit_from_masses(mass_above_descending(flat_p, flat_y), p_y, rng))
        positions.append(np.nonzero(mask.numpy())[1])
        seq_ids.append(np.nonzero(mask.numpy())[0] + start)
    return np.concatenate(us), np.concatenate(positions), np.concatenate(seq_ids), SupportCount(off_support, boundary)


NO_OP_TV = 1e-9  # a parameter whose removal moves no scored law by more than this did not act


def parameter_effects(logits, probs, setting: Setting, history, mask, order: str = "standard") -> dict[str, float]:
    """Per optional parameter: max over the masked positions of TV(law with it, law without it)."""
    out = {}
    for name in setting.extras():
        without = setting.without(name)
        other = process(logits, without, history if without.needs_history else None, order=order)
        tv = 0.5 * (probs - other).abs().sum(-1)  # [b, L]
        out[name] = float(tv[mask].max()) if bool(mask.any()) else 0.0
    return out


def static_no_ops(setting: Setting, eos) -> dict[str, str]:
    """Parameters of `setting` that cannot act on any context of a pair with these EOS ids, with why."""
    extras, out = setting.extras(), {}
    if extras.get("min_new_tokens") and not eos:
        out["min_new_tokens"] = ("the pair has no EOS id, so there is no EOS to mask (toy-eos has one: "
                                 "--pair toy-eos)")
    if "logit_bias" in extras and all(b == 0 for b in extras["logit_bias"].values()):
        out["logit_bias"] = "every bias is 0"
    if extras.get("repetition_penalty") == 1.0:
        out["repetition_penalty"] = "a repetition penalty of 1 rescales nothing"
    return out


def pit_tests(u, positions, seq_ids, off_support, level, power, prefix) -> list[TestResult]:
    """At one prompt: the PIT pooled over its positions (and, past the first, over the rows' prefixes), per
    position, and the serial test. Only position 0 sees one law (the prompt's next-token law)."""
    out = [deterministic_result(f"{prefix}/pit_support", off_support == 0, n=len(u), message=_support_message(off_support))]
    pooled = uniformity_test(u, f"{prefix}/pit_uniform", level=level, power=power, min_expected=GATE_MIN_EXPECTED)
    pooled.details.update(scope="pooled", guarantee=pooled_guarantee(pooled, "PIT pooled over the positions and "
                                                                     "prefixes of one prompt", power))
    out.append(pooled)
    per_position = per_position_uniformity(u, positions, prefix=f"{prefix}/pit_uniform", level=level, power=power)
    for t in per_position:  # each states its own (wider) TV; never the run's headline
        one_law = t.details.get("position") == 0
        t.details.update(headline=False, scope="one law" if one_law else "pooled")
        if not one_law:
            t.details["guarantee"] = pooled_guarantee(t, f"PIT at position {t.details.get('position')}, pooled over "
                                                      "the rows' prefixes", power)
    out += per_position
    consecutive = (seq_ids[1:] == seq_ids[:-1]) & (positions[1:] == positions[:-1] + 1)
    out.append(serial_independence_test(u[:-1][consecutive], u[1:][consecutive], f"{prefix}/pit_serial",
                                        level=level, power=power))
    return out


def _tokens(row: torch.Tensor) -> list[int]:
    return [t for t in row.detach().cpu().tolist() if t >= 0]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix); None if equal."""
    if a == b:
        return None
    return next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def greedy_target(pair: ModelPair, prompt: list[int], max_new_tokens: int) -> list[int]:
    """The target's own greedy continuation (the ground truth at temperature 0)."""
    ids = torch.tensor([prompt], device=next(pair.target.parameters()).device)
    return _tokens(autoregressive_generate(pair.target, ids, max_new_tokens=max_new_tokens, temperature=0,
                                           eos_token_id=default_eos(pair.target)).tokens[0])


def greedy_impl(impl, pair: ModelPair, prompt: list[int], *, max_new_tokens: int, gamma: int, seed: int) -> list[int]:
    """The implementation's greedy continuation of one prompt."""
    ids = torch.tensor([prompt], device=next(pair.target.parameters()).device)
    out = call_impl(impl, pair.target, pair.draft, ids, what="greedy generation", max_new_tokens=max_new_tokens,
                    gamma=gamma, temperature=0.0, top_k=None, top_p=None, seed=seed)
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 1 or out.is_floating_point():
        got = f"{out.dtype} tensor of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise MalformedOutput(f"the implementation returned {got} during greedy generation, expected an int64 "
                              "tensor [B = 1, N] of new tokens")
    return _tokens(out[0])


def greedy_tests(impl, pair: ModelPair, prompts: list[list[int]], *, gamma: int, max_new_tokens: int,
                 seed: int, prefix: str) -> tuple[list[TestResult], list[TestResult], list[dict]]:
    """Token equality with the target's own greedy output; divergences classified by logit margin."""
    gating, advisory, findings = [], [], []
    for i, prompt in enumerate(prompts):
        want = greedy_target(pair, prompt, max_new_tokens)
        got = greedy_impl(impl, pair, prompt, max_new_tokens=max_new_tokens, gamma=gamma, seed=seed)
        pos = first_difference(want, got)
        if pos is None:
            gating.append(deterministic_result(f"{prefix}/prompt{i}", True, n=len(want)))
            continue
        finding = classify_divergence(pair, prompt, want, got, pos)
        findings.append({"prompt": i, **finding})
        result = deterministic_result(f"{prefix}/prompt{i}", False, n=len(want), **finding)
        if finding["kind"] == "numerics (near-tie)":  # reported, and the prompt's gating test passes
            advisory.append(result)
            result = deterministic_result(f"{prefix}/prompt{i}", True, n=len(want), **finding)
        gating.append(result)
    return gating, advisory, findings


LOW_PRECISION = (torch.bfloat16, torch.float16)


def classify_divergence(pair, prompt, want, got, pos) -> dict:
    """Target logit margin at the first divergence: a near-tie is numerics, a clear margin is a bug.

    float32/float64 targets: the gap of the emitted token below the argmax, in the target's own
    arithmetic; 0 < gap ≤ NEAR_TIE·scale is numerics, gap = 0 a tie broken the wrong way (logic).
    bfloat16/float16 targets: rounding moves every logit, so ties and near-ties are common and differ
    between a one-token and a multi-position pass. The divergence is numerics when the *exact* gap
    between the expected and the emitted token (the same weights in float64) is at most twice the
    largest logit error of the low-precision target at that context (one full pass vs float64);
    anything wider cannot be explained by rounding and is logic."""
    context = torch.tensor([list(prompt) + want[:pos]], device=next(pair.target.parameters()).device)
    inputs = {"input_ids": context, "attention_mask": torch.ones_like(context)}
    with torch.inference_mode():
        logits = pair.target(**inputs).logits[0, -1, : pair.vocab_size].double().cpu()
    top2 = torch.topk(logits, 2).values
    margin = float(top2[0] - top2[1])
    want_tok = want[pos] if pos < len(want) else None
    got_tok = got[pos] if pos < len(got) else None
    gap = float(logits.max() - logits[got_tok]) if got_tok is not None and got_tok < len(logits) else float("inf")
    extra: dict = {}
    if pair.target.dtype in LOW_PRECISION and want_tok is not None and got_tok is not None and got_tok < len(logits):
        with torch.inference_mode():
            exact = target64(pair)(**inputs).logits[0, -1, : pair.vocab_size].double().cpu()
        rounding = float((logits - exact).abs().max())
        gap64 = float(exact[want_tok] - exact[got_tok])
        kind = "numerics (near-tie)" if abs(gap64) <= 2 * rounding else "logic"
        extra = {"exact_gap_expected_minus_got": gap64, "rounding_error_max": rounding,
                 "tolerance": 2 * rounding, "dtype": str(pair.target.dtype).removeprefix("torch.")}
        detail = f"exact gap {gap64:.3g} vs tolerance {2 * rounding:.3g} ({extra['dtype']} rounding)"
    else:
        # gap == 0: an exact tie broken differently from argmax's first index (vLLM #7627 class) is logic;
        # 0 < gap <= tolerance: the implementation's numerics (e.g. batch-variant kernels) flipped a near-tie.
        near = 0 < gap <= NEAR_TIE * max(1.0, float(logits.abs().max()))
        kind = "numerics (near-tie)" if near else ("tie-break (exact tie)" if gap == 0 else "logic")
        detail = f"target logit gap {gap:.3g}, margin {margin:.3g}"
    return {"position": pos, "expected_token": want_tok, "got_token": got_tok,
            "target_margin_top1_top2": margin, "logit_gap_of_got_token": gap, "kind": kind, **extra,
            "message": f"diverges at new token {pos}: expected {want_tok if want_tok is not None else 'end'}, "
                       f"got {got_tok} ({detail}) -> {kind}"}


def _sample(impl, pair, prompt, n, setting, gamma, length, seed, chunk, progress, deadline):
    """n continuations of `prompt` from impl, in chunks; stops early at `deadline` (monotonic time)."""
    outs, done = [], 0
    while done < n:
        b = min(chunk, n - done)
        ids = torch.tensor([prompt] * b)
        out = call_impl(impl, pair.target, pair.draft, ids, what=f"generation at {setting.label}",
                        **dict(max_new_tokens=length, gamma=gamma, temperature=setting.temperature,
                               top_k=setting.top_k, top_p=setting.top_p, seed=seed + 7919 * done),
                        **setting.extras())
        _check_generation_output(out, b, length, pair.vocab_size)
        outs.append(out.detach().to("cpu", torch.long))
        done += b
        if progress:
            progress(b)
        if deadline is not None and time.monotonic() > deadline:
            break
    width = max(o.shape[1] for o in outs)
    return torch.cat([torch.nn.functional.pad(o, (0, width - o.shape[1]), value=-1) for o in outs])


class BadGenerationOutput(Exception):
    pass


def _check_generation_output(out, B, length, vocab):
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != B:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise BadGenerationOutput(f"returned {shape}, expected a [B={B}, N<={length}] int64 tensor")
    if out.is_floating_point():
        raise BadGenerationOutput(f"returned dtype {out.dtype}, expected integer token ids")
    if out.shape[1] > length or (out.numel() and (int(out.max()) >= vocab or int(out.min()) < -1)):
        raise BadGenerationOutput(f"returned ids outside [0, {vocab}) or more than max_new_tokens={length} tokens")


SETTING_WORDS = ("battery", "default")  # whole batteries: parameter_settings(), default_settings()
SETTING_FIELDS = ("T", "temperature", "top_k", "top_p", *PARAM_NAMES)


def parse_setting(text: str) -> tuple[Setting, ...]:
    """`--setting` text -> settings: "battery" (parameter_settings()), "default", or comma-separated
    name=value pairs, e.g. "T=0.8,top_p=0.95,min_p=0.05,logit_bias=5:+1 2:-1,bad_words_ids=3|4.4".
    An unknown name (e.g. "minp") raises UnknownNameError with the valid ones ("Did you mean ...?", exit 2)."""
    from harness.errors import UnknownNameError

    if text in SETTING_WORDS:
        return parameter_settings() if text == "battery" else default_settings()
    fields: dict = {}
    text, constraint = _split_constraint(text)
    if constraint is not None:
        fields["constraint"] = constraint
    items = [item.partition("=") for item in filter(None, (i.strip() for i in text.split(",")))]
    for name, eq, _ in items:
        if name.strip() not in SETTING_FIELDS:
            known = list(SETTING_FIELDS) + list(SETTING_WORDS) if not eq else list(SETTING_FIELDS)
            raise UnknownNameError("--setting name", name.strip(), known)
    try:
        for name, eq, value in items:
            name = {"T": "temperature"}.get(name.strip(), name.strip())
            if not eq:
                raise ValueError(f"{name} has no value (write {name}=VALUE)")
            if name == "logit_bias":
                fields[name] = tuple((int(k), float(b)) for k, b in (pair.split(":") for pair in value.split()))
            elif name == "bad_words_ids":
                fields[name] = tuple(tuple(int(t) for t in w.split(".")) for w in value.split("|"))
            elif name in ("top_k", "min_new_tokens"):
                fields[name] = int(value)
            else:
                fields[name] = float(value)
        return (Setting(**fields),)
    except (TypeError, ValueError) as exc:
        raise HarnessError(f"--setting {text!r} cannot be read ({exc}); write e.g. "
                           "'T=0.8,top_p=0.95,min_p=0.05,logit_bias=5:+1' or 'battery'") from None


def _split_constraint(text: str):
    """`--setting` text -> (the rest, ConstraintSpec or None): a constraint field (regex= / json_schema= /
    lark=) comes last and takes the rest of the text, commas included (harness.check.structured)."""
    from harness.check.structured import KINDS, ConstraintSpec

    starts = [i for kind in KINDS for i in [text.find(f"{kind}=")] if i >= 0 and (i == 0 or text[i - 1] == ",")]
    if not starts:
        return text, None
    at = min(starts)
    kind, _, source = text[at:].partition("=")
    if not source:
        raise HarnessError(f"--setting {text!r}: {kind}= needs a value (the constraint, last in the setting)")
    return text[:at], ConstraintSpec(kind, source)


def accepted_parameters(impl: Callable) -> set[str]:
    """The optional sampling parameters (PARAM_NAMES) that `impl`'s signature accepts (all with **kwargs)."""
    try:
        params = inspect.signature(impl).parameters.values()
    except (TypeError, ValueError):  # builtins / C callables: assume the plain contract only
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return set(PARAM_NAMES)
    return {p.name for p in params} & set(PARAM_NAMES)


def supported_settings(impl: Callable, settings, vocab: int) -> tuple[list[Setting], list[dict]]:
    """(settings to run, skipped ones with the parameters the implementation does not accept); bad
    parameters raise HarnessError (exit 2) before anything runs."""
    accepted, run, skipped = accepted_parameters(impl), [], []
    for setting in settings:
        try:
            check_params(setting, vocab)
        except SpecDecInputError as exc:
            raise HarnessError(f"setting {setting.label}: {exc}") from None
        if setting.temperature == 0 and setting.extras():  # greedy_tests compares with plain target greedy
            raise HarnessError(f"setting {setting.label}: the optional parameters are checked at temperature > 0 "
                               "only (greedy equality runs without them)")
        missing = sorted(set(setting.extras()) - accepted)
        (skipped.append({"setting": setting.label, "not_accepted": missing}) if missing else run.append(setting))
    return run, skipped


def convention_tests(tokens, model, prompt, length, setting, vocab, eos, order, level, power, prefix, enumerate_law,
                     rng):
    """The gating tests of one cell, against the target processed under `order`."""
    if enumerate_law:
        law = continuation_law(model, prompt, length, setting, vocab, eos, order)
        return joint_law_tests(_rows_to_keys(tokens), law, level, power, prefix)
    u, pos, seq, off = pit_values(model, prompt, tokens, setting, vocab, rng, eos=eos, order=order)
    return pit_tests(u, pos, seq, off, level, power, prefix)


def consistent_conventions(tokens, model, prompt, length, setting, vocab, eos, declared, level, power,
                           enumerate_law, seed) -> list[str]:
    """After a failed cell: the other processing orders under which the target explains the outputs
    (every test of the cell passes at the per-test level). A convention, not a verification bug."""
    found = []
    for order in ORDERS:
        if order == declared or not _order_matters(setting, order):
            continue
        tests = convention_tests(tokens, model, prompt, length, setting, vocab, eos, order, level, power, "convention",
                                 enumerate_law, np.random.default_rng(seed))
        if all(t.p_value > level for t in tests):
            found.append(order)
    return found


def _order_matters(setting: Setting, order: str) -> bool:
    """Whether `order` can give a different law than the standard one for this setting."""
    if order == "llama_cpp":  # its default truncation applies to every sampled setting
        return setting.temperature > 0
    if setting.temperature in (0, 1) and order != "top_k_after_top_p":
        return False
    cuts = setting.top_k is not None or setting.top_p is not None or setting.min_p is not None
    return {"top_p_before_temperature": cuts,
            "top_k_after_top_p": setting.top_k is not None and setting.top_p is not None,
            "penalties_after_temperature": bool(setting.logit_bias or setting.frequency_penalty
                                                or setting.presence_penalty)}.get(order, False)


def run_generation_check(impl: Callable, pair: ModelPair, config: CheckConfig | None = None, *,
                         impl_name: str = "impl", prompts: int = 2, settings: tuple[Setting, ...] | None = None,
                         chunk: int = 2_000, progress: Callable[[int], None] | None = None,
                         contexts: dict | None = None, **fields) -> CheckReport:
    """Sample continuations per (prompt, sampling setting) and test them; greedy separately.

    `config` (or `fields` of CheckConfig: `samples`, `gamma`, `length`, `seed`, `processing_order`, ...)
    says what to run; every default is CheckConfig's, and `samples` defaults to what the pair affords
    (`generation_samples`). With `stop_on_fail` (the default), sampling stops after the first cell with a
    test at p ≤ false_alarm_rate / m (Holm's first step rejects then whatever the rest says).
    Settings using parameters the implementation does not accept are skipped (listed in the report);
    `processing_order` (specdec_ref.processing.ORDERS) is the convention the ground truth uses."""
    config = CheckConfig.build(config, **{"level": "generation", "tv": math.nan, **fields})
    if config.samples is None and contexts is None:  # with contexts every cell has its own default plan
        config = dataclasses.replace(config, samples=generation_samples(config, pair.vocab_size))
    processing_order, length = config.processing_order, config.length
    if processing_order not in ORDERS:
        raise HarnessError(f"--processing-order must be one of {', '.join(ORDERS)}, got {processing_order!r}")
    source = GenerationSource(impl, pair, length=length, prompts=prompts, settings=settings, chunk=chunk,
                              processing_order=processing_order, contexts=contexts)
    return run_battery(source, config, impl_name=impl_name, progress=progress)


# --- contexts cells: the randomized PIT pooled over many contexts ----------------------------------------

STEP_BANDS = ((0, 1), (1, 4), (4, 16), (16, None))  # generated-token index j: first step, early, middle, late
# Default rows of a prompt cell and of a contexts cell (key: V <= 64, the exact joint law, or not): run sizes are
# policy, named in suites/catalogues/sizes.py with the measurements behind them.
PROMPT_ROWS, CONTEXT_ROWS = catalogue("sizes").PROMPT_ROWS, catalogue("sizes").CONTEXT_ROWS
GREEDY_CONTEXTS = 4  # greedy/contexts: one context per prompt length, the longest lengths first


@dataclasses.dataclass
class ContextsCell:
    """One sampling setting over a catalogue of contexts (objects with .tokens, .family, .name)."""

    contexts: list
    families: tuple[str, ...]
    setting: Setting
    block_sizes: tuple[int, ...]
    index: int  # seeds derive from it


@dataclasses.dataclass
class ContextTrials:
    tokens: torch.Tensor  # [n, L] int64, -1 after EOS
    context: np.ndarray  # [n] index into the cell's contexts

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def extend(self, more: ContextTrials) -> ContextTrials:
        """These rows, then `more`'s (a top-up draw of the same cell)."""
        return ContextTrials(torch.cat([self.tokens, more.tokens]), np.concatenate([self.context, more.context]))


def context_rows(n: int, n_contexts: int, start: int = 0) -> np.ndarray:
    """Round-robin assignment of rows start … start + n − 1 to contexts: every context gets ⌊n/C⌋ or ⌈n/C⌉."""
    return (np.arange(start, start + n) % n_contexts).astype(np.int64)


def _score_batch_rows(length: int, vocab: int) -> int:
    """Rows per teacher-forcing batch: PIT_BATCH_POSITIONS positions at V ≥ 4096, more for small vocabularies."""
    return max(1, PIT_BATCH_POSITIONS * max(1, 4096 // max(1, vocab)) // max(1, length))


def contexts_pit_values(model, contexts, trials: ContextTrials, setting: Setting, vocab: int, rng, eos=(),
                        order: str = "standard", effects: dict | None = None) -> dict:
    """Teacher-force every row at its own context; returns u with its step j, absolute position (prompt
    length + j), row id and family, and the off-support count. Rows are grouped by prompt length (one
    batched forward per group; a group's rows may continue different prompts)."""
    lengths = np.array([len(contexts[c].tokens) for c in trials.context])
    parts: dict[str, list] = {k: [] for k in ("u", "step", "abs", "seq", "family", "context")}
    off_support = boundary = 0
    for length in np.unique(lengths):
        rows_all = np.nonzero(lengths == length)[0]
        for start in range(0, len(rows_all), _score_batch_rows(trials.tokens.shape[1], vocab)):
            rows = rows_all[start : start + _score_batch_rows(trials.tokens.shape[1], vocab)]
            ctx = trials.context[rows]
            prompts = [list(contexts[c].tokens) for c in ctx]
            tokens = trials.tokens[torch.as_tensor(rows)]
            logits = score_continuations(model, prompts, tokens, prompt_index=list(range(len(rows))), vocab=vocab)
            history = None
            if setting.needs_history:
                start_hist = History(torch.tensor(prompts), torch.zeros(len(rows), dtype=torch.long),
                                     tuple(sorted(eos)))
                history = extend_history(start_hist, tokens.clamp_min(0)[:, :-1])
            probs = process(logits.double(), setting, history, order=order)
            mask = tokens >= 0
            mask &= torch.cumprod(mask.long(), 1).bool()  # valid prefix only
            if effects is not None:
                for name, tv in parameter_effects(logits.double(), probs, setting, history, mask, order).items():
                    effects[name] = max(effects.get(name, 0.0), tv)
            flat_p, flat_y = probs[mask].numpy(), tokens[mask].numpy()
            p_y = flat_p[np.arange(len(flat_y)), flat_y]
            flat_p, p_y, near = relax_boundary_tokens(logits, tokens, mask, setting, history, order, flat_p, flat_y, p_y)
            boundary += near
            off_support += int((p_y <= 0).sum())
            r, j = np.nonzero(mask.numpy())
            parts["u"].append(pit_from_masses(mass_above_descending(flat_p, flat_y), p_y, rng))
            parts["step"].append(j)
            parts["abs"].append(j + int(length))
            parts["seq"].append(rows[r])
            parts["family"].append(np.array([contexts[c].family for c in ctx[r]], dtype=object))
            parts["context"].append(ctx[r])
    out = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in parts.items()}
    order_idx = np.lexsort((out["step"], out["seq"]))  # row by row, in step order (the serial test pairs them)
    out = {k: v[order_idx] for k, v in out.items()}
    out["off_support"] = SupportCount(off_support, boundary)
    return out


def count_contexts_pit_tests(families, block_sizes) -> int:
    """support + pooled + one per family + step bands + (boundary, last slot) per block size + per context +
    probit mean + probit per context + probit per row + serial."""
    return 2 + len(families) + len(STEP_BANDS) + 2 * len(block_sizes) + 1 + 3 + 1


def pooled_guarantee(test: TestResult, what: str, power: float) -> str:
    """What a pooled binned-PIT test promises: the pooled law is the mixture of the per-token laws, so a deviation
    common to a fraction f of the tokens moves it by f times its own binned TV; deviations that differ between
    contexts can cancel (no promise: the per-context tests cover them; suites/campaigns/headline.py measures both)."""
    d = test.detectable_tv
    if d is None or not math.isfinite(d):
        return f"{what}: too few draws to promise anything"
    return (f"{what}: a deviation whose binned PIT law is common to a fraction f of the tested tokens, of binned-PIT "
            f"TV ≥ {d:.3g}/f, is detected with probability ≥ {power:g}; deviations that differ between contexts "
            "can cancel (not a per-position TV)")


def contexts_pit_tests(values: dict, families, block_sizes, level, power, prefix) -> list[TestResult]:
    """The pooled PIT and its slices: per family, per step band, at the first and last slot of every cache block
    (absolute position mod B = 0 and B − 1); tests that accumulate evidence per context instead of pooling it
    (binned uniformity within every context; the probit score Φ⁻¹(u) per context, squared, and pooled): a row that
    reads another row's law, or a law flattened at some contexts and sharpened at others, deviates in opposite
    directions at different contexts, which the pooled test averages away; and the serial test within rows.
    Every slice is chosen by the context and the position, never by the token drawn there, so each is exactly
    U(0, 1) under H0. None states a per-position TV: each carries its scope and guarantee."""
    u, step, pos, seq, fam, ctx = (values[k] for k in ("u", "step", "abs", "seq", "family", "context"))
    off = values["off_support"]
    kw = {"level": level, "power": power}
    n_ctx = len(np.unique(ctx))
    out = [deterministic_result(f"{prefix}/pit_support", off == 0, n=len(u), message=_support_message(off))]
    pooled = uniformity_test(u, f"{prefix}/pit_uniform", min_expected=GATE_MIN_EXPECTED, **kw)
    pooled.details.update(scope="pooled", guarantee=pooled_guarantee(pooled, f"pooled PIT over {n_ctx} contexts",
                                                                       power))
    out.append(pooled)
    slices = [(f"family_{f}", fam == f) for f in families]
    slices += [(f"step{lo}-{'end' if hi is None else hi - 1}", (step >= lo) & (step < (hi or 1 << 30)))
               for lo, hi in STEP_BANDS]
    for size in block_sizes:
        slices += [(f"abs_mod{size}_eq0", pos % size == 0), (f"abs_mod{size}_eq{size - 1}", pos % size == size - 1)]
    for name, keep in slices:
        t = uniformity_test(u[keep], f"{prefix}/pit_uniform/{name}", min_expected=GATE_MIN_EXPECTED, **kw)
        t.details.update(headline=False, scope="pooled", guarantee=pooled_guarantee(t, f"pooled PIT, slice {name}",
                                                                                      power))
        out.append(t)
    t = stratified_uniformity_test(u, ctx, f"{prefix}/pit_uniform/per_context", min_expected=GATE_MIN_EXPECTED, **kw)
    t.details.update(headline=False, scope="per context",
                     guarantee=f"binned PIT within each context: a deviation of binned-PIT TV ≥ {t.detectable_tv:.3g} "
                               f"in every context is detected with probability ≥ {power:g}")
    out.append(t)
    t = probit_mean_test(u, f"{prefix}/pit_probit_mean", **kw)
    t.details.update(headline=False, scope="pooled")
    out.append(t)
    for name, strata in (("context", ctx), ("row", seq)):  # a context's rows; a row's tokens (a per-row fault)
        t = probit_per_stratum_test(u, strata, f"{prefix}/pit_probit_per_{name}", **kw)
        t.details.update(headline=False, scope=f"per {name}")
        out.append(t)
    consecutive = (seq[1:] == seq[:-1]) & (step[1:] == step[:-1] + 1)
    out.append(serial_independence_test(u[:-1][consecutive], u[1:][consecutive], f"{prefix}/pit_serial", **kw))
    return out


def sample_contexts(impl, pair, contexts, rows: np.ndarray, setting, gamma, length, seed, chunk, progress, deadline):
    """Continuations of contexts[rows[i]] for every i: one generate() call per prompt length (and chunk)."""
    lengths = np.array([len(contexts[c].tokens) for c in rows])
    tokens = torch.full((len(rows), length), -1, dtype=torch.long)
    done = np.zeros(len(rows), dtype=bool)
    for g, size in enumerate(np.unique(lengths)):
        members = np.nonzero(lengths == size)[0]
        for start in range(0, len(members), chunk):
            part = members[start : start + chunk]
            ids = torch.tensor([list(contexts[c].tokens) for c in rows[part]])
            out = call_impl(impl, pair.target, pair.draft, ids, what=f"generation at {setting.label} (contexts)",
                            **dict(max_new_tokens=length, gamma=gamma, temperature=setting.temperature,
                                   top_k=setting.top_k, top_p=setting.top_p, seed=seed + 104_729 * g + 7919 * start),
                            **setting.extras())
            _check_generation_output(out, len(part), length, pair.vocab_size)
            out = out.detach().to("cpu", torch.long)
            tokens[torch.as_tensor(part), : out.shape[1]] = out
            done[part] = True
            if progress:
                progress(len(part))
            if deadline is not None and time.monotonic() > deadline:
                return tokens[torch.as_tensor(done)], rows[done]
    return tokens, rows


def _contexts_pit_run(cell: Cell, trials: ContextTrials, level: float, power: float) -> list[TestResult]:
    data, source = cell.data, cell.summary["_source"]
    effects: dict = {}
    values = contexts_pit_values(source.scorer, data.contexts, trials, data.setting, source.vocab,
                                 np.random.default_rng(source.seed + 5000 + data.index), eos=source.eos,
                                 order=source.order, effects=effects)
    if effects:
        cell.summary["parameter_effects"] = effects
    tests = contexts_pit_tests(values, data.families, data.block_sizes, level, power, cell.name)
    cell.summary["tokens"] = int(len(values["u"]))
    cell.summary["detectable_tv_per_family"] = {
        "all": tests[1].detectable_tv,
        **{f: t.detectable_tv for f, t in zip(data.families, tests[2 : 2 + len(data.families)], strict=True)}}
    return tests


def _contexts_conventions_run(cell: Cell, trials: ContextTrials, level: float, power: float) -> list[TestResult]:
    """As `_conventions_run`, for a contexts cell."""
    data, source = cell.data, cell.summary["_source"]
    if not cell.decided(level):
        return []
    fits = []
    for order in ORDERS:
        if order == source.order or not _order_matters(data.setting, order):
            continue
        values = contexts_pit_values(source.scorer, data.contexts, trials, data.setting, source.vocab,
                                     np.random.default_rng(source.seed + 5000 + data.index), eos=source.eos,
                                     order=order)
        if all(t.p_value > level for t in contexts_pit_tests(values, data.families, data.block_sizes, level, power,
                                                             "convention")):
            fits.append(order)
    cell.summary["consistent_conventions"] = fits
    return []


def _rows_default(cell: Cell, tv: float, level: float, power: float) -> int:
    return cell.summary["default_rows"]


CONTEXTS_PIT = Check("contexts_pit", lambda cell: count_contexts_pit_tests(cell.data.families, cell.data.block_sizes),
                     _contexts_pit_run, samples_for=_rows_default)
CONTEXTS_CONVENTIONS = Check("contexts_conventions", lambda cell: 0, _contexts_conventions_run, gating=False)


# --- the generation level as a trial source of the check engine (harness.check.engine) -------------------


@dataclasses.dataclass
class SamplingCell:
    prompt: list[int]
    index: int  # prompt index (seeds derive from it)
    setting: Setting


def generation_samples(config: CheckConfig, vocab: int) -> int:
    """Samples per (prompt, sampling setting): the exact joint law of a toy pair affords many."""
    return config.samples or (20_000 if vocab <= ENUMERATION_MAX_VOCAB else 200)


def _greedy_run(cell: Cell, trials, level: float, power: float) -> list[TestResult]:
    gating, _, findings = trials
    cell.summary["divergences"] = findings
    return gating


def _greedy_numerics(cell: Cell, trials, level: float, power: float) -> list[TestResult]:
    return trials[1]  # near-tie divergences: numerics, reported


def _joint_run(cell: Cell, tokens, level: float, power: float) -> list[TestResult]:
    data, source = cell.data, cell.summary["_source"]
    law = continuation_law(source.scorer, data.prompt, source.length, data.setting, source.vocab, source.eos,
                           source.order)
    return joint_law_tests(_rows_to_keys(tokens), law, level, power, cell.name)


def _pit_run(cell: Cell, tokens, level: float, power: float) -> list[TestResult]:
    data, source = cell.data, cell.summary["_source"]
    effects: dict = {}
    u, pos, seq, off = pit_values(source.scorer, data.prompt, tokens, data.setting, source.vocab,
                                  np.random.default_rng(source.seed + data.index), eos=source.eos, order=source.order,
                                  effects=effects)
    if effects:
        cell.summary["parameter_effects"] = effects
    return pit_tests(u, pos, seq, off, level, power, cell.name)


def _conventions_run(cell: Cell, tokens, level: float, power: float) -> list[TestResult]:
    """Advisory: when a cell's gating tests fail, is the output the target's law under another known processing
    convention (top-p before temperature, ...)? A convention is not a verification bug: say which."""
    data, source = cell.data, cell.summary["_source"]
    if not cell.decided(level):
        return []
    fits = consistent_conventions(tokens, source.scorer, data.prompt, source.length, data.setting, source.vocab,
                                  source.eos, source.order, level, power, source.enumerate, source.seed + data.index)
    cell.summary["consistent_conventions"] = fits
    return []


def _exact_emitted_law(impl, source, data) -> dict | None:
    """The implementation's exact continuation law where it is known (a zoo entry that changes only the p or q a
    step sees carries `exact_continuation_law`), else None."""
    law = getattr(impl, "exact_continuation_law", None)
    if law is None:
        return None
    return law(source.scorer, source.pair.draft, data.prompt, source.length, source.gamma, data.setting, source.eos)


def _estimate_run(cell: Cell, tokens, level: float, power: float) -> list[TestResult]:
    """`--estimate`: bias-corrected TV of the whole continuation's law against the exact joint law at this prompt,
    and of each position's token (harness.stats.estimate.continuation_estimates), into "tv_estimates"; with the
    exact TV beside it for a p/q-hook zoo entry. Reports, never gates."""
    from harness.stats.estimate import continuation_estimates

    data, source = cell.data, cell.summary["_source"]
    if not getattr(source, "estimate_all", True) and not cell.decided(level):
        return []  # a FAIL report's default: estimates in the failing cells only
    law = continuation_law(source.scorer, data.prompt, source.length, data.setting, source.vocab, source.eos,
                           source.order)
    emitted = _exact_emitted_law(source.impl, source, data) if source.order == "standard" else None
    rng = numpy_rng(source.seed, "estimate", cell.name)
    cell.summary["tv_estimates"] = [{"law": "", **e} for e in continuation_estimates(
        _rows_to_keys(tokens), law, source.vocab, length=source.length, emitted=emitted, rng=rng)]
    return []


ESTIMATE = Check("tv_estimate", lambda cell: 0, _estimate_run, gating=False)
GREEDY_EQUALITY = Check("greedy_equality", lambda cell: len(cell.data), _greedy_run)
GREEDY_NUMERICS = Check("greedy_numerics", lambda cell: 0, _greedy_numerics, gating=False)
JOINT_LAW = Check("joint_law", lambda cell: 3, _joint_run, samples_for=_rows_default)
PIT = Check("pit", lambda cell: 3 + cell.summary["length"], _pit_run, samples_for=_rows_default)
CONVENTIONS = Check("conventions", lambda cell: 0, _conventions_run, gating=False)


class ContextPrompts(collections.abc.Sequence):
    """The greedy cell's prompts: contexts[i].tokens for the picked i, read (and the catalogue built) when the cell
    runs, not when the plan is declared."""

    def __init__(self, contexts, picked: list[int]):
        self.contexts, self.picked = contexts, picked

    def __len__(self) -> int:
        return len(self.picked)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [list(self.contexts[i].tokens) for i in self.picked[index]]
        return list(self.contexts[self.picked[index]].tokens)


class GenerationSource(TrialSource):
    """Trials of a whole generate(): continuations of the pair's prompts, per sampling setting."""

    level = "generation"

    def __init__(self, impl: Callable, pair: ModelPair, *, length: int | None = None, prompts: int = 2,
                 settings: tuple[Setting, ...] | None = None, chunk: int = 2_000,
                 processing_order: str = "standard", contexts: dict | None = None):
        """`contexts`: {"contexts": [objects with .tokens, .family, .name], "block_sizes": (16, ...), "length":
        new tokens per contexts sample or None (the prompt cells' length)} from a declared catalogue
        (harness/contexts.py), or None: the pair's prompts only."""
        self.impl, self.pair, self.chunk, self.order = impl, pair, chunk, processing_order
        self.contexts = contexts
        self.vocab = pair.vocab_size
        self.enumerate = self.vocab <= ENUMERATION_MAX_VOCAB
        self.length = length or (3 if self.enumerate else 16)
        settings = default_settings() if settings is None else settings
        settings = bind_constraints(settings, pair, self.length if self.enumerate else 0)  # structured outputs
        self.settings, self.skipped = supported_settings(impl, settings, self.vocab)
        self.prompts = (pair.prompts or [[0]])[:prompts]
        self.eos = eos_set(default_eos(pair.target))

    def cells(self, config: CheckConfig) -> list[Cell]:
        self.seed, self.gamma, self.samples = config.seed, config.gamma, config.samples
        # The ground truth the outputs are tested against: a float64 copy of the target (exact), or the
        # target as loaded (--score-dtype model: no second copy in memory, the precision the pair runs in).
        self.scorer = target64(self.pair) if config.score_dtype == "float64" else self.pair.target
        sampling = [s for s in self.settings if s.temperature > 0]
        self.budget_each = None if config.time_budget_s is None else \
            config.time_budget_s / max(1, len(sampling) * (len(self.prompts) + bool((self.contexts or {}).get("contexts"))))
        cells = []
        contexts = (self.contexts or {}).get("contexts") or []
        self.context_length = (self.contexts or {}).get("length") or self.length
        if any(s.temperature == 0 for s in self.settings):  # first: deterministic and cheap
            cells.append(Cell("greedy", [GREEDY_EQUALITY, GREEDY_NUMERICS], self.prompts, math.nan,
                              {"prompts": len(self.prompts), "max_new_tokens": max(self.length, 16)}))
        checks = [JOINT_LAW, PIT, CONVENTIONS] if self.enumerate else [PIT, CONVENTIONS]
        self.estimate_all = getattr(config, "estimate", False)
        if (self.estimate_all or getattr(config, "fail_estimate", False)) and self.enumerate:  # exact joint law known
            checks.append(ESTIMATE)  # every prompt cell with --estimate, else the cells that fail (decided) only
        self.prompts_in_contexts = self._prompts_in_contexts(contexts)
        prompt_rows = PROMPT_ROWS[self.enumerate]
        # The prompt cells of every setting first (the plan without contexts, in its order: a run that stops at its
        # first decided cell decides whatever that plan decides, as soon), then greedy over contexts, then one
        # contexts cell per setting.
        for setting in sampling:
            for i, prompt in enumerate(self.prompts):
                if i in self.prompts_in_contexts:
                    continue
                cells.append(Cell(f"{setting.label}/prompt{i}", list(checks) + checks_for(setting),
                                  SamplingCell(prompt, i, setting),
                                  math.nan, {"_source": self, "length": self.length, "gamma": config.gamma,
                                             "setting": setting_record(setting), "joint_law": self.enumerate,
                                             "processing_order": self.order, "default_rows": prompt_rows}))
        declared = slots(contexts)  # families, names, lengths: the catalogue is built only when a cell reads it
        if contexts and any(s.temperature == 0 for s in self.settings):
            # one context per prompt length (the longest first): greedy past the block boundaries, after the cells
            # of the plan without contexts
            seen, picked = set(), []
            for i in sorted(range(len(declared)), key=lambda i: -declared[i].length):
                if declared[i].length not in seen and len(picked) < GREEDY_CONTEXTS:
                    seen.add(declared[i].length)
                    picked.append(i)
            cells.append(Cell("greedy/contexts", [GREEDY_EQUALITY, GREEDY_NUMERICS], ContextPrompts(contexts, picked),
                              math.nan, {"prompts": len(picked), "max_new_tokens": self.context_length}))
        for setting in sampling if contexts else ():
            families = tuple(dict.fromkeys(c.family for c in declared))
            data = ContextsCell(contexts, families, setting, tuple(self.contexts.get("block_sizes", ())), len(cells))
            cells.append(Cell(f"{setting.label}/contexts", [CONTEXTS_PIT, CONTEXTS_CONVENTIONS], data, math.nan,
                              {"_source": self, "length": self.context_length, "gamma": config.gamma,
                               "setting": setting_record(setting), "processing_order": self.order,
                               "contexts": len(contexts), "families": {f: sum(c.family == f for c in declared)
                                                                       for f in families},
                               "prompt_lengths": sorted({c.length for c in declared}),
                               "block_sizes": list(data.block_sizes),
                               "default_rows": CONTEXT_ROWS[self.enumerate]}))
        return cells

    def _prompts_in_contexts(self, contexts) -> set[int]:
        """Prompt cells a contexts cell already samples: on a pair without the exact joint law, a prompt that is
        one of the catalogue's contexts adds only a PIT slice of the contexts cell's own test (its rows are
        better spent on the pooled headline), so it gets no cell of its own. A toy pair's prompt cells stay:
        they carry the exact joint law."""
        if self.enumerate or not contexts:
            return set()
        tokens = {tuple(c.tokens) for c in contexts}
        return {i for i, p in enumerate(self.prompts) if tuple(p) in tokens}

    def planned_samples(self, config: CheckConfig) -> int:
        """Sampled rows the plan will draw (the progress bar's total)."""
        sampling = sum(s.temperature > 0 for s in self.settings)
        contexts = bool((self.contexts or {}).get("contexts"))
        prompts = len(self.prompts) - len(self._prompts_in_contexts((self.contexts or {}).get("contexts")))
        if config.samples:
            return config.samples * sampling * (prompts + contexts)
        rows = PROMPT_ROWS[self.enumerate] * prompts
        return sampling * (rows + contexts * CONTEXT_ROWS[self.enumerate])

    def extend(self, trials, more):
        if isinstance(trials, ContextTrials):
            return trials.extend(more)
        return super().extend(trials, more)

    def _draw_contexts(self, cell: Cell, n: int, progress):
        data = cell.data
        start = cell.summary.get("_drawn", 0)
        rows = context_rows(n, len(data.contexts), start)
        deadline = None if self.budget_each is None else time.monotonic() + self.budget_each
        try:
            tokens, rows = sample_contexts(self.impl, self.pair, data.contexts, rows, data.setting, self.gamma,
                                           self.context_length, self.seed + 1_000_003 * (data.index + 1) + start,
                                           self.chunk, progress, deadline)
        except BadGenerationOutput as exc:
            raise MalformedTrials(str(exc)) from None
        cell.summary["_drawn"] = start + n
        if len(rows) < n:
            cell.summary["stopped_early"] = f"time budget reached after {len(rows)} of {n} samples"
        return self._full_length(tokens, self.context_length, ContextTrials(tokens, rows))

    def _full_length(self, tokens, length: int, trials):
        """`trials`, unless a row stops before `length` new tokens without EOS (the format test then fails)."""
        short = [k for k in _rows_to_keys(tokens) if len(k) < length and not (k and k[-1] in self.eos)]
        if short:
            exc = MalformedTrials(f"{len(short)} rows stop before max_new_tokens without EOS")
            exc.trials = trials
            raise exc
        return trials

    def draw(self, cell: Cell, n: int, progress):
        # torch's global RNG (what an implementation that ignores its seed draws from) on the run's own
        # stream, per cell and call: the verdict depends on the seed only, not on what ran before in this process.
        calls = cell.summary.get("_global_draws", 0)
        seed_global(self.seed, cell.name, calls)
        cell.summary["_global_draws"] = calls + 1
        if cell.name.startswith("greedy"):
            return greedy_tests(self.impl, self.pair, cell.data, gamma=self.gamma,
                                max_new_tokens=cell.summary["max_new_tokens"], seed=self.seed, prefix=cell.name)
        if isinstance(cell.data, ContextsCell):
            return self._draw_contexts(cell, n, progress)
        data = cell.data
        deadline = None if self.budget_each is None else time.monotonic() + self.budget_each
        try:
            tokens = _sample(self.impl, self.pair, data.prompt, n, data.setting, self.gamma, self.length,
                             self.seed + 1000 * data.index, self.chunk, progress, deadline)
        except BadGenerationOutput as exc:
            raise MalformedTrials(str(exc)) from None
        if tokens.shape[0] < n:
            cell.summary["stopped_early"] = f"time budget reached after {tokens.shape[0]} of {n} samples"
        return self._full_length(tokens, self.length, tokens)

    def count(self, trials) -> int:
        if isinstance(trials, tuple):  # greedy: (gating, advisory, findings), one gating test per prompt
            return len(trials[0])
        return len(trials) if isinstance(trials, ContextTrials) else int(trials.shape[0])

    def coverage(self, cases: list[dict]) -> dict:
        """Which optional parameters acted in the cells that ran: a parameter counts as covered in a setting only
        when it cannot be ruled out statically (`static_no_ops`) and its removal moved a scored law
        (`parameter_effects` > NO_OP_TV) in some cell of that setting; every other one is a named no-op."""
        per_setting, no_op, covered = [], [], set()
        for setting in (s for s in self.settings if s.extras()):
            label = setting.label
            ran = [c for c in cases if c.get("setting") == setting_record(setting) and "parameter_effects" in c]
            static = static_no_ops(setting, self.eos)
            acted, idle = [], {}
            for name in setting.extras():
                effect = max((c["parameter_effects"].get(name, 0.0) for c in ran), default=None)
                if name in static:
                    idle[name] = static[name]
                elif effect is None:
                    continue  # the setting's cells did not run (a stop, a budget): neither covered nor a no-op
                elif effect <= NO_OP_TV:
                    idle[name] = (f"removing it changes no law at the {sum(c.get('samples', 0) for c in ran)} "
                                  f"sampled contexts (max TV {effect:.2g}); e.g. a penalty with no repeat, a bad word "
                                  "the target never proposes")
                else:
                    acted.append(name)
            covered.update(acted)
            per_setting.append({"setting": label, "covered": acted, "no_op": idle,
                                "max_tv_effect": {n: max((c["parameter_effects"].get(n, 0.0) for c in ran), default=None)
                                                  for n in setting.extras()}})
            no_op += [{"setting": label, "parameter": n, "reason": r} for n, r in idle.items()]
        if not per_setting:
            return {}
        return {"covered": sorted(covered), "no_op": no_op, "settings": per_setting,
                "definition": "a parameter is covered when removing it changes the processed target law (TV > "
                              f"{NO_OP_TV:g}) at a scored position of a cell that ran"}

    def finish(self, report: CheckReport, config: CheckConfig) -> None:
        report.processing_order = self.order
        if self.order != "standard":
            report.notes.append(f"ground truth: the target processed under the declared convention {self.order!r} "
                                "(--processing-order), not the documented order")
        folded = sorted(getattr(self, "prompts_in_contexts", ()))
        if folded:
            report.notes.append(f"prompt{'s' if len(folded) > 1 else ''} {', '.join(map(str, folded))}: no prompt cell "
                                "of its own; each is one of the catalogue's contexts, sampled in the contexts cells")
        if self.skipped:
            report.cases.append({"name": "skipped_settings", "settings": self.skipped})
            report.notes.append("skipped settings (the implementation does not accept these parameters): " + "; ".join(
                f"{s['setting']} (needs {', '.join(s['not_accepted'])})" for s in self.skipped))
        for case in report.cases:
            case.pop("_source", None)
            case.pop("_drawn", None)
            if case.get("stopped_early"):
                report.notes.append(f"{case['name']}: {case['stopped_early']}")
            for order in case.get("consistent_conventions", []):
                report.notes.append(f"{case['name']}: outputs consistent with the target under convention {order!r}: "
                                    f"a processing convention, not a verification bug (if intended, declare it: "
                                    f"--processing-order {order})")
        report.coverage = self.coverage(report.cases)
        for item in report.coverage.get("no_op", []):
            report.notes.append(f"no-op: {item['parameter']} in setting {item['setting']} cannot act here "
                                f"({item['reason']}): not counted as covered")
        for greedy in (c for c in report.cases if c["name"].startswith("greedy")):
            report.samples -= greedy.get("samples", 0)  # greedy prompts are not samples of a law
        families = [c for c in report.cases if "detectable_tv_per_family" in c]
        for case in families:
            tvs = ", ".join(f"{f} {tv:.3g}" for f, tv in case["detectable_tv_per_family"].items())
            report.notes.append(
                f"{case['name']}: {case.get('samples', 0)} samples over {case['contexts']} contexts "
                f"(prompt lengths {case['prompt_lengths'][0]}–{case['prompt_lengths'][-1]}, "
                f"{case['length']} new tokens each, {case.get('tokens', 0)} tokens); detectable TV per family of "
                f"contexts (pooled PIT: TV between the binned PIT law and U(0, 1), at power {config.power:g} and the "
                f"per-test Holm level): {tvs}")
        headline = report.headline
        if headline["scope"] is not None:
            report.notes.append(f"headline TV {headline['detectable_tv']:.3g} ({headline['test']}): "
                                f"{headline['meaning']}")
        for case in families:
            per_context = [t for t in report.tests if t.name.startswith(case["name"] + "/pit_probit")]
            for t in per_context:
                report.notes.append(f"{t.name}: {t.details['guarantee']}")
        tvs = [t.detectable_tv for t in report.tests if t.detectable_tv and "joint_pooled_pearson" in t.name]
        report.target_tv = max(tvs) if tvs else math.nan
        if self.pair.meta.get("score_precision_note"):
            report.notes.append(self.pair.meta["score_precision_note"])
        report.notes.append(f"pair {self.pair.name}, γ = {config.gamma}, {self.length} new tokens per sample"
                            + ("; joint law by exact enumeration (float64)" if self.enumerate else "; PIT only"))
