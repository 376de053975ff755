"""Subcommands of the engine level: `verify --level engine`, `serve`, `probe` (only this module prints)."""

from __future__ import annotations

import dataclasses
import json
import sys

from harness.check.config import DEFAULT_GAMMA
from harness.configs import option
from harness.defaults import EXIT_OK
from harness.errors import HarnessError


def add_verify_arguments(parser) -> None:
    """Flags `verify --level engine` adds to `specdec verify`: one per EngineConfig field that declares one
    (configs.option); the fields it shares with the generation level have CheckConfig's flags."""
    from harness.configs import add_arguments
    from harness.served.config import EngineConfig

    add_arguments(parser, EngineConfig)
    _record_explicit_pair(parser)


def _record_explicit_pair(parser) -> None:
    """`verify` defaults --pair to toy; the engine level uses a local model only when one is named."""
    action = parser._option_string_actions.get("--pair")
    parser.set_defaults(pair_given=False)
    if action is None:
        return

    class Given(type(action)):
        def __call__(self, parser, namespace, values, option_string=None):
            namespace.pair_given = True
            super().__call__(parser, namespace, values, option_string)

    action.__class__ = Given


# The EngineConfig fields set from CheckConfig's flags of `specdec verify` (not given: EngineConfig's default).
SHARED_FIELDS = ("target", "power", "inconclusive_tv", "seed", "samples", "length", "score_dtype", "timeout_s",
                 "time_budget_s", "processing_order", "estimate", "fail_estimate", "gamma")


def engine_config(args):
    """The EngineConfig of a parsed `specdec verify --level engine` (validated)."""
    from harness.configs import from_args, given
    from harness.served.config import EngineConfig

    shared = given(EngineConfig, args, SHARED_FIELDS)
    if args.pair_given:
        shared["pair"] = args.pair
    shared["false_alarm_rate"] = getattr(args, "alpha", None) or args.false_alarm_rate
    if args.prompt_texts:
        shared["prompts"] = len(args.prompt_texts)
    return from_args(EngineConfig, args, **shared, contexts=engine_contexts(getattr(args, "contexts", "none"), args),
                     **_settings(args), **engine_checks(args)).validate()


def engine_checks(args) -> dict:
    """`--engine-checks` not given: the token check, and the API check where the server may allow it (a local
    tokenizer, --api openai or llama-server); whether it does is asked of it at the start
    (harness.served.api.refusal), and a server that does not is noted, not failed."""
    from harness.served.config import DefaultChecks

    checks = getattr(args, "checks", None)
    local = getattr(args, "pair_given", False) or getattr(args, "target", None)
    if isinstance(checks, DefaultChecks) and local and getattr(args, "api", "openai") in ("openai", "llama-server"):
        return {"checks": (*checks, "api"), "api_where_allowed": True}
    return {}


def engine_report(args, progress_bar):
    """`verify --level engine`: the CheckReport of the engine at --endpoint (harness/cli prints it)."""
    from harness.served.check import run_engine_check

    config = engine_config(args)
    with progress_bar(None, "verify engine") as bar:
        report = run_engine_check(config, progress=bar)  # the Progress itself: the driver gives it the plan
    return report


def engine_contexts(value: str, args=None) -> str:
    """`--contexts` at the engine level: `auto` (the default) is the catalogue wherever a local target scores the
    outputs (--pair or --target, ground truth auto or local), as at the generation level; the prompts only against a
    reference endpoint (score / two-sample), where nothing local knows the contexts' law."""
    if value != "auto":
        return value
    local = args is not None and getattr(args, "ground_truth", "auto") in ("auto", "local") and (
        getattr(args, "pair_given", False) or getattr(args, "target", None))
    return "catalogue" if local else "none"


def _settings(args) -> dict:
    """`--setting` texts (the sampling parameters are sent to the server), else EngineConfig's default battery."""
    if not getattr(args, "settings", None):
        return {}
    from harness.check.settings import parse_setting

    return {"settings": tuple(s for text in args.settings for s in parse_setting(text))}


def _dialects() -> tuple[str, ...]:
    from harness.served.serve import DIALECTS

    return DIALECTS


_LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")


def _token_pair(value: str) -> tuple[int, int]:
    """OPEN,CLOSE: two different token ids (--tool-call-tokens)."""
    import argparse

    parts = value.split(",")
    try:
        pair = tuple(int(p) for p in parts)
    except ValueError:
        pair = ()
    if len(pair) != 2 or pair[0] == pair[1] or min(pair) < 0:
        raise argparse.ArgumentTypeError(f"expected two different token ids OPEN,CLOSE, got {value!r}")
    return pair


