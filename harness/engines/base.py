"""The engine interface: one adapter per engine, registered by name (after lm-eval's model registry).

An engine adapter is a subclass of `Engine` decorated with `@register_engine("name")`. It declares

    kind            "in-process" (it runs in this process: `generate(request)`) or "server" (it starts a server on
                    a 127.0.0.1 port: `url`, checked over its HTTP API by the engine level, harness.served)
    capabilities    a `Capabilities`: the speculation methods, levels, sampling parameters honoured, what it returns,
                    seeds, n, streams
    installed()     a `Probe`: installed here or not, why, and the version (cheap: imports no engine, loads no model)
    runnable        False for an engine registered with its capabilities and installed() only (no adapter code that
                    runs it yet): `start()` then raises, so such an engine can never be reported as run

and implements

    start() / stop()        load the models / launch the server, bounded; stop always, idempotently (also as a
                            context manager: `with Adapter(setup) as engine: ...`)
    generate(request)       in-process: one `Request` -> a `Completion` (token ids, logprobs where it can)

A server adapter subclasses `ServerEngine` (harness.engines.process) and only writes `command(port)`: the port is
chosen, the health endpoint waited for (bounded), and on stop the process gets SIGTERM, then SIGKILL after
`term_timeout_s`; `stop_report` says which (a server that ignored SIGTERM is reported, never hidden).

The generic battery (suites/campaigns/engines.py) runs on any registered, installed, runnable adapter what its
capabilities allow. How to write one: docs/ENGINES-INTERFACE.md.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

from harness.errors import HarnessError

METHODS = ("draft", "ngram", "eagle", "mtp")  # speculation methods; a request's method None = speculation off
LEVELS = ("generation", "engine")  # token ids of whole requests in process / an OpenAI-compatible HTTP API
SAMPLING = ("temperature", "top_k", "top_p", "seed")  # the request parameters an engine may honour
RETURNS = ("ids", "text", "logprobs", "scores")  # token ids, text, logprobs of the sampled tokens, prompt scores
KINDS = ("in-process", "server")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What an engine can be asked and what it gives back; the battery runs only what these allow."""

    methods: tuple[str, ...]  # speculation methods it runs (METHODS members)
    speculation_off: bool = True  # it also runs the target alone (the battery's second ground truth)
    levels: tuple[str, ...] = ("generation",)
    sampling: tuple[str, ...] = SAMPLING  # parameters it honours (one missing: settings that need it are not run)
    returns: tuple[str, ...] = ("ids",)
    seeds: bool = True  # a seeded request is reproducible
    n: bool = False  # several continuations in one request
    streams: bool = False  # server-sent events
    notes: str = ""  # anything a user must know (truncation defaults, precision hints, ...)

    def __post_init__(self):
        for name, allowed in (("methods", METHODS), ("levels", LEVELS), ("sampling", SAMPLING),
                              ("returns", RETURNS)):
            bad = sorted(set(getattr(self, name)) - set(allowed))
            if bad:
                raise ValueError(f"Capabilities.{name}: unknown {bad} (allowed: {', '.join(allowed)})")


@dataclasses.dataclass(frozen=True)
class Probe:
    """`installed()`: whether the engine can run here, why not (or what was found), and its version."""

    installed: bool
    reason: str = ""
    version: str | None = None


@dataclasses.dataclass(frozen=True)
class Setup:
    """What one started engine runs: the registered pair whose target (and draft) it must load, the method (None:
    speculation off), γ (drafted tokens per step), where its logs go, and adapter-specific options."""

    pair: str
    method: str | None = None
    gamma: int = 3
    out: Path | None = None
    options: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Request:
    """One request: n continuations of one prompt. temperature 0.0 = greedy (argmax); top_k / top_p None = off.
    `method` and `gamma` are the started engine's (its Setup's); an adapter may refuse a request that differs."""

    prompt_ids: tuple[int, ...]
    n: int = 1
    max_new_tokens: int = 16
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    method: str | None = None
    gamma: int = 3


@dataclasses.dataclass
class Completion:
    """n rows of new token ids (EOS included where emitted, nothing after it) and, where the engine returns them,
    each token's logprob as the engine reports it (None otherwise)."""

    token_ids: list[list[int]]
    logprobs: list[list[float]] | None = None


