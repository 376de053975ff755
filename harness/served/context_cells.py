"""Contexts cells at the engine level (`--contexts catalogue`): the generation level's pooled PIT over a catalogue
of contexts (harness.check.context_cells), the continuations drawn over HTTP and scored by the local target.
`run` is the check run (harness.served.check.EngineRun).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from harness.check.driver import Cell, MalformedTrials
from harness.check.exact_laws import ENUMERATION_MAX_VOCAB
from harness.check.settings import Setting
from harness.check.structured import setting_record
from harness.served.client import EngineError
from harness.served.draws import format_result, needs_token_names
from harness.served.probe import choice_token_ids
from harness.served.requests import reply_choices, sampling_request


def cells(run, settings: list[Setting], first: int) -> list[Cell]:
    """One contexts cell per sampling setting (numbered from `first`), over the catalogue's plan for the pair."""
    contexts = contexts_plan(run)
    return [contexts_cell(run, contexts, setting, first + j) for j, setting in enumerate(settings)] if contexts else []


class _ContextsScorer:
    """What the generation level's contexts checks read from a cell (`cell.summary["_source"]`): the local
    target that scores the continuations, its vocabulary, EOS, the declared convention and the run seed."""

    def __init__(self, run):
        from harness.check.exact_laws import target64
        from specdec_ref.generate import default_eos, eos_set

        self.scorer = target64(run.pair) if run.config.score_dtype == "float64" else run.pair.target
        self.vocab, self.seed, self.order = run.pair.vocab_size, run.config.seed, run.config.processing_order
        self.eos = eos_set(default_eos(run.pair.target))


def contexts_plan(run) -> dict:
    """The pair's contexts catalogue (harness.contexts.plan: the contexts, block sizes and continuation length)."""
    from harness.contexts import plan

    return plan(run.pair, seed=run.config.seed)


def contexts_cell(run, contexts: dict, setting: Setting, index: int) -> Cell:
    """The contexts cell of one sampling setting: the generation level's contexts checks, scored by the local
    target (`_ContextsScorer`)."""
    from harness.check.context_cells import CONTEXT_ROWS, CONTEXTS_CONVENTIONS, CONTEXTS_PIT, ContextsCell
    from harness.contexts import slots

    items = contexts["contexts"]
    declared = slots(items)  # the catalogue is built when the cell draws, not when the plan is declared
    families = tuple(dict.fromkeys(c.family for c in declared))
    data = ContextsCell(items, families, setting, tuple(contexts.get("block_sizes", ())), index)
    length = contexts.get("length") or run.length
    return Cell(f"{setting.label}/contexts", [CONTEXTS_PIT, CONTEXTS_CONVENTIONS], data, math.nan,
                {"_source": _ContextsScorer(run), "length": length, "setting": setting_record(setting),
                 "processing_order": run.config.processing_order, "contexts": len(items),
                 "families": {f: sum(c.family == f for c in declared) for f in families},
                 "prompt_lengths": sorted({c.length for c in declared}), "block_sizes": list(data.block_sizes),
                 "default_rows": CONTEXT_ROWS[run.pair.vocab_size <= ENUMERATION_MAX_VOCAB]})


def draw_contexts(run, cell: Cell, n: int):
    """n continuations spread round-robin over the cell's contexts: one request per context (its share of
    the n rows), all sent at once; the rows come back as the generation level's ContextTrials."""
    from harness.check.context_cells import ContextTrials, context_rows

    data, length = cell.data, cell.summary["length"]
    start = cell.summary.get("_drawn", 0)
    assigned = context_rows(n, len(data.contexts), start)
    needs_names = needs_token_names(run.engine, run.model, list(data.contexts[0].tokens))
    jobs, members = [], []
    for c in np.unique(assigned):
        rows_c = np.nonzero(assigned == c)[0]
        seed = run.config.seed * 1_000_003 + 7919 * int(c) + 104_729 * (data.index + 1) + start
        jobs.append((f"engine/{cell.name}/ctx{int(c)}/{start}/{seed}",
                     sampling_request(run.model, list(data.contexts[c].tokens), len(rows_c), length, data.setting,
                                      seed if run.config.seeded else None, needs_names, run.config.extra_body)))
        members.append(rows_c)
    replies = run.engine.run_all("/v1/completions", jobs, run.store, run.progress)
    rows: list[list] = [[] for _ in range(n)]
    reasons = [""] * n
    for (key, payload), rows_c in zip(jobs, members, strict=True):
        choices = reply_choices(replies[key], payload["n"], run.engine.base)
        for r, choice in zip(rows_c, choices, strict=True):
            ids = choice_token_ids(choice)
            if ids is None:
                raise EngineError(f"{run.engine.base} returned no token ids: the contexts cells need them")
            rows[r], reasons[r] = ids, str(choice.get("finish_reason"))
    cell.summary["_drawn"] = start + n
    fmt = format_result(cell.name, rows, reasons, length, run.pair)
    clean = [[t if isinstance(t, int) and 0 <= t < run.pair.vocab_size else 0 for t in r[:length]] for r in rows]
    tokens = torch.tensor([r + [-1] * (length - len(r)) for r in clean], dtype=torch.long).reshape(n, length)
    trials = ContextTrials(tokens, assigned)
    if fmt.p_value == 0.0:
        exc = MalformedTrials(fmt.details.get("message", "malformed continuations"))
        exc.trials = trials
        raise exc
    return trials