@dataclasses.dataclass
class ServeConfig:
    """`specdec serve`: an OpenAI-compatible server around a generation-level implementation."""

    impl: str = option("specdec_ref.adapters:generate", "--impl", "MODULE:CALLABLE (generation level)",
                       metavar="MODULE:CALLABLE")
    pair: str = option("toy", "--pair", "registered pair (see `specdec pairs`)", metavar="NAME")
    host: str = option("127.0.0.1", "--host", "localhost only", metavar="HOST")
    port: int = option(8000, "--port", "TCP port", int, "PORT")
    model_name: str | None = option(None, "--model-name", "served model name (default: the pair's name)",
                                    metavar="NAME")
    gamma: int = option(DEFAULT_GAMMA, "--gamma", "drafted tokens per step", int, "G")
    no_speculation: bool = option(False, "--no-speculation", "serve the target alone "
                                  "(harness.adapters.control:target_only_generate)", action="store_true")
    max_logprobs: int = option(20, "--max-logprobs", "largest top-k a request may ask for", int, "K")
    logprobs_mode: str = option("raw_logprobs", "--logprobs-mode", "what the logprobs of the output are: raw (the "
                                "target's law) or processed (after the request's sampling parameters)",
                                choices=_LOGPROBS_MODES)
    prompt_logprobs_mode: str = option("raw_logprobs", "--prompt-logprobs-mode", "prompt scores (prompt_logprobs, "
                                       "echo): raw whatever --logprobs-mode, as vLLM writes them (default), or "
                                       "processed with the request's sampling parameters", choices=_LOGPROBS_MODES)
    max_requests: int | None = option(None, "--max-requests", "stop after this many requests (default: until "
                                      "Ctrl-C)", int, "N")
    dialect: str = option("openai", "--dialect", "llama-cpp-python: answer as its server does (text pieces, no token "
                          "ids, n = 1, /extras/tokenize), to test `specdec verify --api llama-cpp-python`; the pair "
                          "needs a real tokenizer (toy-pieces, smollm2)", choices=_dialects)
    reasoning_end: int | None = option(None, "--reasoning-end-token", "a reasoning parser on the chat route: the text "
                                       "before the first token ID is reasoning_content, the rest content (as vLLM's "
                                       "--reasoning-parser)", int, "ID")
    tool_call_tokens: tuple[int, int] | None = option(None, "--tool-call-tokens", "a tool-call parser on the chat "
                                                      "route, for requests with tools: each OPEN ... CLOSE span of the "
                                                      "content is a tool call, its first token the name, the rest the "
                                                      "arguments (as vLLM's --tool-call-parser hermes)",
                                                      _token_pair, "OPEN,CLOSE")
    # a planted logprob bug (harness.mutants.logprobs), for testing the logprobs check (not for users: hidden from
    # --help)
    logprobs_mutant: str | None = option(None, "--logprobs-mutant", "a planted logprob bug (tests only)",
                                         metavar="NAME", hidden=True)
    # a planted API bug (harness.mutants.api), for testing the API check (hidden from --help as well)
    api_mutant: str | None = option(None, "--api-mutant", "a planted API bug (tests only)", metavar="NAME",
                                    hidden=True)


def add_serve_arguments(parser) -> None:
    from harness.configs import add_arguments

    add_arguments(parser, ServeConfig)


def run_serve(args) -> int:
    from harness.check.api import resolve
    from harness.pairs import get_pair
    from harness.served.serve import serve_forever

    impl = resolve(args.impl, "generation")
    if args.port < 0 or args.port > 65535 or args.gamma < 1:
        raise HarnessError("--port must be in [0, 65535] and --gamma >= 1")
    pair = get_pair(args.pair)
    print(f"specdec serve: {args.impl} on {args.pair} (speculation {'off' if args.no_speculation else 'on'}) at "
          f"http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    return serve_forever(impl, pair, host=args.host, port=args.port, max_requests=args.max_requests,
                         speculative=not args.no_speculation, gamma=args.gamma, model_name=args.model_name,
                         max_logprobs=args.max_logprobs, logprobs_mode=args.logprobs_mode,
                         logprobs_mutant=args.logprobs_mutant, dialect=args.dialect,
                         prompt_logprobs_mode=args.prompt_logprobs_mode, api_mutant=args.api_mutant,
                         reasoning_end=args.reasoning_end, tool_call_tokens=args.tool_call_tokens)


@dataclasses.dataclass
class ProbeConfig:
    """`specdec probe`: what an OpenAI-compatible server returns; which ground truth it allows."""

    endpoint: str | None = option(None, "--endpoint", "e.g. http://127.0.0.1:8000/v1 (required)", metavar="URL")
    model: str | None = option(None, "--model", "served model name (default: the server's only model)",
                               metavar="NAME")
    timeout: float = option(60.0, "--timeout", "seconds one request may take", float, "SECONDS")
    json: bool = option(False, "--json", "print JSON instead of a table", action="store_true")
    api: str = option("openai", "--api", "the route probed: OpenAI/vLLM routes, or llama-server's native /completion",
                      choices=("openai", "llama-server", "llama-server-processed"))


def add_probe_arguments(parser) -> None:
    from harness.configs import add_arguments

    add_arguments(parser, ProbeConfig)


def run_probe(args) -> int:
    from harness.served.probe import probe, probe_result

    if not args.endpoint:
        raise HarnessError("specdec probe needs --endpoint URL (the server to probe)")

    info = probe(args.endpoint, args.model, api=args.api, timeout_s=args.timeout, retries=2)
    if args.json:
        print(json.dumps(probe_result(info, {k: v for k, v in vars(args).items() if k != "func"}), indent=2))
        return EXIT_OK
    print(probe_table(info))
    return EXIT_OK


def probe_table(info: dict) -> str:
    lines = [f"{info['endpoint']}  model {info['model']}  api {info.get('api', 'openai')}  speculation "
             f"{ {True: 'on', False: 'off', None: 'unknown'}[info['speculative']] }", "",
             f"  {'feature':<30} {'returns':<44} cost when missing"]
    for row in info["rows"]:
        lines.append(f"  {row['feature']:<30} {str(row['value'])[:44]:<44} {row['cost']}")
    lines += ["", "  ground truths:"] + [f"    {g:<22} {why}" for g, why in info["ground_truths"].items()]
    return "\n".join(lines)