class Engine:
    """One engine adapter. Subclass it, set `kind` and `capabilities`, write `installed()` and (in process)
    `start()` and `generate()`, and register it with `@register_engine("name")`."""

    name: ClassVar[str] = ""  # set by register_engine
    kind: ClassVar[str] = "in-process"
    capabilities: ClassVar[Capabilities]
    runnable: ClassVar[bool] = True
    not_runnable_why: ClassVar[str] = ""  # for runnable False: why there is no adapter code that runs it
    api: ClassVar[str] = "openai"  # a server's client at the engine level (harness.served: openai, llama-server, ...)
    model_name: ClassVar[str | None] = None  # a server's served model name (None: its only model)
    endpoint_path: ClassVar[str] = "/v1"  # a server: what the engine level's --endpoint adds to `url`

    def __init__(self, setup: Setup):
        self.setup = setup
        self.url: str | None = None  # a started server's base URL, e.g. http://127.0.0.1:PORT
        self.stop_report: str | None = None  # how it stopped (a server: SIGTERM or killed)
        self.started = False

    @classmethod
    def installed(cls) -> Probe:
        """Installed here, or not and why; never raises, loads nothing heavy."""
        raise NotImplementedError

    @classmethod
    def version(cls) -> str | None:
        return cls.installed().version

    def start(self) -> None:
        """Load the models or launch the server (bounded in time); HarnessError if it cannot (exit 2)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Release everything `start` took; safe to call twice, and after a failed start."""
        self.started = False

    def generate(self, request: Request) -> Completion:
        """In-process engines: one request -> its completion."""
        raise HarnessError(f"engine {self.name} is a {self.kind} engine: it has no in-process generate()")

    def endpoint(self) -> str:
        """A started server's endpoint as the engine level takes it (`url` + `endpoint_path`)."""
        if self.url is None:
            raise HarnessError(f"engine {self.name} is not a started server")
        return self.url + self.endpoint_path

    def unsupported(self, request: Request) -> str | None:
        """Why this engine cannot honour `request` (None: it can): the method, sampling parameters, n."""
        caps = self.capabilities
        if request.method is not None and request.method not in caps.methods:
            return f"method {request.method!r} (it runs {', '.join(caps.methods) or 'none'})"
        if request.method is None and not caps.speculation_off:
            return "speculation off"
        for param in ("top_k", "top_p"):
            if getattr(request, param) is not None and param not in caps.sampling:
                return f"{param} (it honours {', '.join(caps.sampling)})"
        if request.temperature not in (0.0, 1.0) and "temperature" not in caps.sampling:
            return "temperature"
        if request.n > 1 and not caps.n:
            return "n > 1 in one request"
        return None

    def __enter__(self) -> Engine:
        if not self.runnable:
            raise HarnessError(f"engine {self.name} is registered with its capabilities only: {self.not_runnable_why}")
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        self.started = True
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


_REGISTRY: dict[str, type[Engine]] = {}


def register_engine(name: str):
    """Class decorator: register an Engine subclass as `name`. A runnable adapter replaces a declared-only
    registration of the same name; two runnable ones are an error."""

    def decorate(cls: type[Engine]) -> type[Engine]:
        if not (isinstance(cls, type) and issubclass(cls, Engine)):
            raise TypeError(f"@register_engine({name!r}) decorates an Engine subclass, got {cls!r}")
        if cls.kind not in KINDS:
            raise ValueError(f"engine {name}: kind must be one of {KINDS}, got {cls.kind!r}")
        if not isinstance(getattr(cls, "capabilities", None), Capabilities):
            raise ValueError(f"engine {name}: declare `capabilities = Capabilities(...)`")
        old = _REGISTRY.get(name)
        if old is not None and old is not cls and old.runnable and cls.runnable:
            raise ValueError(f"engine {name!r} is registered twice ({old.__module__} and {cls.__module__})")
        if old is None or not old.runnable or cls.runnable:
            cls.name = name
            _REGISTRY[name] = cls
        return cls

    return decorate


def registered() -> dict[str, type[Engine]]:
    """Every engine registered so far (harness.engines.registry imports the catalogue's adapters first)."""
    return dict(_REGISTRY)
