"""Whole speculative generation over two causal LMs, and the autoregressive baseline.

One step for every unfinished row: the draft proposes g = min(γ, tokens still wanted − 1) tokens
autoregressively, the target scores all g + 1 positions in one pass, Algorithm 1 (or the greedy
rule at temperature 0) decides what is emitted, and the row's sequence grows by 1..g+1 tokens.
Emitted tokens are cut at max_new_tokens and after the first EOS; a finished row leaves the batch.

Randomness: each row has its own stream (`RowStreams`) and draws a fixed block of 2γ + 1 uniforms
per step (γ for drafting, γ for acceptance tests, 1 for the recovered/bonus token), so a row's
output does not depend on the batch it runs in or on the caching strategy.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch

from specdec_ref.errors import SpecDecInputError
from specdec_ref.processing import (
    PARAM_NAMES,
    History,
    SamplingParams,
    check_finite_logits,
    check_params,
    extend_history,
    history_of,
    process,
)
from specdec_ref.runners import context_length, make_runner, model_device, output_width
from specdec_ref.sampling import RowStreams, sample_from_uniform
from specdec_ref.verify import greedy_verify, verify_from_uniforms


@dataclasses.dataclass
class GenerationStats:
    """Per-run counters. A "row-step" is one target call's worth of work for one row."""

    gamma: int = 0
    target_calls: int = 0  # batched target forward passes
    draft_calls: int = 0  # batched draft forward passes
    emitted_per_step: list[int] = dataclasses.field(default_factory=list)  # tokens kept per row-step
    accepted_per_step: list[int] = dataclasses.field(default_factory=list)  # drafts accepted per row-step
    drafted_per_step: list[int] = dataclasses.field(default_factory=list)  # drafts proposed per row-step
    reached: list[int] = dataclasses.field(default_factory=list)  # [γ] row-steps that tested draft position i
    accepted: list[int] = dataclasses.field(default_factory=list)  # [γ] of those, accepted at position i
    alpha_sum: float = 0.0  # Σ over tested positions of Σ_x min(p, q)
    alpha_count: int = 0
    target_seconds: float = 0.0
    draft_seconds: float = 0.0
    wall_seconds: float = 0.0
    new_tokens: int = 0  # tokens returned (after max_new_tokens / EOS truncation)

    @property
    def alpha(self) -> float:
        """Measured α: mean Σ min(p, q) over the draft positions that were tested."""
        return self.alpha_sum / self.alpha_count if self.alpha_count else float("nan")

    @property
    def mean_accepted_tokens(self) -> float:
        """Mean tokens produced per target call per row (accepted drafts + 1)."""
        steps = self.accepted_per_step
        return (sum(steps) + len(steps)) / len(steps) if steps else float("nan")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(alpha=self.alpha, mean_accepted_tokens=self.mean_accepted_tokens)
        return d


@dataclasses.dataclass
class GenerationResult:
    tokens: torch.Tensor  # [B, N] int64 new tokens; -1 after EOS / for rows shorter than N
    stats: GenerationStats


def eos_set(eos_token_id) -> set[int]:
    if eos_token_id is None:
        return set()
    if isinstance(eos_token_id, int):
        return {eos_token_id}
    return {int(e) for e in eos_token_id}


def default_eos(model) -> int | list[int] | None:
    """The model's EOS id(s) from its generation config (or config), None if it has none."""
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            return eos
    return None


def check_prompt(input_ids, model, max_new_tokens: int) -> None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise SpecDecInputError("input_ids must be an int64 tensor of shape [B, T]")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise SpecDecInputError(f"input_ids must hold integer token ids, got {input_ids.dtype}")
    B, T = input_ids.shape
    if B == 0 or T == 0:
        raise SpecDecInputError(f"input_ids is empty (shape {tuple(input_ids.shape)}): give at least one prompt token")
    width = output_width(model)
    if int(input_ids.min()) < 0 or int(input_ids.max()) >= width:
        raise SpecDecInputError(f"input_ids must be token ids in [0, {width}); got range "
                                f"[{int(input_ids.min())}, {int(input_ids.max())}] (padding inside prompts is not supported)")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise SpecDecInputError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    limit = context_length(model)
    if limit is not None and T + max_new_tokens > limit:
        raise SpecDecInputError(
            f"prompt length {T} + max_new_tokens {max_new_tokens} exceeds the model's context of {limit} tokens;"
            " shorten the prompt or lower max_new_tokens"
        )


