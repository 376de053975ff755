"""Generation-level losslessness check (shared/CONTRACT.md §1b): whole generate() over two causal LMs.

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

import copy
import dataclasses
import time
from collections.abc import Callable

import numpy as np
import torch

from harness.check.report import CheckReport, deterministic_result
from harness.check.sampler import GATE_MIN_EXPECTED, call_impl
from harness.check.scoring import score_continuations
from harness.pairs import ModelPair
from harness.stats import (
    TestResult,
    mass_above_descending,
    per_position_uniformity,
    pit_from_masses,
    pooled_gtest,
    pooled_pearson,
    serial_independence_test,
    support_check,
    uniformity_test,
)
from specdec_ref.generate import autoregressive_generate, default_eos, eos_set
from specdec_ref.processing import logits_to_probs

MAX_JOINT_CELLS = 64  # joint-law omnibus tests: the 63 likeliest continuations + the rest
ENUMERATION_MAX_VOCAB = 64
NEAR_TIE = 1e-3  # logit margin below which a greedy divergence is attributed to numerics


@dataclasses.dataclass(frozen=True)
class Setting:
    temperature: float
    top_k: int | None = None
    top_p: float | None = None

    @property
    def label(self) -> str:
        parts = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top_k={self.top_k}")
        if self.top_p is not None:
            parts.append(f"top_p={self.top_p:g}")
        return ",".join(parts)


# Order = the order cells run in (a run with stop_on_fail ends at the first decided cell): greedy first
# (deterministic and cheap), then the setting with the most processing (temperature and top-p, where
# processing bugs show), then plain sampling.
DEFAULT_SETTINGS = (Setting(0.0), Setting(0.7, top_p=0.9), Setting(1.0))


def _target64(pair: ModelPair):
    """A float64 copy of the target for exact conditionals (cached on the pair)."""
    if "_target64" not in pair.meta:
        pair.meta["_target64"] = copy.deepcopy(pair.target).to(torch.float64).eval()
    return pair.meta["_target64"]


def _next_probs(model, seqs: torch.Tensor, setting: Setting, vocab: int) -> torch.Tensor:
    """Processed next-token law after each full sequence in seqs [N, L] -> [N, V] float64."""
    with torch.inference_mode():
        logits = model(input_ids=seqs, attention_mask=torch.ones_like(seqs)).logits[:, -1, :vocab]
    return logits_to_probs(logits.double(), setting.temperature, setting.top_k, setting.top_p)


def continuation_law(model, prompt: list[int], length: int, setting: Setting, vocab: int,
                     eos: set[int]) -> dict[tuple[int, ...], float]:
    """Exact law of the next `length` tokens (shorter if EOS) by enumeration, float64."""
    law: dict[tuple[int, ...], float] = {}
    frontier = [((), 1.0)]
    for _ in range(length):
        if not frontier:  # every continuation has ended with EOS
            break
        seqs = torch.tensor([list(prompt) + list(prefix) for prefix, _ in frontier], dtype=torch.long)
        probs = _next_probs(model, seqs, setting, vocab).numpy()
        nxt = []
        for (prefix, mass), row in zip(frontier, probs, strict=True):
            for tok in np.nonzero(row)[0]:
                key, m = prefix + (int(tok),), mass * float(row[tok])
                (law.__setitem__(key, law.get(key, 0.0) + m) if int(tok) in eos else nxt.append((key, m)))
        frontier = nxt
    for key, m in frontier:
        law[key] = law.get(key, 0.0) + m
    return law


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
    kw = {"alpha": level, "power": power, "min_expected": GATE_MIN_EXPECTED}
    out.append(pooled_pearson(coarse_counts, coarse_p, f"{prefix}/joint_pooled_pearson", **kw))
    out.append(pooled_gtest(coarse_counts, coarse_p, f"{prefix}/joint_pooled_g", **kw))
    return out


def pit_values(model, prompt: list[int], tokens: torch.Tensor, setting: Setting, vocab: int, rng,
               batch: int = 64) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Teacher-force rows of generated tokens; returns (u, position, sequence id, off-support count)."""
    us, positions, seq_ids, off_support = [], [], [], 0
    for start in range(0, tokens.shape[0], batch):
        rows = tokens[start : start + batch]
        n_valid = (rows >= 0).sum(1)
        logits = score_continuations(model, [prompt], rows, vocab=vocab)  # [b, L, V], prompt computed once
        probs = logits_to_probs(logits.double(), setting.temperature, setting.top_k, setting.top_p)  # [b, L, V]
        mask = torch.arange(rows.shape[1]).unsqueeze(0) < n_valid.unsqueeze(1)
        flat_p = probs[mask].numpy()
        flat_y = rows[mask].numpy()
        p_y = flat_p[np.arange(len(flat_y)), flat_y]
        off_support += int((p_y <= 0).sum())
        us.append(pit_from_masses(mass_above_descending(flat_p, flat_y), p_y, rng))
        positions.append(np.nonzero(mask.numpy())[1])
        seq_ids.append(np.nonzero(mask.numpy())[0] + start)
    return np.concatenate(us), np.concatenate(positions), np.concatenate(seq_ids), off_support


