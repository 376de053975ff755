"""The randomized PIT of a generation (docs/CONTRACT.md §1b), for any pair, real models included.

Every generated token is teacher-forced through the target (float64) and u = F(y−) + V·p(y) is computed in
surprisal order; under H0 the u are iid U(0, 1) (Czado, Gneiting & Held 2009), tested pooled, per position, and
for serial independence within sequences (reused random numbers show up there). Also here: which optional
parameters of a setting acted on the scored laws (`parameter_effects`, `static_no_ops`) and the numerics margin at
a truncation cut (`relax_boundary_tokens`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from harness.check.exact_laws import SupportCount, coarsen
from harness.check.greedy import NEAR_TIE
from harness.check.report import deterministic_result
from harness.check.sampler_tests import GATE_MIN_EXPECTED
from harness.check.scoring import score_continuations
from harness.check.settings import Setting
from harness.stats import (
    TestResult,
    mass_above_descending,
    per_position_uniformity,
    pit_from_masses,
    serial_independence_test,
    uniformity_test,
)
from specdec_ref.processing import History, extend_history, process


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


def support_message(off) -> str:
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


def pit_tests(u, positions, seq_ids, off_support, rate, power, prefix) -> list[TestResult]:
    """At one prompt: the PIT pooled over its positions (and, past the first, over the rows' prefixes), per
    position, and the serial test. Only position 0 sees one law (the prompt's next-token law)."""
    out = [deterministic_result(f"{prefix}/pit_support", off_support == 0, n=len(u), message=support_message(off_support))]
    pooled = uniformity_test(u, f"{prefix}/pit_uniform", rate=rate, power=power, min_expected=GATE_MIN_EXPECTED)
    pooled.details.update(scope="pooled", guarantee=pooled_guarantee(pooled, "PIT pooled over the positions and "
                                                                     "prefixes of one prompt", power))
    out.append(pooled)
    per_position = per_position_uniformity(u, positions, prefix=f"{prefix}/pit_uniform", rate=rate, power=power)
    for t in per_position:  # each states its own (wider) TV; never the run's headline
        one_law = t.details.get("position") == 0
        t.details.update(headline=False, scope="one law" if one_law else "pooled")
        if not one_law:
            t.details["guarantee"] = pooled_guarantee(t, f"PIT at position {t.details.get('position')}, pooled over "
                                                      "the rows' prefixes", power)
    out += per_position
    consecutive = (seq_ids[1:] == seq_ids[:-1]) & (positions[1:] == positions[:-1] + 1)
    out.append(serial_independence_test(u[:-1][consecutive], u[1:][consecutive], f"{prefix}/pit_serial",
                                        rate=rate, power=power))
    return out


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