def check_gamma(gamma) -> None:
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise SpecDecInputError(f"gamma must be an integer >= 1 (tokens drafted per step), got {gamma!r}")


def check_same_vocab(target, draft) -> int:
    vt, vd = output_width(target), output_width(draft)
    if vt != vd:
        raise SpecDecInputError(
            f"target and draft vocabularies differ (target {vt} tokens, draft {vd} tokens); speculative "
            "decoding needs one shared vocabulary (if only embedding padding differs, slice both to the "
            "tokenizer size: harness.models.hf_pair.reconcile_vocab)"
        )
    return vt


class Rows:
    """Bookkeeping of ragged per-row sequences and outputs."""

    def __init__(self, input_ids: torch.Tensor, max_new_tokens: int, eos: set[int]):
        self.seqs = [row.clone().long() for row in input_ids]
        self.out: list[list[int]] = [[] for _ in self.seqs]
        self.active = list(range(len(self.seqs))) if max_new_tokens > 0 else []
        self.max_new = max_new_tokens
        self.eos = eos

    def remaining(self, row: int) -> int:
        return self.max_new - len(self.out[row])

    def emit(self, row: int, tokens: list[int]) -> int:
        """Append up to `remaining` tokens, stopping after an EOS; returns how many were kept."""
        kept = []
        for tok in tokens[: self.remaining(row)]:
            kept.append(tok)
            if tok in self.eos:
                break
        self.out[row].extend(kept)
        device = self.seqs[row].device
        self.seqs[row] = torch.cat([self.seqs[row], torch.tensor(kept, dtype=torch.long, device=device)])
        if self.remaining(row) == 0 or (kept and kept[-1] in self.eos):
            self.active.remove(row)
        return len(kept)

    def history(self, active: list[int], params: SamplingParams) -> History | None:
        """[A] the tokens so far of these rows, when the parameters depend on them (else None)."""
        if not params.needs_history:
            return None
        return history_of([self.seqs[b] for b in active], [len(self.out[b]) for b in active], sorted(self.eos))

    def tensor(self, device) -> torch.Tensor:
        n = max((len(o) for o in self.out), default=0)
        result = torch.full((len(self.out), n), -1, dtype=torch.long)
        for b, o in enumerate(self.out):
            result[b, : len(o)] = torch.tensor(o, dtype=torch.long)
        return result.to(device)


def processed(logits: torch.Tensor, params: SamplingParams, history: History | None = None,
              name: str = "logits") -> torch.Tensor:
    """logits [..., V] -> the processed sampling law (the same function for p and q); NaN/inf refused."""
    check_finite_logits(logits, name)
    return process(logits, params, history, validate=False)


def target_law(logits, params, history):
    return processed(logits, params, history, "target logits")


def draft_laws(logits, params, history):
    """-> (q the draft token is sampled from, q handed to verification): the same law."""
    q = processed(logits, params, history, "draft logits")
    return q, q


def _verify_block(p, q, x, u_accept, u_final, temperature):
    """p [A, g+1, V], q [A, g, V], x [A, g]: the greedy rule at temperature 0, else Algorithm 1."""
    if temperature == 0:
        return greedy_verify(p, x)
    return verify_from_uniforms(p, q, x, u_accept, u_final, validate=False)


def _emit_block(rows: Rows, row: int, tokens: list[int]) -> int:
    return rows.emit(row, tokens)


def _drafts_this_step(gamma: int, rows: Rows, active: list[int], step: int) -> int:
    """γ drafts, fewer when the rows need fewer; 0 (a plain target step) when one token is left."""
    return min(gamma, max(rows.remaining(b) for b in active) - 1)


