"""Engine-level losslessness check: a served engine as the trial source, tested against a ground truth.

The engine is asked for `samples` continuations per (prompt, sampling setting) — n per request,
seeded, token ids returned — and what comes back is tested against the best ground truth available
(harness.served.truths): (a) a local copy of the target, (b) a second endpoint with speculation off that scores
the continuations, (c) that endpoint sampling too (two-sample tests).

Greedy (T = 0): exact equality with the reference endpoint's greedy output, else with the local
target's (harness.served.greedy). Holm over every gating test at `false_alarm_rate`.

The configuration is harness.served.config.EngineConfig; the requests are harness.served.draws; the contexts
cells harness.served.context_cells; the logprobs and API checks harness.served.logprobs and harness.served.api.
This module prepares a run (`EngineRun`), declares its cells and draws them (`EngineSource`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

from harness.check.config import CheckConfig
from harness.check.driver import Cell, MalformedTrials, TrialSource
from harness.check.exact_laws import ENUMERATION_MAX_VOCAB
from harness.check.report import CheckReport
from harness.check.settings import Setting
from harness.check.structured import setting_record
from harness.errors import HarnessError
from harness.progress import Step
from harness.served import context_cells
from harness.served.client import EngineClient, EngineUnreachable, ReplyNotWritten, ResponseStore, config_hash
from harness.served.config import EngineConfig
from harness.served.draws import format_result, sample_rows
from harness.served.greedy import ENGINE_GREEDY, ENGINE_GREEDY_NUMERICS, draw_greedy
from harness.served.text import encode, tokenizer_for
from harness.served.truths import (
    ENGINE_CONVENTIONS,
    ENGINE_ESTIMATE,
    ENGINE_LAW,
    check_tokenizer_identity,
    choose_ground_truth,
    require_processed,
)


@dataclasses.dataclass
class EngineRun:
    """What one check run carries between its steps: the clients, the local pair and its tokenizer (or None), the
    ground truth chosen, the continuation length and the response store. The modules that draw and test its cells
    (draws, truths, greedy, context_cells, logprobs, api, estimate) take it as `run`."""

    config: EngineConfig
    engine: EngineClient
    model: str
    reference: EngineClient | None
    reference_model: str | None
    pair: object | None
    tokenizer: object | None
    store: ResponseStore
    ground_truth: str
    length: int
    progress: Callable[[int], None] | None
    logprobs_truth: str | None = None  # the logprobs check's ground truth (local / score)
    api_left_out: str | None = None  # why the API check of the default set did not run (the server does not allow it)


def engine_source(config: EngineConfig, notes: list[str], progress: Callable[[int], None] | None,
                  stack: contextlib.ExitStack, client: EngineClient | None = None):
    """(the engine as a trial source, the driver's CheckConfig, the implementation's name): what
    `harness.check.api.run_verify` runs `run_battery` on for the engine level. The clients it opens are
    closed by `stack`; `client` replaces the one `--api` names (an adapter such as
    harness.served.structured.ConstrainedLlamaServerClient, which has no reference endpoint)."""
    options = dict(concurrency=config.concurrency, timeout_s=config.timeout_s, retries=config.retries)
    from harness.served.llama_server import client_for

    engine = client if client is not None else stack.enter_context(client_for(config.api, config.endpoint, **options))
    model = engine.resolve_model(config.model)
    reference = None
    if config.reference_endpoint and client is None:
        reference = client_for(config.api, config.reference_endpoint, **options)
        stack.callback(reference.close)
    reference_model = reference.resolve_model(config.reference_model) if reference else None
    run = _prepare(config, engine, model, reference, reference_model, progress)
    driver = CheckConfig(level="engine", false_alarm_rate=config.false_alarm_rate, power=config.power,
                         seed=config.seed, samples=config.samples, stop_on_fail=config.stop_on_fail, tv=math.nan,
                         time_budget_s=config.time_budget_s, inconclusive_tv=config.inconclusive_tv)
    return EngineSource(run), driver, f"{model} @ {engine.base}"


def run_engine_check(config: EngineConfig, progress: Callable[[int], None] | None = None) -> CheckReport:
    """The engine level's verdict: `harness.check.api.run_verify(config)` (one driver for every level)."""
    from harness.check.api import run_verify

    return run_verify(config, progress)


