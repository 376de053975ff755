"""Contexts cells of the generation level: the randomized PIT pooled over a catalogue of contexts
(harness/contexts.py), one cell per sampling setting, with its slices (per family, per step band, at the cache
block boundaries) and the tests that accumulate evidence per context. Also the output check of a generate() call
that the prompt cells (harness.check.generation) share."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch

from harness.adapters.calling import call_impl
from harness.check.conventions import order_matters
from harness.check.driver import Cell, Check
from harness.check.exact_laws import SupportCount
from harness.check.pit import (
    PIT_BATCH_POSITIONS,
    parameter_effects,
    pooled_guarantee,
    relax_boundary_tokens,
    support_message,
)
from harness.check.report import deterministic_result
from harness.check.sampler_tests import GATE_MIN_EXPECTED
from harness.check.scoring import score_continuations
from harness.check.settings import Setting
from harness.policy import catalogue
from harness.stats import (
    TestResult,
    mass_above_descending,
    pit_from_masses,
    probit_mean_test,
    probit_per_stratum_test,
    serial_independence_test,
    stratified_uniformity_test,
    uniformity_test,
)
from specdec_ref.processing import ORDERS, History, extend_history, process

STEP_BANDS = ((0, 1), (1, 4), (4, 16), (16, None))  # generated-token index j: first step, early, middle, late
# Default rows of a contexts cell (key: V <= 64, the exact joint law, or not): run sizes are policy, named in
# suites/catalogues/sizes.py with the measurements behind them.
CONTEXT_ROWS = catalogue("sizes").CONTEXT_ROWS


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



def contexts_pit_tests(values: dict, families, block_sizes, rate, power, prefix) -> list[TestResult]:
    """The pooled PIT and its slices: per family, per step band, at the first and last slot of every cache block
    (absolute position mod B = 0 and B − 1); tests that accumulate evidence per context instead of pooling it
    (binned uniformity within every context; the probit score Φ⁻¹(u) per context, squared, and pooled): a row that
    reads another row's law, or a law flattened at some contexts and sharpened at others, deviates in opposite
    directions at different contexts, which the pooled test averages away; and the serial test within rows.
    Every slice is chosen by the context and the position, never by the token drawn there, so each is exactly
    U(0, 1) under H0. None states a per-position TV: each carries its scope and guarantee."""
    u, step, pos, seq, fam, ctx = (values[k] for k in ("u", "step", "abs", "seq", "family", "context"))
    off = values["off_support"]
    kw = {"rate": rate, "power": power}
    n_ctx = len(np.unique(ctx))
    out = [deterministic_result(f"{prefix}/pit_support", off == 0, n=len(u), message=support_message(off))]
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


# The progress line's cost of generation (harness.progress.Step), in target positions: a generate() call of B rows
# with prompts of P tokens and L new tokens costs L·(CALL_POSITIONS + B·(P + L/2 + ROW_POSITIONS)) (one step per new
# token, each over every row's sequence, plus a row's own work), and scoring a row for its tests
# TEST_POSITIONS·(P + L + TEST_ROW_POSITIONS). Fitted to two timed runs of the default toy plan with the reference
# (specdec_ref.adapters:generate, this 2-core CPU under load 6-12, 2026-12-07; results/progress/README.md): on the
# same load a prompt cell (10 calls of 2,000 rows × 3 tokens, prompts of 4) draws in about 0.3 × a contexts cell's
# time (8 calls of ~137 rows × 40 tokens, prompts of 4 to 221) and tests in 2.5 × its tests' time; greedy over four
# long contexts about 0.18 ×.
CALL_POSITIONS = 4600
ROW_POSITIONS = 35
TEST_POSITIONS = 4
TEST_ROW_POSITIONS = 16


def generation_cost(prompt_lengths, new_tokens: int, chunk: int) -> tuple[float, float]:
    """(draw cost, test cost) of continuing one row per entry of `prompt_lengths` by `new_tokens`, in calls of at
    most `chunk` rows per prompt length (as `sample_contexts` groups them)."""
    draw = test = 0.0
    sizes, counts = np.unique(np.asarray(prompt_lengths, dtype=np.int64), return_counts=True)
    for size, count in zip(sizes.tolist(), counts.tolist(), strict=True):
        calls = -(-count // chunk)
        draw += new_tokens * (calls * CALL_POSITIONS + count * (size + new_tokens / 2 + ROW_POSITIONS))
        test += count * TEST_POSITIONS * (size + new_tokens + TEST_ROW_POSITIONS)
    return draw, test


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
            check_generation_output(out, len(part), length, pair.vocab_size)
            out = out.detach().to("cpu", torch.long)
            tokens[torch.as_tensor(part), : out.shape[1]] = out
            done[part] = True
            if progress:
                progress(len(part))
            if deadline is not None and time.monotonic() > deadline:
                return tokens[torch.as_tensor(done)], rows[done]
    return tokens, rows


def _contexts_pit_run(cell: Cell, trials: ContextTrials, rate: float, power: float) -> list[TestResult]:
    data, source = cell.data, cell.summary["_source"]
    effects: dict = {}
    values = contexts_pit_values(source.scorer, data.contexts, trials, data.setting, source.vocab,
                                 np.random.default_rng(source.seed + 5000 + data.index), eos=source.eos,
                                 order=source.order, effects=effects)
    if effects:
        cell.summary["parameter_effects"] = effects
    tests = contexts_pit_tests(values, data.families, data.block_sizes, rate, power, cell.name)
    cell.summary["tokens"] = int(len(values["u"]))
    cell.summary["detectable_tv_per_family"] = {
        "all": tests[1].detectable_tv,
        **{f: t.detectable_tv for f, t in zip(data.families, tests[2 : 2 + len(data.families)], strict=True)}}
    return tests


def _contexts_conventions_run(cell: Cell, trials: ContextTrials, rate: float, power: float) -> list[TestResult]:
    """As the prompt cells' conventions check (harness.check.generation), for a contexts cell."""
    data, source = cell.data, cell.summary["_source"]
    if not cell.decided(rate):
        return []
    fits = []
    for order in ORDERS:
        if order == source.order or not order_matters(data.setting, order):
            continue
        values = contexts_pit_values(source.scorer, data.contexts, trials, data.setting, source.vocab,
                                     np.random.default_rng(source.seed + 5000 + data.index), eos=source.eos,
                                     order=order)
        if all(t.p_value > rate for t in contexts_pit_tests(values, data.families, data.block_sizes, rate, power,
                                                             "convention")):
            fits.append(order)
    cell.summary["consistent_conventions"] = fits
    return []


def default_rows(cell: Cell, tv: float, rate: float, power: float) -> int:
    """A check's plan (`Check.samples_for`): the cell's declared default rows (policy), whatever the TV."""
    return cell.summary["default_rows"]


CONTEXTS_PIT = Check("contexts_pit", lambda cell: count_contexts_pit_tests(cell.data.families, cell.data.block_sizes),
                     _contexts_pit_run, samples_for=default_rows)
CONTEXTS_CONVENTIONS = Check("contexts_conventions", lambda cell: 0, _contexts_conventions_run, gating=False)


class BadGenerationOutput(Exception):
    pass


def check_generation_output(out, B, length, vocab):
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != B:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise BadGenerationOutput(f"returned {shape}, expected a [B={B}, N<={length}] int64 tensor")
    if out.is_floating_point():
        raise BadGenerationOutput(f"returned dtype {out.dtype}, expected integer token ids")
    if out.shape[1] > length or (out.numel() and (int(out.max()) >= vocab or int(out.min()) < -1)):
        raise BadGenerationOutput(f"returned ids outside [0, {vocab}) or more than max_new_tokens={length} tokens")