@dataclasses.dataclass(frozen=True)
class StepHooks:
    """The parts of a speculative step, named so that a harness can swap exactly one of them (the
    mutant zoo models real bugs this way). The defaults are the reference."""

    # History: the tokens before each position (None when the parameters do not depend on them);
    # the target's position i includes the block's first i drafts.
    target_probs: Callable = target_law  # (logits [A, g+1, V], SamplingParams, History [A, g+1]) -> p
    draft_probs: Callable = draft_laws  # (logits [A, V], SamplingParams, History [A]) -> (q sampled, q verified)
    draft_token: Callable = sample_from_uniform  # (q [A, V], u [A]) -> draft tokens [A]
    verify: Callable = _verify_block  # (p, q, x, u_accept, u_final, temperature) -> VerifyOutput
    target_runner: Callable = make_runner  # (model, name, n_rows, strategy) -> runner with .logits()
    draft_runner: Callable = make_runner
    emit: Callable = _emit_block  # (rows, row, tokens) -> number of tokens kept
    # (gamma, rows, active, step) -> drafts this step, 0 … γ (0: a plain target step, as an n-gram drafter's miss);
    # any schedule fixed before the step's draws is lossless
    drafts: Callable = _drafts_this_step


REFERENCE_HOOKS = StepHooks()


def speculative_generate(
    target,
    draft,
    input_ids: torch.Tensor,  # [B, T] int64 prompt, no padding
    *,
    max_new_tokens: int,
    gamma: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | list[int] | None = None,
    cache: str = "cache",
    hooks: StepHooks = REFERENCE_HOOKS,
    **extra,  # min_p, logit_bias, penalties, bad_words_ids, min_new_tokens, constraint (specdec_ref.processing
    # .SamplingParams), prefix_allowed_tokens_fn (transformers-style, becomes the constraint)
) -> GenerationResult:
    """Speculative sampling with `draft` proposing for `target` (greedy at temperature 0)."""
    check_gamma(gamma)
    params = sampling_params(temperature, top_k, top_p, check_same_vocab(target, draft), **extra)
    check_prompt(input_ids, target, max_new_tokens)
    started = time.perf_counter()
    device = model_device(target)
    rows = Rows(input_ids.to(device), max_new_tokens, eos_set(eos_token_id))
    streams = RowStreams(seed, len(rows.seqs), device="cpu")
    t_run = hooks.target_runner(target, "target", len(rows.seqs), cache)
    d_run = hooks.draft_runner(draft, "draft", len(rows.seqs), cache)
    stats = GenerationStats(gamma=gamma, reached=[0] * gamma, accepted=[0] * gamma)
    step = 0
    while rows.active:
        active = list(rows.active)
        left = max(rows.remaining(b) for b in active) - 1
        g = max(0, min(gamma, hooks.drafts(gamma, rows, active, step), left))
        step += 1
        u = streams.uniforms(active, 2 * gamma + 1).to(device)  # [A, 2γ+1]: γ drafts, γ tests, 1 final
        seqs = [rows.seqs[b] for b in active]
        before = rows.history(active, params)  # [A]: the tokens before the block
        drafts, q_rows = [], []
        for i in range(g):
            q_sample, q_verify = hooks.draft_probs(d_run.logits(active, seqs, 1)[:, -1], params,
                                                   _appended(before, drafts))  # [A, V]
            x_i = hooks.draft_token(q_sample, u[:, i])  # [A]; argmax when q is one-hot (greedy)
            drafts.append(x_i)
            q_rows.append(q_verify)
            seqs = [torch.cat([s, x_i[j : j + 1]]) for j, s in enumerate(seqs)]
        block = None if before is None else extend_history(before, _stack(drafts, len(active)))  # [A, g+1]
        p = hooks.target_probs(t_run.logits(active, seqs, g + 1), params, block)  # [A, g+1, V]
        if g == 0:  # one token left to produce: a plain target step
            emitted = sample_from_uniform(p[:, 0], u[:, 2 * gamma]).unsqueeze(1)
            n_acc = torch.zeros(len(active), dtype=torch.long, device=device)
        else:
            q = torch.stack(q_rows, dim=1)  # [A, g, V]
            result = hooks.verify(p, q, torch.stack(drafts, dim=1), u[:, gamma : gamma + g], u[:, 2 * gamma],
                                  params.temperature)
            emitted, n_acc = result.tokens, result.n_accepted
            _record_alpha(stats, p[:, :g], q, n_acc)
        for j, row in enumerate(active):
            n = int(n_acc[j])
            stats.emitted_per_step.append(hooks.emit(rows, row, emitted[j, : n + 1].tolist()))
            stats.accepted_per_step.append(n)
            stats.drafted_per_step.append(g)
            for i in range(min(g, n + 1)):
                stats.reached[i] += 1
                stats.accepted[i] += int(i < n)
    stats.target_calls, stats.draft_calls = t_run.calls, d_run.calls
    stats.target_seconds, stats.draft_seconds = t_run.seconds, d_run.seconds
    stats.wall_seconds = time.perf_counter() - started
    tokens = rows.tensor(input_ids.device)
    stats.new_tokens = int((tokens >= 0).sum())
    return GenerationResult(tokens, stats)


