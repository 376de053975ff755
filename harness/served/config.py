"""What `specdec verify --level engine` is asked: `EngineConfig`, its flags (harness.configs.option) and its checks.

The engine level's trial source (harness.served.check) runs it; the fields it shares with the generation level take
their flags from CheckConfig.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from harness.check.config import DEFAULT_GAMMA, INCONCLUSIVE_TV
from harness.check.settings import Setting, default_settings
from harness.configs import option
from harness.defaults import DEFAULT_FALSE_ALARM_RATE, DEFAULT_POWER
from harness.errors import HarnessError

GROUND_TRUTHS = ("auto", "local", "score", "two-sample")
ENGINE_CHECKS = ("tokens", "logprobs", "api")


class DefaultChecks(tuple):
    """`EngineConfig.checks` left at its default (a tuple that says so): the token check. The command line
    (harness.served.cli.engine_config) makes its default tokens + api, the API check where the server allows it."""


DEFAULT_CHECKS = DefaultChecks(("tokens",))
_API_GROUP = "engine level: the API check (--engine-checks api)"
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
    stop_on_fail: bool = option(True, None, "stop after the first cell with a test at p <= the per-test rate "
                                + _CHECK_FLAG)
    time_budget_s: float | None = option(None, None, "no new cell after this many seconds (the cells not run are "
                                         "noted) " + _CHECK_FLAG)
    checks: tuple[str, ...] = option(DEFAULT_CHECKS, "--engine-checks", "tokens (the law of the output), logprobs "
                                     "(the logprobs reported for it), api (stops, limits, finish reasons, streams, n "
                                     "and seeds), or several: tokens,logprobs,api (default: tokens, plus api where "
                                     "the server allows it: --pair/--target given, --api openai or llama-server, "
                                     "and a probe completion returns token ids)", _names, "CHECKS", group=_ENGINE_GROUP)
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
                                     "openai or llama-server) and is otherwise noted and left out: the command line's default")
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