def pit_tests(u, positions, seq_ids, off_support, level, power, prefix) -> list[TestResult]:
    out = [deterministic_result(f"{prefix}/pit_support", off_support == 0, n=len(u),
                                message=f"{off_support} generated tokens have probability 0 under the target"
                                if off_support else "")]
    out.append(uniformity_test(u, f"{prefix}/pit_uniform", alpha=level, power=power, min_expected=GATE_MIN_EXPECTED))
    out += per_position_uniformity(u, positions, prefix=f"{prefix}/pit_uniform", alpha=level, power=power)
    consecutive = (seq_ids[1:] == seq_ids[:-1]) & (positions[1:] == positions[:-1] + 1)
    out.append(serial_independence_test(u[:-1][consecutive], u[1:][consecutive], f"{prefix}/pit_serial",
                                        alpha=level, power=power))
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
    return _tokens(call_impl(impl, pair.target, pair.draft, ids, what="greedy generation",
                             max_new_tokens=max_new_tokens, gamma=gamma, temperature=0.0, top_k=None, top_p=None,
                             seed=seed)[0])


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
        finding = _divergence(pair, prompt, want, got, pos)
        findings.append({"prompt": i, **finding})
        result = deterministic_result(f"{prefix}/prompt{i}", False, n=len(want), **finding)
        (advisory if finding["kind"] == "numerics (near-tie)" else gating).append(result)
    return gating, advisory, findings


LOW_PRECISION = (torch.bfloat16, torch.float16)


def _divergence(pair, prompt, want, got, pos) -> dict:
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
            exact = _target64(pair)(**inputs).logits[0, -1, : pair.vocab_size].double().cpu()
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
                               top_k=setting.top_k, top_p=setting.top_p, seed=seed + 7919 * done))
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


