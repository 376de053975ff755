"""Engine-level losslessness check: a served engine as the trial source, tested against a ground truth.

The engine is asked for `samples` continuations per (prompt, sampling setting) — n per request,
seeded, token ids returned — and what comes back is tested against the best ground truth available:

(a) `local`: a local copy of the target (`--pair` / `--target`), tokenizer identity checked first;
    randomized PIT pooled / per position / serial, plus the exact joint law for tiny vocabularies;
(b) `score`: a second endpoint with speculation off scores the continuations (prompt logprobs);
    randomized PIT of the top-k coarsening (harness.served.battery);
(c) `two-sample`: the second endpoint samples too; chi-square homogeneity per position and joint.

Greedy (T = 0): exact equality with the reference endpoint's greedy output, else with the local
target's; with a local model each first divergence is classified numerics vs logic as the
generation level does. Holm over every gating test at `false_alarm_rate`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from harness.check.config import DEFAULT_GAMMA, INCONCLUSIVE_TV, CheckConfig
from harness.check.driver import Cell, Check, MalformedTrials, TrialSource
from harness.check.exact_laws import ENUMERATION_MAX_VOCAB
from harness.check.report import CheckReport, deterministic_result
from harness.check.settings import Setting, default_settings
from harness.check.structured import setting_record
from harness.configs import option
from harness.defaults import DEFAULT_FALSE_ALARM_RATE, DEFAULT_POWER
from harness.errors import HarnessError
from harness.policy import catalogue
from harness.served import battery
from harness.served.client import (
    EngineClient,
    EngineError,
    EngineUnreachable,
    ReplyNotWritten,
    ResponseStore,
    config_hash,
)
from harness.served.pieces import SHARED_PIECE
from harness.served.probe import (
    choice_token_ids,
    prompt_scoring,
    raw_law_suffices,
    scoring_mode,
    server_tokenize,
)
from harness.served.requests import (  # noqa: F401 - REQUEST_NAMES, request_parameters: public here too
    REQUEST_NAMES,
    reply_choices,
    request_parameters,
    sampling_request,
    server_prompt_ids,
)
from harness.served.text import PROBE_TEXT, TOKEN_ID_PREFIX, decode, encode, tokenizer_for
from harness.stats import TestResult

GROUND_TRUTHS = ("auto", "local", "score", "two-sample")
ENGINE_CHECKS = ("tokens", "logprobs", "api")


class DefaultChecks(tuple):
    """`EngineConfig.checks` left at its default (a tuple that says so): the token check. The command line
    (harness.served.cli.engine_config) makes its default tokens + api, the API check where the server allows it."""


DEFAULT_CHECKS = DefaultChecks(("tokens",))
_API_GROUP = "engine level: the API check (--engine-checks api)"
GREEDY_TOKENS = catalogue("sizes").ENGINE_GREEDY_TOKENS  # a run size: policy (suites/catalogues/sizes.py)


_ENGINE_GROUP = "engine level (--level engine)"
_CHECK_FLAG = "(the flag is CheckConfig's, shared with the generation level)"


def _names(text: str) -> tuple[str, ...]:
    return tuple(x for x in text.split(",") if x)


@dataclasses.dataclass
class EngineConfig:
    """Settings of `specdec verify --level engine`: its flags are built from these fields (harness.configs); the
    fields it shares with the generation level take their flags from CheckConfig (flag None here)."""

    level: ClassVar[str] = "engine"  # the contract harness.check.api.run_verify picks the trial source by

    endpoint: str | None = option(None, "--endpoint", "the engine under test, e.g. http://127.0.0.1:8000/v1",
                                  metavar="URL", group=_ENGINE_GROUP)
    model: str | None = option(None, "--model", "served model name (default: the server's only model)",
                               metavar="NAME", group=_ENGINE_GROUP)
    reference_endpoint: str | None = option(None, "--reference-endpoint", "the same engine with speculation off "
                                            "(scorer b / sample c / greedy)", metavar="URL", group=_ENGINE_GROUP)
    reference_model: str | None = option(None, "--reference-model", "model name on --reference-endpoint",
                                         metavar="NAME", group=_ENGINE_GROUP)
    pair: str | None = option(None, None, "ground truth (a): a registered pair whose target the engine serves "
                              + _CHECK_FLAG)
    target: str | None = option(None, None, "ground truth (a): the target checkpoint (hub id or local path) "
                                + _CHECK_FLAG)
    ground_truth: str = option("auto", "--ground-truth", "a: local (--pair/--target), b: score (reference "
                               "logprobs), c: two-sample; auto: best available", choices=GROUND_TRUTHS,
                               group=_ENGINE_GROUP)
    false_alarm_rate: float = option(DEFAULT_FALSE_ALARM_RATE, None, "family-wise (Holm over every gating test) "
                                     + _CHECK_FLAG)
    power: float = option(DEFAULT_POWER, None, "probability of detecting a discrepancy " + _CHECK_FLAG)
    inconclusive_tv: float = option(INCONCLUSIVE_TV, None, "a run that rejects nothing above this detectable TV: "
                                    "INCONCLUSIVE " + _CHECK_FLAG)
    seed: int = option(0, None, "seed of every request " + _CHECK_FLAG)
    samples: int = option(2_000, None, "continuations per prompt × sampling setting " + _CHECK_FLAG)
    length: int | None = option(None, None, "new tokens per continuation (default: 3 for V <= 64, else 16) "
                                + _CHECK_FLAG)
    score_dtype: str = option("float64", None, "local ground truth: a float64 copy of the target, or \"model\" "
                              "(as loaded) " + _CHECK_FLAG)
    prompts: int = option(2, "--prompts", "prompts to sample (from the pair, else the prompt set)", int, "N",
                          group=_ENGINE_GROUP)
    settings: tuple[Setting, ...] = dataclasses.field(default_factory=default_settings)
    top_logprobs: int = option(20, "--top-logprobs", "k asked of the scorer (b); the mass outside it is added to "
                               "every detectable TV (vLLM caps k at its --max-logprobs, 20 by default)", int, "K",
                               group=_ENGINE_GROUP)
    chunk: int = option(500, "--chunk", "continuations per request (the request's n)", int, "N", group=_ENGINE_GROUP)
    concurrency: int = option(4, "--concurrency", "requests in flight at once", int, "N", group=_ENGINE_GROUP)
    timeout_s: float = option(120.0, None, "seconds one request may take " + _CHECK_FLAG)
    retries: int = option(4, "--retries", "retries on connection errors / 5xx / malformed JSON", int, "N",
                          group=_ENGINE_GROUP)
    out: str | None = option(None, "--out", "keep every response here (resumable for the same configuration)",
                             metavar="DIR", group=_ENGINE_GROUP)
    server_label: str | None = option(None, "--server-label", "with --out: key the kept responses by this name "
                                      "instead of the endpoints' URLs, so a run resumes against the same servers "
                                      "restarted on other ports (give each distinct pair of servers its own label)",
                                      metavar="NAME", group=_ENGINE_GROUP)
    prompt_texts: tuple[str, ...] | None = option(None, "--prompt-text", "a prompt as text instead of the pair's "
                                                  "(repeatable; with --pair sent as a chat turn)", metavar="TEXT",
                                                  action="append", group=_ENGINE_GROUP)
    extra_body: dict | None = None  # fields added to every request (e.g. llama.cpp: top_k 0, min_p 0 = off)
    stop_on_fail: bool = option(True, None, "stop after the first cell with a test at p <= the per-test level "
                                + _CHECK_FLAG)
    time_budget_s: float | None = option(None, None, "no new cell after this many seconds (the cells not run are "
                                         "noted) " + _CHECK_FLAG)
    checks: tuple[str, ...] = option(DEFAULT_CHECKS, "--engine-checks", "tokens (the law of the output), logprobs "
                                     "(the logprobs reported for it), api (stops, limits, finish reasons, streams, n "
                                     "and seeds), or several: tokens,logprobs,api (default: tokens, plus api where "
                                     "the server allows it: --pair/--target given, --api openai, and a probe "
                                     "completion returns token ids)", _names, "CHECKS", group=_ENGINE_GROUP)
    logprobs_k: int = option(5, "--logprobs-k", "logprobs check: top-k asked of the engine", int, "K",
                             group=_ENGINE_GROUP)
    logprobs_samples: int = option(16, "--logprobs-samples", "logprobs check: continuations per cell (every value "
                                   "is compared: no plan)", int, "N", group=_ENGINE_GROUP)
    logprob_tolerance: float = option(1e-3, "--logprob-tolerance", "logprobs check: nats allowed (numerics)", float,
                                      "NATS", group=_ENGINE_GROUP)
    logprobs_mode: str = option("auto", "--logprobs-mode", "logprobs check: what the engine reports (auto: asked)",
                                choices=("auto", "raw", "processed"), group=_ENGINE_GROUP)
    processing_order: str = option("standard", None, "the processing convention the engine declares (specdec_ref "
                                   "ORDERS) " + _CHECK_FLAG)
    seeded: bool = option(True, "--unseeded", "send sampling requests without a seed (the engine's own RNG; a rerun "
                          "does not reproduce them)", action="store_false", group=_ENGINE_GROUP)
    api: str = option("openai", "--api", "the engine's API: OpenAI/vLLM routes, llama-server's native /completion "
                      "(raw or post-sampling probabilities), or llama-cpp-python's server (ids recovered from its text "
                      "pieces with the local tokenizer: needs --pair/--target)",
                      choices=("openai", "llama-server", "llama-server-processed", "llama-cpp-python"),
                      group=_ENGINE_GROUP)
    contexts: str = option("none", None, "\"catalogue\": contexts cells as at the generation level (harness.contexts), "
                           "local truth; the command line's \"auto\" is resolved by harness.served.cli "
                           + _CHECK_FLAG)
    api_seeds: int = option(4, "--api-seeds", "API check: seeded base continuations per prompt; each gives its stop, "
                            "cap and stream requests", int, group=_API_GROUP)
    api_length: int = option(32, "--api-length", "API check: max_tokens of the base continuations", int,
                             group=_API_GROUP)
    api_unseeded: int = option(4, "--api-unseeded", "API check: unseeded requests per prompt (must not all be one "
                               "sample)", int, group=_API_GROUP)
    api_where_allowed: bool = option(False, None, "the API check runs only where the server allows it (a probe "
                                     "completion with stop, seed, logprobs and token ids; a local tokenizer; --api "
                                     "openai) and is otherwise noted and left out: the command line's default")
    estimate: bool = option(False, None, "also estimate how far the engine's output is from the target: a "
                            "bias-corrected TV with a confidence interval of each prompt's whole continuation and "
                            "of each position (a local toy pair, whose joint law is enumerable; "
                            "harness.served.estimate) " + _CHECK_FLAG)
    fail_estimate: bool = option(True, None, "a FAIL report carries the estimates of its failing cells "
                                 + _CHECK_FLAG)
    served_impl: str | None = option(None, "--served-impl", "with the estimates: the generation-level implementation "
                                     "the server runs (its `specdec serve --impl`), stated by you; where its "
                                     "continuation law is enumerable (the reference, a zoo entry that changes p, q "
                                     "or the acceptance rule) its exact TV is printed beside each estimate",
                                     metavar="MODULE:CALLABLE", group=_ENGINE_GROUP)
    gamma: int = option(DEFAULT_GAMMA, None, "with --served-impl: the server's drafted tokens per step, for its "
                        "exact law " + _CHECK_FLAG)

    def __post_init__(self):
        if self.prompt_texts is not None:  # --prompt-text appends to a list
            self.prompt_texts = tuple(self.prompt_texts)
        self.checks = tuple(self.checks)

    def validate(self) -> EngineConfig:
        if not self.endpoint:
            raise HarnessError("--level engine needs --endpoint URL (the server under test)")
        if self.ground_truth not in GROUND_TRUTHS:
            raise HarnessError(f"--ground-truth must be one of {', '.join(GROUND_TRUTHS)}, got {self.ground_truth!r}")
        for name, value in (("--false-alarm-rate", self.false_alarm_rate), ("--power", self.power),
                            ("--inconclusive-tv", self.inconclusive_tv)):
            if not 0 < value < 1:
                raise HarnessError(f"{name} must be in (0, 1), got {value}")
        for name, value in (("--samples", self.samples), ("--prompts", self.prompts), ("--chunk", self.chunk)):
            if value < 1:
                raise HarnessError(f"{name} must be >= 1, got {value}")
        unknown = sorted(set(self.checks) - set(ENGINE_CHECKS))
        if unknown or not self.checks:
            raise HarnessError(f"--engine-checks takes {', '.join(ENGINE_CHECKS)}, got {', '.join(self.checks)}")
        if not self.logprob_tolerance >= 0 or self.logprobs_k < 0 or self.logprobs_samples < 1:
            raise HarnessError("--logprob-tolerance must be >= 0, --logprobs-k >= 0, --logprobs-samples >= 1")
        if self.api_seeds < 1 or self.api_length < 2 or self.api_unseeded < 0:
            raise HarnessError("--api-seeds must be >= 1, --api-length >= 2 and --api-unseeded >= 0")
        if self.length is not None and self.length < 1:
            raise HarnessError(f"--length must be >= 1, got {self.length}")
        if self.ground_truth == "local" and not (self.pair or self.target):
            raise HarnessError("--ground-truth local needs the target here: give --pair NAME or --target PATH")
        if self.contexts not in ("none", "catalogue"):
            raise HarnessError(f"--contexts must be none or catalogue, got {self.contexts!r}")
        if self.api == "llama-cpp-python" and not (self.pair or self.target):
            raise HarnessError("--api llama-cpp-python recovers token ids from the server's text pieces with the local "
                               "tokenizer: give --pair NAME or --target PATH")
        if self.contexts == "catalogue" and not (self.pair or self.target):
            raise HarnessError("--contexts catalogue needs the target here (--pair NAME or --target PATH): the "
                               "contexts cells are scored by the local target")
        if self.ground_truth in ("score", "two-sample") and not self.reference_endpoint:
            raise HarnessError(f"--ground-truth {self.ground_truth} needs --reference-endpoint URL (speculation off)")
        if self.gamma < 1:
            raise HarnessError(f"--gamma must be >= 1, got {self.gamma}")
        if self.served_impl is not None:
            from harness.served.estimate import served_law

            served_law(self.served_impl)  # loads it: a bad spec is a usage error before any request
        return self


@dataclasses.dataclass
class _Run:
    """What one check run carries between its steps."""

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


def _prepare(config, engine, model, reference, reference_model, progress) -> _Run:
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
    return _Run(config, engine, model, reference, reference_model, pair, tokenizer, store, ground_truth, length,
                progress)


def _local_pair(config: EngineConfig):
    from harness.check.api import load_pair

    if config.target:  # only the target matters here: it is loaded as its own (unused) draft
        return load_pair("", config.target, config.target)
    return load_pair(config.pair)


def check_tokenizer_identity(client: EngineClient, model: str, tokenizer) -> None:
    """The server must tokenize like the local model: its tokenization of a probe string, else its ids vs text."""
    want = encode(tokenizer, PROBE_TEXT)
    got = server_tokenize(client, model, PROBE_TEXT)
    if got is not None:
        if got != want and got[1:] != want:  # a leading BOS added by the server is not a different tokenizer
            raise HarnessError(f"the server tokenizes differently from the local model ({got[:8]}... vs "
                               f"{want[:8]}...): point --pair/--target at the model the server runs")
        return
    reply = client.post("/v1/completions", {"model": model, "prompt": PROBE_TEXT, "max_tokens": 8, "seed": 0,
                                            "return_token_ids": True, "return_tokens_as_token_ids": True,
                                            "logprobs": 0})
    choice = reply["choices"][0]
    ids = choice_token_ids(choice)
    if ids is None:
        raise HarnessError("the server returns no token ids (and has no tokenize route), so the local model cannot "
                           "score its output: enable token ids (vLLM: return_token_ids) or use --ground-truth "
                           "two-sample with --reference-endpoint")
    if decode(tokenizer, ids) != choice.get("text"):
        raise HarnessError("the server's token ids do not decode to its text with the local tokenizer: point "
                           "--pair/--target at the model the server runs")


def choose_ground_truth(config, pair, reference, reference_model) -> str:
    if config.ground_truth != "auto":
        return config.ground_truth
    if pair is not None:
        return "local"
    if reference is None:
        raise HarnessError("no ground truth: give --pair/--target (a local copy of the target) or "
                           "--reference-endpoint (the engine with speculation off)")
    if prompt_scoring(reference, reference_model, "1 2 3") != "prompt_logprobs":
        return "two-sample"
    # a scorer whose prompt scores ignore the sampling parameters (vLLM) scores only the raw law
    if raw_law_suffices(config.settings) or scoring_mode(reference, reference_model, "1 2 3", "prompt_logprobs") == "processed":
        return "score"
    return "two-sample"


def count_tests_for_cell(ground_truth: str, length: int, enumerate_law: bool) -> int:
    """Gating tests one (prompt, sampling setting) cell emits: format + the ground truth's battery."""
    if ground_truth == "local":
        return 1 + battery.count_tests_for_local_target(length, enumerate_law)
    if ground_truth == "score":
        return 1 + battery.count_tests_for_pit(length)
    return 1 + battery.count_tests_for_two_sample(length)