def _stack(drafts: list[torch.Tensor], n_rows: int) -> torch.Tensor:  # -> [A, i] on the CPU
    return torch.stack(drafts, 1).cpu() if drafts else torch.zeros(n_rows, 0, dtype=torch.long)


def _appended(history: History | None, drafts: list[torch.Tensor]) -> History | None:
    """[A] history with the block's drafts so far appended (the draft's i-th position)."""
    if history is None:
        return None
    x = _stack(drafts, len(history.n_generated))
    return History(torch.cat([history.seq, x], 1), history.n_generated + x.shape[1], history.eos)


def sampling_params(temperature, top_k, top_p, vocab: int, **extra) -> SamplingParams:
    """The request's parameters, checked (SpecDecInputError names a bad or unknown one)."""
    extra = dict(extra)
    prefix_fn = extra.pop("prefix_allowed_tokens_fn", None)
    if prefix_fn is not None or extra.get("constraint") is not None:
        from specdec_ref.constraints import as_constraint

        extra["constraint"] = as_constraint(extra.get("constraint"), prefix_fn, vocab)
    unknown = sorted(set(extra) - set(PARAM_NAMES))
    if unknown:
        raise SpecDecInputError(f"unknown sampling parameter(s) {', '.join(unknown)}; known: {', '.join(PARAM_NAMES)}")
    params = SamplingParams(temperature, top_k, top_p, **extra)
    check_params(params, vocab)
    return params


def _record_alpha(stats: GenerationStats, p: torch.Tensor, q: torch.Tensor, n_acc: torch.Tensor) -> None:
    """α at each tested position: Σ_x min(p, q); position i is tested when the first i drafts were kept."""
    overlap = torch.minimum(p, q).sum(dim=-1)  # [A, g]
    tested = torch.arange(p.shape[1], device=p.device).unsqueeze(0) <= n_acc.unsqueeze(1)  # [A, g]
    stats.alpha_sum += float(overlap[tested].sum())
    stats.alpha_count += int(tested.sum())


def autoregressive_generate(
    model,
    input_ids: torch.Tensor,  # [B, T]
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | list[int] | None = None,
    cache: str = "cache",
    **extra,  # as speculative_generate
) -> GenerationResult:
    """Plain sampling from `model`, with the same processing, caching and timing as the speculative path."""
    params = sampling_params(temperature, top_k, top_p, output_width(model), **extra)
    check_prompt(input_ids, model, max_new_tokens)
    started = time.perf_counter()
    device = model_device(model)
    rows = Rows(input_ids.to(device), max_new_tokens, eos_set(eos_token_id))
    streams = RowStreams(seed, len(rows.seqs), device="cpu")
    run = make_runner(model, "target", len(rows.seqs), cache)
    stats = GenerationStats(gamma=0)
    while rows.active:
        active = list(rows.active)
        u = streams.uniforms(active, 1).to(device)[:, 0]  # [A]
        logits = run.logits(active, [rows.seqs[b] for b in active], 1)[:, -1]  # [A, V]
        probs = processed(logits, params, rows.history(active, params))
        tokens = sample_from_uniform(probs, u)
        for j, row in enumerate(active):
            stats.emitted_per_step.append(rows.emit(row, [int(tokens[j])]))
            stats.accepted_per_step.append(0)
    stats.target_calls, stats.target_seconds = run.calls, run.seconds
    stats.wall_seconds = time.perf_counter() - started
    tokens = rows.tensor(input_ids.device)
    stats.new_tokens = int((tokens >= 0).sum())
    return GenerationResult(tokens, stats)
