"""Measuring one cell: warm-up, repeats, device-synchronized timers, tokens counted one way for every method.

Timing protocol (STYLE.md principle 7): every method first runs `warmup` times untimed (a short
generation on the first prompt); then, in each of `repeats` rounds, every method of the cell generates
for the same prompts with the same seeds (prompt i of round r: seed + 1000 r + i), B = 1, the device
synchronized before the clock starts and before it stops. Methods rotate their order from round to
round so a slow drift of the machine does not favour one. Tokens are counted identically for all
methods: the new tokens returned (−1 padding after EOS excluded), divided by the wall time of the round.
Each generation of a round is also timed on its own (E2EL), with the end of every target forward pass
stamped (`EmissionClock`): the first stamp is its time to first token, the gaps between stamps its
inter-token latencies (a speculative step emits its tokens at the end of its target pass).

Counts protocol (`tokens` cells): batched rows with the recomputing runner, repeated with fresh seeds
until at least `min_row_steps` row-steps drafted the full γ; only those enter the token formula (a
step drafting fewer tokens near max_new_tokens follows the formula of a smaller γ).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator

import torch

from harness.bench.cells import Cell
from harness.errors import HarnessError
from harness.pairs import ModelPair
from specdec_ref.generate import GenerationStats, autoregressive_generate, default_eos, speculative_generate
from specdec_ref.runners import context_length
from specdec_ref.toy import add_synthetic_cost

WARMUP_TOKENS = 16
STAMPED = ("ar", "ref")  # methods whose token emissions are stamped (the reference's runners synchronize anyway)
_RANDOM_PROMPT_LENGTH = 8  # pairs without default prompts get random token ids of this length

# method(ids [1, T], seed, max_new_tokens) -> (tokens [1, N] with -1 padding, stats or None)
Method = Callable[[torch.Tensor, int, int], tuple[torch.Tensor, GenerationStats | None]]


def sync(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' deprecation notices would tear the progress bar; errors still show."""
    from transformers.utils import logging

    before = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(before)