def run_generation_check(
    impl: Callable,
    pair: ModelPair,
    *,
    impl_name: str = "impl",
    false_alarm_rate: float = 1e-3,
    power: float = 0.99,
    seed: int = 0,
    samples: int = 20_000,
    gamma: int = 3,
    length: int | None = None,
    prompts: int = 2,
    settings: tuple[Setting, ...] = DEFAULT_SETTINGS,
    chunk: int = 2_000,
    time_budget_s: float | None = None,
    progress: Callable[[int], None] | None = None,
    stop_on_fail: bool = False,
) -> CheckReport:
    """Sample `samples` continuations per (prompt, sampling setting) and test them; greedy separately.

    With `stop_on_fail`, sampling stops after the first cell with a test at p ≤ false_alarm_rate / m
    (Holm's first step rejects then whatever the rest says: the verdict is unchanged)."""
    started = time.perf_counter()
    report = CheckReport(impl_name, "generation", false_alarm_rate, float("nan"), power, seed)
    vocab = pair.vocab_size
    enumerate_law = vocab <= ENUMERATION_MAX_VOCAB
    length = length or (3 if enumerate_law else 16)
    chosen = (pair.prompts or [[0]])[:prompts]
    sampling = [s for s in settings if s.temperature > 0]
    per_cell = 3 * enumerate_law + 3 + length  # joint (3) + pit support/uniform/serial + per position
    m = len(sampling) * len(chosen) * per_cell + sum(s.temperature == 0 for s in settings) * len(chosen)
    level = false_alarm_rate / max(1, m)
    target64 = _target64(pair)
    eos = eos_set(default_eos(pair.target))
    deadline_each = None if time_budget_s is None else time_budget_s / max(1, len(sampling) * len(chosen))
    if any(s.temperature == 0 for s in settings):  # first: deterministic and cheap
        gating, advisory, findings = greedy_tests(impl, pair, chosen, gamma=gamma, max_new_tokens=max(length, 16),
                                                  seed=seed, prefix="greedy")
        report.tests += gating
        report.advisories += advisory
        report.cases.append({"name": "greedy", "prompts": len(chosen), "divergences": findings})
        if stop_on_fail and any(t.p_value <= level for t in gating):
            report.notes.append("verdict decided by greedy equality; sampling cells skipped")
            return _finish(report, m, false_alarm_rate, pair, gamma, length, enumerate_law, started)
    for setting in sampling:
        for i, prompt in enumerate(chosen):
            prefix = f"{setting.label}/prompt{i}"
            deadline = None if deadline_each is None else time.monotonic() + deadline_each
            try:
                tokens = _sample(impl, pair, prompt, samples, setting, gamma, length, seed + 1000 * i, chunk,
                                 progress, deadline)
            except BadGenerationOutput as exc:
                report.tests.append(deterministic_result(f"{prefix}/format", False, n=0, message=str(exc)))
                continue
            n = tokens.shape[0]
            report.samples += n
            short = [k for k in _rows_to_keys(tokens) if len(k) < length and not (k and k[-1] in eos)]
            report.tests.append(deterministic_result(
                f"{prefix}/format", not short, n=n,
                message=f"{len(short)} rows stop before max_new_tokens without EOS" if short else ""))
            if enumerate_law:
                law = continuation_law(target64, prompt, length, setting, vocab, eos)
                report.tests += joint_law_tests(_rows_to_keys(tokens), law, level, power, prefix)
            u, pos, seq, off = pit_values(target64, prompt, tokens, setting, vocab, np.random.default_rng(seed + i))
            report.tests += pit_tests(u, pos, seq, off, level, power, prefix)
            report.cases.append({"name": prefix, "samples": n, "length": length, "gamma": gamma,
                                 "setting": dataclasses.asdict(setting), "joint_law": enumerate_law})
            if n < samples:
                report.notes.append(f"{prefix}: time budget reached after {n} of {samples} samples")
            if stop_on_fail and any(t.p_value <= level for t in report.tests):
                report.notes.append(f"verdict decided at {prefix} (a test has p <= {level:.2g}); later cells skipped")
                return _finish(report, m, false_alarm_rate, pair, gamma, length, enumerate_law, started)
    return _finish(report, m, false_alarm_rate, pair, gamma, length, enumerate_law, started)


def _finish(report, m, false_alarm_rate, pair, gamma, length, enumerate_law, started) -> CheckReport:
    tvs = [t.detectable_tv for t in report.tests if t.detectable_tv and "joint_pooled_pearson" in t.name]
    report.target_tv = max(tvs) if tvs else float("nan")
    report.notes.append(f"{m} gating tests planned, Holm at family-wise {false_alarm_rate:g}; pair {pair.name}, "
                        f"γ = {gamma}, {length} new tokens per sample"
                        + ("; joint law by exact enumeration (float64)" if enumerate_law else "; PIT only"))
    report.seconds = time.perf_counter() - started
    return report.decide()