# ------------------------------------------------------------------------------------------ requests

def _prompts(run: _Run) -> list:
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


def sample_rows(run: _Run, client: EngineClient, model: str, role: str, prompt, setting: Setting, n: int,
                max_tokens: int, seed: int, allow_text: bool = False) -> tuple[list[list], list[str]]:
    """n continuations (token ids) and finish reasons from one endpoint, in requests of run.config.chunk.

    `allow_text` (two-sample tests only): a server without ids gives its logprob token pieces, else its
    text split by a fixed function; any fixed function of the output is a valid coarsening there."""
    jobs = []
    for i, lo in enumerate(range(0, n, run.config.chunk)):
        b = min(run.config.chunk, n - lo)
        jobs.append((f"{role}/{setting.label}/{prompt!r}/{seed}/{i}",
                     sampling_request(model, prompt, b, max_tokens, setting, seed + 104_729 * i if run.config.seeded else None,
                              not allow_text and _needs_names(client, model, prompt), run.config.extra_body)))
    replies = client.run_all("/v1/completions", jobs, run.store, run.progress)
    rows, reasons = [], []
    for key, payload in jobs:
        choices = reply_choices(replies[key], payload["n"], client.base)
        for choice in choices:
            ids = choice_token_ids(choice)
            if ids is None and allow_text:
                ids = _text_tokens(run, choice)
            if ids is None:
                raise EngineError(f"{client.base} returned no token ids (no `token_ids`, no 'token_id:N' logprob "
                                  "tokens): ground truths a and b need them; enable them (vLLM: "
                                  "return_tokens_as_token_ids) or use --ground-truth two-sample")
            rows.append(ids)
            reasons.append(str(choice.get("finish_reason")))
    return rows, reasons