@contextlib.contextmanager
def synthetic_cost(pair: ModelPair, cost_ms: tuple[float, float] | None) -> Iterator[None]:
    """Pad every target/draft forward to (target_ms, draft_ms) for the duration; no-op for None."""
    if cost_ms is None:
        yield
        return
    handles = [*add_synthetic_cost(pair.target, cost_ms[0] / 1e3), *add_synthetic_cost(pair.draft, cost_ms[1] / 1e3)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for model in (pair.target, pair.draft):
            vars(model).pop("specdec_synthetic_cost", None)


class EmissionClock:
    """Times at which the target finished each forward pass: the tokens of a step are decided at the end of
    its target pass, so these are the token-emission times of an in-process run (TTFT, ITL as over HTTP)."""

    def __init__(self, module, device):
        self.times: list[float] = []
        self._device = device
        self._handle = module.register_forward_hook(self._stamp)

    def _stamp(self, module, args, output):
        sync(self._device)
        self.times.append(time.perf_counter())

    def remove(self) -> None:
        self._handle.remove()


def request_record(start: float, end: float, emissions: list[float], tokens: int) -> dict:
    """One generation as `harness.bench.conventions.latency_fields` reads it (seconds)."""
    return {"tokens": tokens, "e2el_s": end - start, "ttft_s": (emissions[0] - start) if emissions else None,
            "gaps_s": [b - a for a, b in zip(emissions, emissions[1:], strict=False)]}


class ForwardCounter:
    """Counts forward passes of a module (for implementations that report no statistics)."""

    def __init__(self, module):
        self.calls = 0
        self._handle = module.register_forward_pre_hook(self._count)

    def _count(self, module, args):
        self.calls += 1

    def remove(self) -> None:
        self._handle.remove()


CATALOGUE = "catalogue:"  # --prompt-select catalogue:CATEGORY_OR_ID picks from suites/prompts/bench.jsonl


def _split(select: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names of the pair's default prompts, names of the bench catalogue without their prefix)."""
    return (tuple(s for s in select if not s.startswith(CATALOGUE)),
            tuple(s[len(CATALOGUE):] for s in select if s.startswith(CATALOGUE)))


def catalogue_prompts(pair: ModelPair, names: tuple[str, ...]) -> list[list[int]]:
    """Token ids of the bench catalogue's prompts whose category or id is in `names` (file order), encoded as
    plain text once per tokenizer (harness.prompts.pair_catalogue): what `specdec bench --endpoint` sends."""
    from harness.prompts import pair_catalogue

    rows = pair_catalogue(pair)
    if rows is None:
        raise HarnessError(f"--prompt-select {CATALOGUE}...: {pair.name} has no tokenizer to encode the catalogue "
                           "(suites/prompts/bench.jsonl) with")
    known = {p.kind for p, _ in rows} | {p.id for p, _ in rows}
    unknown = sorted(set(names) - known)
    if unknown:
        raise HarnessError(f"--prompt-select: the catalogue has no category or id {unknown[0]!r}; categories: "
                           f"{', '.join(sorted({p.kind for p, _ in rows}))}")
    return [ids for p, ids in rows if p.kind in names or p.id in names]


def selected_prompts(pair: ModelPair, select: tuple[str, ...] | None) -> list[list[int]]:
    """The pair's default prompts, or those whose kind or id is in `select` (suites/prompts/prompts.jsonl order),
    then the bench catalogue's named `catalogue:CATEGORY` or `catalogue:ID` (suites/prompts/bench.jsonl order)."""
    if not select:
        return list(pair.prompts or [])
    select, from_catalogue = _split(select)
    chosen = catalogue_prompts(pair, from_catalogue) if from_catalogue else []
    if not select:
        return chosen
    from harness.prompts import load_prompts

    catalogue = load_prompts()
    if not pair.prompts or len(pair.prompts) != len(catalogue):
        raise HarnessError(f"--prompt-select needs a pair whose prompts are the default prompt set; {pair.name} "
                           f"has {len(pair.prompts or [])} prompts of its own")
    known = {p.kind for p in catalogue} | {p.id for p in catalogue}
    unknown = sorted(set(select) - known)
    if unknown:
        raise HarnessError(f"--prompt-select: no prompt kind or id {unknown[0]!r}; kinds and ids: "
                           f"{', '.join(sorted(known))}")
    return [ids for ids, p in zip(pair.prompts, catalogue, strict=True)
            if p.kind in select or p.id in select] + chosen


def synthetic_prompts(pair: ModelPair) -> bool:
    """True when a pair's prompts are no text: token ids (random for toy and const pairs, random letters for
    toy-pieces, fixed ids for the tiny-architecture pairs) or none at all (random ids drawn per cell). Only
    prompts encoded from a text catalogue (`pair.meta["prompt_set"]`: SmolLM2, --target/--draft pairs with a
    tokenizer) count as text."""
    return not (pair.prompts and pair.meta.get("prompt_set"))


def cell_synthetic(pair: ModelPair, cell: Cell) -> bool:
    """Whether a cell's prompts are no text: catalogue prompts are text (encoded by the pair's tokenizer)."""
    own, from_catalogue = _split(cell.prompt_select or ())
    return synthetic_prompts(pair) if own or not from_catalogue else False


def cell_prompts(pair: ModelPair, cell: Cell) -> list[torch.Tensor]:
    """[1, T] prompts: the pair's defaults (or the selected ones; cycled if there are fewer than asked), else
    random ids."""
    n = cell.prompts
    chosen_set = selected_prompts(pair, cell.prompt_select)
    if chosen_set:
        chosen = [chosen_set[i % len(chosen_set)] for i in range(n)]
    else:
        g = torch.Generator().manual_seed(cell.seed)
        chosen = torch.randint(0, pair.vocab_size, (n, _RANDOM_PROMPT_LENGTH), generator=g).tolist()
    return [torch.tensor([ids], dtype=torch.long, device=cell.device) for ids in chosen]


def usable_new_tokens(pair: ModelPair, prompt_length: int, wanted: int) -> int:
    """max_new_tokens clamped so prompt + new tokens fit the target's context."""
    limit = context_length(pair.target)
    return wanted if limit is None else max(1, min(wanted, limit - prompt_length))


def _eos(pair: ModelPair):
    eos = default_eos(pair.target)  # what transformers' generate stops at, so both sides stop alike
    return eos if eos is not None else pair.eos_token_id


def methods(pair: ModelPair, cell: Cell) -> dict[str, Method]:
    """The generators a cell can time, all with the cell's sampling settings."""
    sampling = dict(temperature=cell.temperature, top_k=cell.top_k, top_p=cell.top_p)
    eos = _eos(pair)

    def ar(ids, seed, n):
        r = autoregressive_generate(pair.target, ids, max_new_tokens=n, seed=seed, eos_token_id=eos, **sampling)
        return r.tokens, r.stats

    def ref(ids, seed, n):
        r = speculative_generate(pair.target, pair.draft, ids, max_new_tokens=n, gamma=cell.gamma, seed=seed,
                                 eos_token_id=eos, **sampling)
        return r.tokens, r.stats

    def hf_ar(ids, seed, n):
        from harness.adapters.hf import hf_generate  # transformers' own generate, no assistant

        return hf_generate(pair.target, ids, max_new_tokens=n, seed=seed, **sampling), None

    def hf(ids, seed, n):
        from harness.adapters.hf import assisted_generate

        return assisted_generate(pair.target, pair.draft, ids, max_new_tokens=n, gamma=cell.gamma, seed=seed,
                                 **sampling), None

    table = {"ar": ar, "ref": ref, "hf_ar": hf_ar, "hf": hf}
    return {name: table[name] for name in cell.methods}


def merge_stats(stats: list[GenerationStats]) -> dict:
    """Sum of per-run statistics (one γ); the accepted-count histogram covers the row-steps that drafted all γ."""
    gamma = stats[0].gamma
    hist = [0] * (gamma + 1)
    full = [n for s in stats  # the autoregressive baseline (γ = 0) records no drafted counts
            for n, d in zip(s.accepted_per_step, s.drafted_per_step or [0] * len(s.accepted_per_step), strict=True)
            if d == gamma]
    for n in full:
        hist[n] += 1
    every = [n for s in stats for n in s.accepted_per_step]
    return {
        "row_steps": len(every),
        "full_row_steps": len(full),
        "accepted_hist": hist,  # [γ+1] full-γ row-steps that accepted k drafts
        "accepted_all_steps": sum(every),
        "drafted_all_steps": sum(sum(s.drafted_per_step) for s in stats),  # draft tokens proposed
        "drafting_row_steps": sum(d > 0 for s in stats for d in s.drafted_per_step),  # vLLM's num_drafts
        "reached": [sum(s.reached[i] for s in stats) for i in range(gamma)],
        "accepted": [sum(s.accepted[i] for s in stats) for i in range(gamma)],
        "alpha_sum": sum(s.alpha_sum for s in stats),
        "alpha_count": sum(s.alpha_count for s in stats),
        "target_calls": sum(s.target_calls for s in stats),
        "draft_calls": sum(s.draft_calls for s in stats),
        "target_seconds": sum(s.target_seconds for s in stats),
        "draft_seconds": sum(s.draft_seconds for s in stats),
        "new_tokens": sum(s.new_tokens for s in stats),
    }


def measure_timing(pair: ModelPair, cell: Cell) -> dict:
    """Warm-up, then `repeats` rounds timing every method of the cell on the same prompts and seeds."""
    prompts = cell_prompts(pair, cell)
    n_new = usable_new_tokens(pair, max(p.shape[1] for p in prompts), cell.max_new_tokens)
    runs = methods(pair, cell)
    names = list(runs)
    timings = {m: {"tokens": [], "seconds": []} for m in names}
    stats: dict[str, list[GenerationStats]] = {m: [] for m in names}
    counters = {m: {"target_calls": [], "draft_calls": []} for m in names}
    requests: dict[str, list[dict]] = {m: [] for m in names}  # per generation: e2el, TTFT, emission gaps
    with torch_threads(cell.threads), synthetic_cost(pair, cell.synthetic_cost_ms), quiet_transformers():
        for _ in range(cell.warmup):
            for name in names:
                runs[name](prompts[0], cell.seed, min(n_new, WARMUP_TOKENS))
        for r in range(cell.repeats):
            for name in names[r % len(names):] + names[: r % len(names)]:
                target_count, draft_count = ForwardCounter(pair.target), ForwardCounter(pair.draft)
                # transformers' generate does not synchronize per forward: a stamp there would slow it on a GPU
                clock = EmissionClock(pair.target, cell.device) if name in STAMPED else None
                sync(cell.device)
                start = time.perf_counter()
                outs = []
                for i, ids in enumerate(prompts):
                    stamps: list[float] = clock.times if clock else []
                    stamps.clear()
                    began = time.perf_counter()
                    outs.append(runs[name](ids, cell.seed + 1000 * r + i, n_new))
                    sync(cell.device)
                    requests[name].append({"repeat": r, "prompt": i, **request_record(
                        began, time.perf_counter(), list(stamps), int((outs[-1][0] >= 0).sum()))})
                seconds = time.perf_counter() - start
                if clock:
                    clock.remove()
                target_count.remove()
                draft_count.remove()
                timings[name]["tokens"].append(sum(int((tokens >= 0).sum()) for tokens, _ in outs))
                timings[name]["seconds"].append(seconds)
                stats[name] += [s for _, s in outs if s is not None]
                counters[name]["target_calls"].append(target_count.calls)
                counters[name]["draft_calls"].append(draft_count.calls)
    return {
        "max_new_tokens_used": n_new,
        "prompt_lengths": [int(p.shape[1]) for p in prompts],
        "random_prompts": cell_synthetic(pair, cell),  # synthetic inputs: token ids, no text; said in the report
        "distinct_prompts": min(len(prompts), len(selected_prompts(pair, cell.prompt_select)) or len(prompts)),
        "timings": timings,  # per method: per-repeat tokens and seconds
        "forwards": counters,  # per method: per-repeat model forward passes (B = 1 each), counted by hooks
        "stats": {m: merge_stats(s) for m, s in stats.items() if s},
        "requests": requests,
    }


def measure_tokens(pair: ModelPair, cell: Cell) -> dict:
    """Batches of up to `cell.prompts` rows until ≥ min_row_steps full-γ row-steps; counts only.

    The first batch is a probe of a quarter of the rows; later batches are sized from its yield of
    full-γ row-steps per row, so a cell overshoots its target by a few percent, not by a whole batch.
    """
    prompt = cell_prompts(pair, cell)[0]  # [1, T]
    n_new = usable_new_tokens(pair, prompt.shape[1], cell.max_new_tokens)
    rows = max(1, cell.prompts // 4)
    collected: list[GenerationStats] = []
    full = 0
    start = time.perf_counter()
    with torch_threads(cell.threads):
        while full < cell.min_row_steps:
            batch = prompt.expand(rows, -1).contiguous()  # [rows, T]: rows differ by their random streams
            result = speculative_generate(
                pair.target, pair.draft, batch, max_new_tokens=n_new, gamma=cell.gamma,
                temperature=cell.temperature, top_k=cell.top_k, top_p=cell.top_p,
                seed=cell.seed + 7919 * len(collected), eos_token_id=_eos(pair), cache="recompute")
            collected.append(result.stats)
            new_full = sum(d == cell.gamma for d in result.stats.drafted_per_step)
            if new_full == 0:
                raise HarnessError(f"{cell.label}: no step drafted all {cell.gamma} tokens (max_new_tokens {n_new} "
                                   "is too short or rows stop at EOS); raise max_new_tokens")
            full += new_full
            per_row = new_full / rows
            rows = min(cell.prompts, max(1, math.ceil(1.05 * (cell.min_row_steps - full) / per_row)))
    return {"max_new_tokens_used": n_new, "batches": len(collected), "seconds": time.perf_counter() - start,
            "random_prompts": cell_synthetic(pair, cell), "stats": {"ref": merge_stats(collected)}}


def measure_cell(pair: ModelPair, cell: Cell) -> dict:
    return measure_tokens(pair, cell) if cell.kind == "tokens" else measure_timing(pair, cell)