def run_engine_check_with(client: EngineClient, config):
    """`run_engine_check` with this client (an adapter the engine check's `--api` names do not cover, such as
    harness.served.structured.ConstrainedLlamaServerClient); returns (report, the responses recorded under
    config.out)."""
    from harness.check.api import run_verify

    report = run_verify(config, client=client)
    return report, report.responses and Path(report.responses)


def _prepare(config, engine, model, reference, reference_model, progress) -> EngineRun:
    pair = _local_pair(config) if (config.pair or config.target) else None
    tokenizer = tokenizer_for(pair) if pair is not None else None
    for client in (engine, reference):  # a client that maps text pieces to ids needs the tokenizer first
        if tokenizer is not None and client is not None:
            client.attach(tokenizer)
    if pair is not None:
        check_tokenizer_identity(engine, model, tokenizer)
    ground_truth = choose_ground_truth(config, pair, reference, reference_model)
    vocab = pair.vocab_size if pair is not None else None
    length = config.length or (3 if vocab is not None and vocab <= ENUMERATION_MAX_VOCAB else 16)
    fields = {k: v for k, v in dataclasses.asdict(config).items()
              if k not in ("out", "concurrency", "timeout_s", "retries", "stop_on_fail", "time_budget_s",
                           "inconclusive_tv", "estimate", "fail_estimate", "served_impl",
                           "gamma")}  # how the run is done, judged or reported, not what it asks
    if "api" not in config.checks:  # the API check's own fields: records made before it existed still resume
        for name in ("api_seeds", "api_length", "api_unseeded", "api_where_allowed"):
            fields.pop(name)
    if config.server_label is not None:  # the label names the servers: their URLs (free ports) do not
        fields.pop("endpoint")
        fields.pop("reference_endpoint")
    store = ResponseStore(config.out, config_hash({**fields, "model": model, "reference_model": reference_model,
                                                   "ground_truth": ground_truth, "length": length}))
    return EngineRun(config, engine, model, reference, reference_model, pair, tokenizer, store, ground_truth, length,
                     progress)


def _local_pair(config: EngineConfig):
    from harness.check.api import load_pair

    if config.target:  # only the target matters here: it is loaded as its own (unused) draft
        return load_pair("", config.target, config.target)
    return load_pair(config.pair)


def _prompts(run: EngineRun) -> list:
    if run.config.prompt_texts:
        texts = list(run.config.prompt_texts)[: run.config.prompts]
        if run.pair is None:
            return texts
        if run.pair.tokenizer is None:  # the toy pairs: their text is the ids written out
            return [encode(run.tokenizer, t) for t in texts]
        # A local target scores token ids: encode the texts as the pair encodes its own prompts (chat turn).
        from harness.prompts import Prompt, encode_prompts

        return encode_prompts(run.pair.tokenizer, [Prompt(f"text{i}", "custom", t) for i, t in enumerate(texts)])
    if run.pair is not None:
        return (run.pair.prompts or [[0]])[: run.config.prompts]
    from harness.prompts import load_prompts

    return [p.text for p in load_prompts()[: run.config.prompts]]


API_EXTRA_REQUESTS = 10  # the API battery's requests besides its seeded and unseeded ones (streams, chat, stops, ...)


@dataclasses.dataclass
class _SamplingCell:
    setting: Setting
    index: int  # prompt index (seeds derive from it)
    prompt: object  # token ids, or text for servers without a local tokenizer