def _text_tokens(run: _Run, choice: dict) -> list:
    pieces = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(pieces, list) and all(isinstance(t, str) for t in pieces):
        return pieces
    text = str(choice.get("text", ""))
    return encode(run.tokenizer, text) if run.tokenizer is not None else text.split(" ")


def _needs_names(client: EngineClient, model: str, prompt) -> bool:
    """Whether this server returns ids only as logprob names (asked once per client, with the run's own prompt:
    a fixed text such as "1" tokenizes to nothing in some vocabularies; logprobs cost the server time)."""
    if client.needs_token_names is None:
        reply = client.post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 1, "seed": 0,
                                                "return_token_ids": True})  # a 4xx here is a clear error too
        choice = (reply.get("choices") or [{}])[0] if isinstance(reply, dict) else {}
        client.needs_token_names = not isinstance(choice.get("token_ids"), list)
    return client.needs_token_names


SCORE_ENTRIES = 1_000_000  # listed logprobs per scoring request (~75 MB of vLLM JSON): a wide top k stays in memory


def score_rows(run: _Run, prompt: list[int], rows: list[list[int]], setting: Setting) -> list[np.ndarray]:
    """Ground truth (b): the reference scores prompt + continuation; per row, the `battery.coarse_masses` of its
    tokens under the scorer's top k at each position ([len(row), 3]).

    A scorer lists k values at every position of the prompt as well (vLLM's prompt_logprobs): at k = 1000 that is
    ~3 MB of JSON per 45-token sequence, so requests hold at most SCORE_ENTRIES listed values, a few are in flight
    at a time, and each reply is cut to the three numbers per emitted token the test reads as it arrives (also
    what --out keeps)."""
    k = run.config.top_logprobs
    longest = len(prompt) + max((len(r) for r in rows), default=0)
    per_request = max(1, min(run.config.chunk, SCORE_ENTRIES // max(1, (k + 1) * longest)))
    jobs, batch = [], {}
    for i, lo in enumerate(range(0, len(rows), per_request)):
        body = sampling_request(run.reference_model, [prompt + r for r in rows[lo : lo + per_request]], 1, 1, setting, 0)
        body["prompt_logprobs"] = k
        key = f"score-masses/{setting.label}/{prompt!r}/{hash(tuple(map(tuple, rows)))}/{k}/{per_request}/{i}"
        jobs.append((key, body))
        batch[key] = rows[lo : lo + per_request]

    def reduce(key: str, reply: dict) -> dict:
        choices = reply_choices(reply, len(batch[key]), run.reference.base)
        masses = []
        for choice, row in zip(choices, batch[key], strict=True):
            entries = choice.get("prompt_logprobs")
            if not isinstance(entries, list) or len(entries) != len(prompt) + len(row):
                raise EngineError(f"{run.reference.base} did not return prompt_logprobs for every prompt token: it "
                                  "cannot score (ground truth b); use --ground-truth two-sample")
            masses.append([battery.coarse_masses(_top_k(e, k), y) for e, y in zip(entries[len(prompt):], row,
                                                                                   strict=True)])
        return {"masses": masses}

    out = []
    step = max(1, run.reference.concurrency)
    for g in range(0, len(jobs), step):
        group = jobs[g : g + step]
        replies = run.reference.run_all("/v1/completions", group, run.store, run.progress, reduce=reduce)
        for key, _ in group:
            out += [np.array(m, dtype=float).reshape(-1, 3) for m in replies[key]["masses"]]
    return out


def _top_k(entry: dict, k: int) -> dict[int, float]:
    """The scorer's top k by rank (the actual token, listed only because it was emitted, is left out)."""
    ranked = [(int(t.removeprefix(TOKEN_ID_PREFIX)), v) for t, v in entry.items()]
    ranked = [(t, v) for t, v in ranked if v.get("rank", 1) <= k]
    return {t: math.exp(v["logprob"]) for t, v in ranked}


# ------------------------------------------------------------------------------------------ the check

@dataclasses.dataclass
class _SamplingCell:
    setting: Setting
    index: int  # prompt index (seeds derive from it)
    prompt: object  # token ids, or text for servers without a local tokenizer


def _law_tests(cell: Cell, trials, level: float, power: float) -> list[TestResult]:
    """The ground truth's battery on one (prompt, setting) cell's continuations."""
    run, data = cell.summary["_run"], cell.data
    rows, ref_rows = trials
    rng = np.random.default_rng([run.config.seed, data.index, int(data.setting.temperature * 1000)])
    kw = {"level": level, "power": power, "prefix": cell.name}
    if run.ground_truth == "local":
        from harness.check.exact_laws import target64
        from specdec_ref.generate import default_eos, eos_set

        return battery.tests_for_local_target(
            rows, list(data.prompt), model=target64(run.pair) if run.config.score_dtype == "float64" else run.pair.target,
            setting=data.setting, vocab=run.pair.vocab_size,
            eos=eos_set(default_eos(run.pair.target)), length=run.length, enumerate_law=cell.summary["joint_law"],
            rng=rng, order=run.config.processing_order, classes=run.engine.classes, **kw)
    if run.ground_truth == "score":
        prompt_ids = data.prompt if isinstance(data.prompt, list) else server_prompt_ids(run, data.prompt)
        masses = np.concatenate(score_rows(run, prompt_ids, rows, data.setting) or [np.zeros((0, 3))])
        u, off, hidden = battery.pit_from_coarse_masses(masses, rng)
        positions = np.concatenate([np.arange(len(r)) for r in rows])
        seq_ids = np.concatenate([np.full(len(r), j) for j, r in enumerate(rows)])
        cell.summary.update(top_logprobs=run.config.top_logprobs, hidden_mass=hidden)
        return battery.charge_hidden_mass(battery.tests_for_pit(u, positions, seq_ids, off, length=run.length, **kw),
                                          masses[:, 2], positions)
    cell.summary["reference_samples"] = len(ref_rows)
    return battery.tests_for_two_sample(rows, ref_rows, length=run.length, **kw)


def _law_tests_open(cell: Cell, trials, level: float, power: float) -> list[TestResult]:
    """`_law_tests`, then a cell whose continuations are all one and the same is marked vacuous.

    Every continuation equal means the sampler never had a choice worth the name there (a prompt whose
    continuation is near-certain, or an engine that ignores the sampling request): the tests pass
    trivially and the tiny detectable TV they report says nothing about the speculative path. Such a
    cell promises no detectable TV (inf), so the run is INCONCLUSIVE, never PASS; a rejection still
    fails (a constant continuation the target never emits is a finding)."""
    results = _law_tests(cell, trials, level, power)
    rows, ref_rows = trials
    if not vacuous(rows, ref_rows):
        return results
    message = (f"all {len(rows)} continuations are identical ({rows[0][:8]}): the cell cannot show a "
               "speculative-sampling error; choose a prompt or setting with open continuations")
    cell.summary["vacuous"] = message
    return [dataclasses.replace(t, detectable_tv=math.inf, details={**t.details, "vacuous": message})
            if t.details.get("detectable_metric", "").startswith("TV") else t for t in results]


def vacuous(rows: list[list], ref_rows: list[list] | None = None) -> bool:
    """Whether every continuation (of the engine, and of the reference when there is one) is the same."""
    return all(len({tuple(r) for r in sample}) <= 1 for sample in (rows, ref_rows or []))


def _greedy_gating(cell: Cell, trials, level: float, power: float) -> list[TestResult]:
    return trials[0]


def _greedy_numerics(cell: Cell, trials, level: float, power: float) -> list[TestResult]:
    return trials[1]  # near-tie divergences: numerics, reported (their prompt's gating test passes)


def _engine_conventions(cell: Cell, trials, level: float, power: float) -> list[TestResult]:
    """Advisory (local ground truth): after a failed cell, the other processing conventions under which the
    target explains the engine's output (a convention to declare with --processing-order, not a bug)."""
    run, data = cell.summary["_run"], cell.data
    if run.ground_truth != "local" or not cell.decided(level):
        return []
    import torch

    from harness.check.conventions import consistent_conventions
    from harness.check.exact_laws import target64
    from specdec_ref.generate import default_eos, eos_set

    rows = trials[0]
    width = max(1, max(map(len, rows), default=1))
    tokens = torch.tensor([r + [-1] * (width - len(r)) for r in rows], dtype=torch.long)
    model = target64(run.pair) if run.config.score_dtype == "float64" else run.pair.target
    cell.summary["consistent_conventions"] = consistent_conventions(
        tokens, model, list(data.prompt), run.length, data.setting, run.pair.vocab_size,
        eos_set(default_eos(run.pair.target)), run.config.processing_order, level, power, cell.summary["joint_law"],
        run.config.seed + data.index)
    return []


ENGINE_CONVENTIONS = Check("conventions", lambda cell: 0, _engine_conventions, gating=False)


def _engine_estimate(cell: Cell, trials, level: float, power: float) -> list[TestResult]:
    from harness.served.estimate import estimate_run

    return estimate_run(cell, trials, level, power)


ENGINE_ESTIMATE = Check("tv_estimate", lambda cell: 0, _engine_estimate, gating=False)
ENGINE_GREEDY = Check("greedy_equality", lambda cell: len(cell.data), _greedy_gating)
ENGINE_GREEDY_NUMERICS = Check("greedy_numerics", lambda cell: 0, _greedy_numerics, gating=False)
ENGINE_LAW = Check("ground_truth", lambda cell: count_tests_for_cell(cell.summary["ground_truth"], cell.summary["length"],
                                                                     cell.summary["joint_law"]) - 1,  # - format
                   _law_tests_open)


class EngineSource(TrialSource):
    """Trials of a served engine: continuations returned over HTTP, per prompt and sampling setting."""

    level = "engine"

    def __init__(self, run: _Run):
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
            _require_processed(run, sampling, prompts)
        if any(s.temperature == 0 for s in run.config.settings):  # first: deterministic and cheap
            cells.append(Cell("greedy", [ENGINE_GREEDY, ENGINE_GREEDY_NUMERICS], prompts, math.nan,
                              {"prompts": len(prompts)}))
        contexts = _contexts_plan(run) if run.config.contexts == "catalogue" else None
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
        for setting in sampling if contexts else ():
            cells.append(_contexts_cell(run, contexts, setting, len(cells)))
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
            return _greedy(run, cell)
        if cell.name.startswith("logprobs/"):
            from harness.served import logprobs

            return logprobs.draw(run, cell, n)
        if cell.name.startswith("api/"):
            from harness.served import api

            return api.draw(run, cell)
        if cell.name.endswith("/contexts"):
            return _draw_contexts(run, cell, n)
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


# --- contexts cells: the generation level's pooled PIT over many contexts, drawn over HTTP ------------------


class _ContextsScorer:
    """What the generation level's contexts checks read from a cell (`cell.summary["_source"]`): the local
    target that scores the continuations, its vocabulary, EOS, the declared convention and the run seed."""

    def __init__(self, run: _Run):
        from harness.check.exact_laws import target64
        from specdec_ref.generate import default_eos, eos_set

        self.scorer = target64(run.pair) if run.config.score_dtype == "float64" else run.pair.target
        self.vocab, self.seed, self.order = run.pair.vocab_size, run.config.seed, run.config.processing_order
        self.eos = eos_set(default_eos(run.pair.target))


def _contexts_plan(run: _Run) -> dict:
    from harness.contexts import plan

    return plan(run.pair, seed=run.config.seed)


def _contexts_cell(run: _Run, contexts: dict, setting: Setting, index: int) -> Cell:
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


def _draw_contexts(run: _Run, cell: Cell, n: int):
    """n continuations spread round-robin over the cell's contexts: one request per context (its share of
    the n rows), all sent at once; the rows come back as the generation level's ContextTrials."""
    from harness.check.context_cells import ContextTrials, context_rows

    data, length = cell.data, cell.summary["length"]
    start = cell.summary.get("_drawn", 0)
    assigned = context_rows(n, len(data.contexts), start)
    needs_names = _needs_names(run.engine, run.model, list(data.contexts[0].tokens))
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


def _require_processed(run: _Run, sampling: list[Setting], prompts: list) -> None:
    if raw_law_suffices(sampling):
        return
    mode = scoring_mode(run.reference, run.reference_model, prompts[0], "prompt_logprobs")
    if mode != "processed":
        raise HarnessError(f"the scoring endpoint's prompt scores are {mode} (before temperature/top-k/top-p), so it "
                           "cannot score sampling at T != 1 or with truncation (vLLM writes prompt scores raw whatever "
                           "its --logprobs-mode, even processed_logprobs): use --ground-truth two-sample, a local "
                           "target (--pair), or settings at T = 1 without truncation")


def compared_up_to_classes(want: list, got: list, want_why, got_why, classes) -> tuple[list, list]:
    """Greedy rows as far as both are known: a row cut at a shared piece (harness.served.pieces) ends in its
    class's representative, so both rows stop there and the other's token there becomes its class's."""
    cuts = [len(r) for r, why in ((want, want_why), (got, got_why)) if why == SHARED_PIECE]
    if not cuts or classes is None:
        return want, got
    k = min(cuts)
    want, got = ([int(classes[t]) if j == k - 1 else t for j, t in enumerate(r[:k])] for r in (want, got))
    return want, got


def format_result(prefix: str, rows: list[list[int]], reasons: list[str], length: int, pair):
    """Ids in the vocabulary, at most max_tokens, and a row shorter than max_tokens only if it stopped."""
    vocab = pair.vocab_size if pair is not None else None
    problems = []
    long = sum(len(r) > length for r in rows if all(isinstance(t, int) for t in r))  # text pieces: not counted
    if long:
        problems.append(f"{long} continuations exceed max_tokens={length}")
    if vocab is not None and any(not isinstance(t, int) or not 0 <= t < vocab for r in rows for t in r):
        problems.append(f"token ids outside [0, {vocab})")
    short = sum(len(r) < length and reason not in ("stop", SHARED_PIECE) and all(isinstance(t, int) for t in r)
                for r, reason in zip(rows, reasons, strict=True))
    if short:
        problems.append(f"{short} continuations end before max_tokens without a stop")
    return deterministic_result(f"{prefix}/format", not problems, n=len(rows), message="; ".join(problems))


def _greedy(run: _Run, cell: Cell) -> tuple[list[TestResult], list[TestResult], list[dict]]:
    """Token equality at T = 0 with the reference endpoint (else the local target); divergences classified."""
    from harness.check.greedy import classify_divergence, greedy_target

    greedy, text = Setting(0.0), run.ground_truth == "two-sample"  # text: servers without ids compare texts
    prompts, gating, advisory, found = cell.data, [], [], []
    for i, prompt in enumerate(prompts):
        (got,), (got_why,) = sample_rows(run, run.engine, run.model, "engine-greedy", prompt, greedy, 1,
                                         GREEDY_TOKENS, 0, allow_text=text)
        if run.reference is not None:
            (want,), (want_why,) = sample_rows(run, run.reference, run.reference_model, "reference-greedy", prompt,
                                               greedy, 1, GREEDY_TOKENS, 0, allow_text=text)
        elif run.pair is not None:
            want, want_why = greedy_target(run.pair, list(prompt), GREEDY_TOKENS), None
        else:
            raise HarnessError("greedy equality needs a reference: give --reference-endpoint or --pair/--target")
        want, got = compared_up_to_classes(want, got, want_why, got_why, run.engine.classes)
        pos = next((j for j, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
                   None if want == got else min(len(want), len(got)))
        finding = None
        if pos is not None and run.pair is not None and all(isinstance(t, int) for t in want + got):
            finding = classify_divergence(run.pair, list(prompt), want, got, pos)
            found.append({"prompt": i, **finding})
        result = battery.greedy_result(f"greedy/prompt{i}", want, got, finding)
        if finding and finding["kind"] == "numerics (near-tie)":  # reported; the prompt's gating test passes
            advisory.append(result)
            result = battery.greedy_result(f"greedy/prompt{i}", want, want, None)
        gating.append(result)
    cell.summary.update(divergences=found,
                        reference="reference endpoint" if run.reference is not None else "local target")
    return gating, advisory, found
