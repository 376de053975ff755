"""Generation-level losslessness check (docs/CONTRACT.md §1b): whole generate() over two causal LMs.

The trial source of the generation level and its cells: the prompt cells (per prompt × sampling setting), the greedy
cells and the contexts cells. The ground truth is the target alone with the shared processing
(specdec_ref.processing); the tests come from their own modules:
- **joint law** (toy pairs, V ≤ 64): harness.check.exact_laws;
- **randomized PIT** (any pair, real models included): harness.check.pit;
- **greedy** (temperature 0) and its numerics: harness.check.greedy;
- **convention diagnosis** after a failed cell: harness.check.conventions;
- **contexts cells** (the PIT pooled over a catalogue of contexts): harness.check.context_cells;
- **settings** (`--setting`, the batteries, what an implementation accepts): harness.check.settings.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np
import torch

from harness.adapters.calling import call_impl
from harness.check.context_cells import (
    CONTEXT_ROWS,
    CONTEXTS_CONVENTIONS,
    CONTEXTS_PIT,
    BadGenerationOutput,
    ContextsCell,
    ContextTrials,
    check_generation_output,
    context_rows,
    default_rows,
    generation_cost,
    sample_contexts,
)
from harness.check.conventions import consistent_conventions
from harness.check.driver import (
    Cell,
    Check,
    CheckConfig,
    MalformedTrials,
    TrialSource,
    run_battery,
)
from harness.check.exact_laws import (
    ENUMERATION_MAX_VOCAB,
    continuation_law,
    joint_law_tests,
    rows_to_keys,
    target64,
)
from harness.check.greedy import greedy_tests
from harness.check.pit import NO_OP_TV, pit_tests, pit_values, static_no_ops
from harness.check.report import CheckReport
from harness.check.settings import Setting, default_settings, supported_settings
from harness.check.streams import numpy_rng, seed_global
from harness.check.structured import bind_constraints, checks_for, setting_record
from harness.contexts import slots
from harness.errors import HarnessError
from harness.pairs import ModelPair
from harness.policy import catalogue
from harness.progress import Step
from harness.stats import TestResult
from specdec_ref.generate import default_eos, eos_set
from specdec_ref.processing import ORDERS

# Default rows of a prompt cell (key: V <= 64, the exact joint law, or not): policy, suites/catalogues/sizes.py.
PROMPT_ROWS = catalogue("sizes").PROMPT_ROWS
GREEDY_CONTEXTS = 4  # greedy/contexts: one context per prompt length, the longest lengths first


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
        check_generation_output(out, b, length, pair.vocab_size)
        outs.append(out.detach().to("cpu", torch.long))
        done += b
        if progress:
            progress(b)
        if deadline is not None and time.monotonic() > deadline:
            break
    width = max(o.shape[1] for o in outs)
    return torch.cat([torch.nn.functional.pad(o, (0, width - o.shape[1]), value=-1) for o in outs])



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




# --- the generation level as a trial source of the check driver (harness.check.driver) -------------------


@dataclasses.dataclass
class SamplingCell:
    prompt: list[int]
    index: int  # prompt index (seeds derive from it)
    setting: Setting


def generation_samples(config: CheckConfig, vocab: int) -> int:
    """Samples per (prompt, sampling setting): the exact joint law of a toy pair affords many."""
    return config.samples or (20_000 if vocab <= ENUMERATION_MAX_VOCAB else 200)


def _greedy_run(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    gating, _, findings = trials
    cell.summary["divergences"] = findings
    return gating


def _greedy_numerics(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    return trials[1]  # near-tie divergences: numerics, reported


def _joint_run(cell: Cell, tokens, rate: float, power: float) -> list[TestResult]:
    data, source = cell.data, cell.summary["_source"]
    law = continuation_law(source.scorer, data.prompt, source.length, data.setting, source.vocab, source.eos,
                           source.order)
    return joint_law_tests(rows_to_keys(tokens), law, rate, power, cell.name)


def _pit_run(cell: Cell, tokens, rate: float, power: float) -> list[TestResult]:
    data, source = cell.data, cell.summary["_source"]
    effects: dict = {}
    u, pos, seq, off = pit_values(source.scorer, data.prompt, tokens, data.setting, source.vocab,
                                  np.random.default_rng(source.seed + data.index), eos=source.eos, order=source.order,
                                  effects=effects)
    if effects:
        cell.summary["parameter_effects"] = effects
    return pit_tests(u, pos, seq, off, rate, power, cell.name)


def _conventions_run(cell: Cell, tokens, rate: float, power: float) -> list[TestResult]:
    """Advisory: when a cell's gating tests fail, is the output the target's law under another known processing
    convention (top-p before temperature, ...)? A convention is not a verification bug: say which."""
    data, source = cell.data, cell.summary["_source"]
    if not cell.decided(rate):
        return []
    fits = consistent_conventions(tokens, source.scorer, data.prompt, source.length, data.setting, source.vocab,
                                  source.eos, source.order, rate, power, source.enumerate, source.seed + data.index)
    cell.summary["consistent_conventions"] = fits
    return []


def _exact_emitted_law(impl, source, data) -> dict | None:
    """The implementation's exact continuation law where it is known (a zoo entry that changes only the p or q a
    step sees carries `exact_continuation_law`), else None."""
    law = getattr(impl, "exact_continuation_law", None)
    if law is None:
        return None
    return law(source.scorer, source.pair.draft, data.prompt, source.length, source.gamma, data.setting, source.eos)


def _estimate_run(cell: Cell, tokens, rate: float, power: float) -> list[TestResult]:
    """`--estimate`: bias-corrected TV of the whole continuation's law against the exact joint law at this prompt,
    and of each position's token (harness.stats.estimate.continuation_estimates), into "tv_estimates"; with the
    exact TV beside it for a p/q-hook zoo entry. Reports, never gates."""
    from harness.stats.estimate import continuation_estimates

    data, source = cell.data, cell.summary["_source"]
    if not getattr(source, "estimate_all", True) and not cell.decided(rate):
        return []  # a FAIL report's default: estimates in the failing cells only
    law = continuation_law(source.scorer, data.prompt, source.length, data.setting, source.vocab, source.eos,
                           source.order)
    emitted = _exact_emitted_law(source.impl, source, data) if source.order == "standard" else None
    rng = numpy_rng(source.seed, "estimate", cell.name)
    cell.summary["tv_estimates"] = [{"law": "", **e} for e in continuation_estimates(
        rows_to_keys(tokens), law, source.vocab, length=source.length, emitted=emitted, rng=rng)]
    return []


ESTIMATE = Check("tv_estimate", lambda cell: 0, _estimate_run, gating=False)
GREEDY_EQUALITY = Check("greedy_equality", lambda cell: len(cell.data), _greedy_run)
GREEDY_NUMERICS = Check("greedy_numerics", lambda cell: 0, _greedy_numerics, gating=False)
JOINT_LAW = Check("joint_law", lambda cell: 3, _joint_run, samples_for=default_rows)
PIT = Check("pit", lambda cell: 3 + cell.summary["length"], _pit_run, samples_for=default_rows)
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
    progress_unit = "samples"

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

    def progress_step(self, cell: Cell, n: int) -> Step:
        """Calls × new tokens × rows' sequence lengths (context_cells.generation_cost): a contexts cell's 1,100 rows
        of 40 tokens after prompts of up to 221 cost more than the prompt cells' 80,000 rows of 3."""
        if cell.name.startswith("greedy"):  # the target alone and the implementation, one prompt at a time
            data = cell.data
            lengths = [s.length for s in (slots(data.contexts)[i] for i in data.picked)] \
                if isinstance(data, ContextPrompts) else [len(p) for p in data]
            new = cell.summary["max_new_tokens"]
            cost = sum(2 * generation_cost([size], new, 1)[0] for size in lengths)
            return Step(cell.name, "greedy cells", None, cost)
        if isinstance(cell.data, ContextsCell):
            lengths = np.array([s.length for s in slots(cell.data.contexts)])
            rows = context_rows(n, len(lengths), cell.summary.get("_drawn", 0))
            draw, test = generation_cost(lengths[rows], self.context_length, self.chunk)
            return Step(cell.name, "context cells", n, draw / max(n, 1), test)
        draw, test = generation_cost([len(cell.data.prompt)] * n, self.length, self.chunk)
        return Step(cell.name, "generation cells", n, draw / max(n, 1), test)

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
        short = [k for k in rows_to_keys(tokens) if len(k) < length and not (k and k[-1] in self.eos)]
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
                f"per-test Holm rate): {tvs}")
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