class EngineSource(TrialSource):
    """Trials of a served engine: continuations returned over HTTP, per prompt and sampling setting."""

    level = "engine"
    progress_unit = "requests"  # what the client's run_all counts: one per reply (a request asks for --chunk rows)

    def __init__(self, run: EngineRun):
        self.run = run
        self.died: str | None = None  # why the engine stopped answering, once it has

    def cells(self, config) -> list[Cell]:
        run = self.run
        self.resumed = run.store.resumed  # responses an earlier run of this configuration left in --out
        prompts = _prompts(run)
        vocab = run.pair.vocab_size if run.pair is not None else None
        enumerate_law = run.ground_truth == "local" and vocab <= ENUMERATION_MAX_VOCAB
        settings = run.config.settings
        if any(s.constraint is not None for s in settings):
            from harness.check.structured import bind_constraints

            if run.ground_truth == "score":
                raise HarnessError("a constrained setting needs --ground-truth local or two-sample (a scoring "
                                   "engine's logprobs do not include the constraint mask)")
            if run.pair is not None:  # the local ground truth applies the same constraint
                settings = bind_constraints(settings, run.pair, run.length if enumerate_law else 0)
        sampling = [s for s in settings if s.temperature > 0]
        cells = []
        if "logprobs" in run.config.checks:
            from harness.served import logprobs

            cells += logprobs.cells(run, prompts)
        if "api" in run.config.checks:
            from harness.served import api

            run.api_left_out = api.refusal(run, prompts[0]) if run.config.api_where_allowed else None
            cells += [] if run.api_left_out else api.cells(run, prompts)
        if "tokens" not in run.config.checks:
            return cells
        if run.ground_truth == "score":
            require_processed(run, sampling, prompts)
        if any(s.temperature == 0 for s in run.config.settings):  # first: deterministic and cheap
            cells.append(Cell("greedy", [ENGINE_GREEDY, ENGINE_GREEDY_NUMERICS], prompts, math.nan,
                              {"prompts": len(prompts)}))
        from harness.served.estimate import estimable

        estimates = [ENGINE_ESTIMATE] if ((run.config.estimate or run.config.fail_estimate) and
                                          estimable(run) is None) else []
        # The prompt cells of every setting first (the plan without contexts, in its order), then the contexts
        # cells (as at the generation level): the headline is the tests that see one law each.
        for setting in sampling:
            for i, prompt in enumerate(prompts):
                cells.append(Cell(f"{setting.label}/prompt{i}", [ENGINE_LAW, ENGINE_CONVENTIONS, *estimates],
                                  _SamplingCell(setting, i, prompt),
                                  math.nan, {"_run": run, "length": run.length, "ground_truth": run.ground_truth,
                                             "setting": setting_record(setting), "joint_law": enumerate_law}))
        if run.config.contexts == "catalogue":
            cells += context_cells.cells(run, sampling, len(cells))
        return cells

    def draw(self, cell: Cell, n: int, progress):
        """The cell's trials; an engine that stops answering mid-run fails the cell (and every later one)."""
        if self.died:
            raise MalformedTrials(f"not run: {self.died}")
        try:
            return self._draw(cell, n, progress)
        except EngineUnreachable as exc:  # it answered /v1/models at the start: a crash now is the engine's
            self.died = f"the engine stopped answering mid-run (during {cell.name}): {exc}"
            raise MalformedTrials(self.died) from exc
        except ReplyNotWritten as exc:  # its output held a non-finite value: this cell's contract is broken
            raise MalformedTrials(f"the engine failed to write its reply for {cell.name}: {exc}") from exc

    def _draw(self, cell: Cell, n: int, progress):
        run = self.run
        if cell.name == "greedy":
            return draw_greedy(run, cell)
        if cell.name.startswith("logprobs/"):
            from harness.served import logprobs

            return logprobs.draw(run, cell, n)
        if cell.name.startswith("api/"):
            from harness.served import api

            return api.draw(run, cell)
        if cell.name.endswith("/contexts"):
            return context_cells.draw_contexts(run, cell, n)
        data, config = cell.data, run.config
        seed = config.seed * 1_000_003 + 1000 * data.index + int(data.setting.temperature * 100)
        rows, reasons = sample_rows(run, run.engine, run.model, "engine", data.prompt, data.setting, n, run.length,
                                    seed, allow_text=run.ground_truth == "two-sample")
        ref_rows = None
        if run.ground_truth == "two-sample":
            ref_rows, _ = sample_rows(run, run.reference, run.reference_model, "reference", data.prompt, data.setting,
                                      n, run.length, seed + 55_555, allow_text=True)
        fmt = format_result(cell.name, rows, reasons, run.length, run.pair)
        if fmt.p_value == 0.0:
            exc = MalformedTrials(fmt.details.get("message", "malformed continuations"))
            exc.trials = (rows, ref_rows)
            raise exc
        return rows, ref_rows

    def count(self, trials) -> int:
        from harness.check.context_cells import ContextTrials

        return len(trials) if isinstance(trials, ContextTrials) else len(trials[0])

    def progress_step(self, cell: Cell, n: int) -> Step:
        """Requests (what the progress line counts) and their cost in tokens asked of the server; a cell's tests
        cost its tokens scored once (the local target's, or the scoring endpoint's). Not calibrated against a
        measured run: the API battery's and greedy's requests are not known before they run (counted whole)."""
        run, config = self.run, self.run.config
        chunk, length = max(1, config.chunk), run.length
        if cell.name == "greedy":
            from harness.served.greedy import GREEDY_TOKENS

            return Step(cell.name, "greedy", None, 2 * len(cell.data) * GREEDY_TOKENS)
        if cell.name.startswith("api/"):
            requests = config.api_seeds + config.api_unseeded + API_EXTRA_REQUESTS
            return Step(cell.name, "API battery", None, requests * config.api_length)
        if cell.name.startswith("logprobs/"):
            rows = min(n, config.logprobs_samples)
            return Step(cell.name, "logprobs", -(-rows // chunk), chunk * length, rows * length)
        if cell.name.endswith("/contexts"):
            requests = max(1, min(n, len(cell.data.contexts)))  # one request per context (its share of the rows)
            return Step(cell.name, "law (contexts)", requests, n * length / requests, n * length)
        endpoints = 2 if run.ground_truth == "two-sample" else 1
        return Step(cell.name, "law", endpoints * -(-n // chunk), chunk * length, n * length)

    def extend(self, trials, more):
        from harness.check.context_cells import ContextTrials

        if isinstance(trials, ContextTrials):  # every draw of a contexts cell has the cell's length
            return trials.extend(more)
        return super().extend(trials, more)

    def finish(self, report: CheckReport, config) -> None:
        run = self.run
        if self.resumed:
            report.notes.append(f"resumed: {self.resumed} responses reused from {run.store.path}")
        if run.store.path:
            report.responses = str(run.store.path)
            report.notes.append(f"responses kept in {run.store.path}")
        greedy = next((c for c in report.cases if c["name"] == "greedy"), None)
        if greedy:
            report.samples -= greedy.get("samples", 0)  # greedy prompts are not samples of a law
        report.samples -= sum(c.get("samples", 0) for c in report.cases if c["name"].startswith("api/"))  # nor API
        for case in report.cases:
            case.pop("_run", None)
            case.pop("_source", None)
            case.pop("_drawn", None)
            for order in case.get("consistent_conventions", []):
                report.notes.append(f"{case['name']}: outputs consistent with the target under convention {order!r}: "
                                    f"a processing convention, not a verification bug (if intended, declare it: "
                                    f"--processing-order {order})")
        if self.died:
            report.notes.append(f"FINDING: {self.died}; responses received so far are kept under --out")
        empty = [c["name"] for c in report.cases if c.get("vacuous")]
        if empty:
            report.notes.append(f"vacuous cells (every continuation identical, no detectable TV promised, so the run "
                                f"cannot PASS): {', '.join(empty)}")
        tvs = [t.detectable_tv for t in report.tests if t.detectable_tv and t.name.endswith(("pit_uniform", "joint"))]
        report.target_tv = max(tvs) if tvs else math.nan
        from harness.served import logprobs

        report.notes += logprobs.notes(report)
        from harness.served import api

        report.notes += api.notes(report)
        if run.api_left_out:
            report.notes.append(f"the API check (default set) left out: {run.api_left_out}")
        from harness.served import estimate

        report.notes += estimate.notes(report, run)
        hidden = [c["hidden_mass"] for c in report.cases if "hidden_mass" in c]
        report.notes.append(f"ground truth {run.ground_truth}; {run.length} new tokens per continuation")
        if hidden:
            report.notes.append(f"scorer lists the top {run.config.top_logprobs}: mean mass outside it "
                                f"{max(hidden):.3g}, counted in every detectable TV (a pass rules out TV >= the "
                                "coarse detectable TV + that mass)")
        if run.ground_truth == "two-sample":
            report.notes.append("two-sample tests: detectable TV is that of n_eff = n/2 draws (twice the samples "
                                "per endpoint for the TV a local target would give)")
