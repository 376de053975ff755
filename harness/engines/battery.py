"""The generic battery's mechanism: which checks apply to an engine, the engines a run holds, one check of one cell.

Every cell is the engine level's check (harness.served.check.run_engine_check) with its own power statement: an
in-process engine is put behind specdec's OpenAI app (harness.served.serve.serving) through `as_generate`, a server
engine is checked at its own endpoint. No statistics are written here.

    greedy              greedy output equal, token for token, to the ground truth's greedy
    T=1                 the law at T = 1 (truncation off)
    T=0.7,top_p=0.9     the law at T = 0.7 with top-p 0.9
    api                 the API battery (stops, limits, finish reasons, streams, n, seeds): servers only
    logprobs            the logprobs reported are the target's: servers that return logprobs only

Ground truths: "local" (the registered pair's target, here) and "off" (the same engine with speculation off:
two-sample tests; greedy equality with its greedy).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from pathlib import Path

from harness.engines.base import Engine, Request, Setup

SAMPLING_CHECKS = ("greedy", "T=1", "T=0.7,top_p=0.9")
CHECKS = (*SAMPLING_CHECKS, "api", "logprobs")
TRUTHS = ("local", "off")
STOPS = "engine-stops.jsonl"  # how every engine the run started was stopped (a server killed after SIGTERM: said)


def setting(check: str):
    from harness.check.settings import Setting

    return {"greedy": Setting(0.0), "T=1": Setting(1.0), "T=0.7,top_p=0.9": Setting(0.7, top_p=0.9)}[check]


def not_applicable(cls: type[Engine], method: str, check: str, truth: str) -> str | None:
    """Why this cell cannot run on this engine (None: it can); the report prints it as "not run: why"."""
    caps = cls.capabilities
    if not cls.runnable:
        return cls.not_runnable_why
    if method not in caps.methods:
        return f"the engine does not offer {method}"
    if truth == "off" and not caps.speculation_off:
        return "the engine cannot run with speculation off"
    if check == "T=0.7,top_p=0.9" and not {"temperature", "top_p"} <= set(caps.sampling):
        return "the engine does not honour temperature and top-p"
    if check in ("api", "logprobs"):
        if cls.kind != "server":
            return "an in-process engine has no API surface of its own (specdec's app would be checked, not it)"
        if truth != "local":
            return "checked against the local target only"
        if check == "logprobs" and "logprobs" not in caps.returns:
            return "the engine returns no logprobs"
    return None


def row_seed(seed: int, *parts: int) -> int:
    """An independent 31-bit seed for one row of one call (engines take 32-bit or smaller seeds)."""
    digest = hashlib.sha256("/".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def as_generate(engine: Engine):
    """A §1b generate() (docs/CONTRACT.md) that sends each prompt of the batch to `engine` as one Request with n
    (or, without n, one Request per row, each with its own seed); `target` / `draft` are not used: the engine
    runs its own copy of the pair's models."""

    def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
        import torch

        groups: dict[tuple[int, ...], list[int]] = {}
        for i, row in enumerate(input_ids.tolist()):
            groups.setdefault(tuple(row), []).append(i)
        out: list[list[int]] = [[] for _ in range(input_ids.shape[0])]
        base = dict(max_new_tokens=max_new_tokens, temperature=float(temperature), top_k=top_k or None,
                    top_p=top_p if top_p not in (None, 1.0) else None, method=engine.setup.method,
                    gamma=engine.setup.gamma)
        for g, (prompt, rows) in enumerate(groups.items()):
            if engine.capabilities.n:
                done = engine.generate(Request(prompt, n=len(rows), seed=row_seed(seed, g), **base)).token_ids
            else:
                done = [engine.generate(Request(prompt, n=1, seed=row_seed(seed, g, j), **base)).token_ids[0]
                        for j in range(len(rows))]
            if len(done) != len(rows):
                raise RuntimeError(f"engine {engine.name} returned {len(done)} rows for n = {len(rows)}")
            for i, tokens in zip(rows, done, strict=True):
                out[i] = list(tokens)[:max_new_tokens]
        width = max(1, max(map(len, out)))
        return torch.tensor([r + [-1] * (width - len(r)) for r in out], dtype=torch.long)

    return generate


class EngineHost:
    """The engines one campaign run holds (its runner context): `endpoint(method)` starts the engine for that method
    (None: speculation off) on first use and keeps at most the two a cell needs; every stop is logged to OUT/STOPS."""

    def __init__(self, cls: type[Engine], pair: str, gamma: int, out: Path, options: dict | None = None):
        self.cls, self.pair, self.gamma, self.out, self.options = cls, pair, gamma, out, options or {}
        self._up: dict[str | None, tuple[contextlib.ExitStack, str, Engine]] = {}

    def endpoint(self, method: str | None) -> str:
        if method not in self._up:
            stack = contextlib.ExitStack()
            try:
                engine = self.cls(Setup(self.pair, method, self.gamma, self.out / "logs", dict(self.options)))
                stack.callback(self._stopped, engine)  # runs after the engine's stop: its stop_report is known
                stack.enter_context(engine)
                if self.cls.kind == "server":
                    url = engine.endpoint()
                else:
                    from harness.pairs import get_pair
                    from harness.served.serve import serving

                    url = stack.enter_context(serving(as_generate(engine), get_pair(self.pair),
                                                      gamma=self.gamma)).url + "/v1"
            except BaseException:
                stack.close()
                raise
            self._up[method] = (stack, url, engine)
        return self._up[method][1]

    def keep(self, methods: set[str | None]) -> None:
        """Stop every engine not in `methods` (before a cell that needs others)."""
        for method in [m for m in self._up if m not in methods]:
            self._up.pop(method)[0].close()

    def _stopped(self, engine: Engine) -> None:
        line = {"engine": self.cls.name, "method": engine.setup.method, "stop": engine.stop_report or "in process",
                "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / STOPS, "a") as f:
            f.write(json.dumps(line) + "\n")

    def close(self) -> None:
        self.keep(set())


def check_cell(host: EngineHost, method: str, check: str, truth: str, *, samples: int, seed: int,
               false_alarm_rate: float, inconclusive_tv: float) -> dict:
    """One cell: the engine level's check of `method` on `check` against `truth` -> its record (verdict, detectable
    TV, samples, seconds, family p, first rejecting test, the engine's version)."""
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig
    from harness.stats.rates import family_p

    needed = {method, None} if truth == "off" else {method}
    host.keep(needed)
    url = host.endpoint(method)
    extra: dict = {}
    if truth == "off":
        extra = {"reference_endpoint": host.endpoint(None), "ground_truth": "two-sample"}
    elif check in SAMPLING_CHECKS:
        extra = {"ground_truth": "local"}
    if check in SAMPLING_CHECKS:
        extra |= {"settings": (setting(check),), "checks": ("tokens",)}
    else:
        extra |= {"checks": (check,)}
    api = host.cls.api if host.cls.kind == "server" else "openai"
    started = time.perf_counter()
    report = run_engine_check(EngineConfig(endpoint=url, pair=host.pair, samples=samples, seed=seed, api=api,
                                           false_alarm_rate=false_alarm_rate, inconclusive_tv=inconclusive_tv,
                                           **extra))
    tv = report.detectable_tv
    return {"engine": host.cls.name, "version": host.cls.version(), "pair": host.pair,
            "options": sorted(f"{k}={v}" for k, v in host.options.items()), "method": method, "check": check, "truth": truth,
            "verdict": report.verdict, "detectable_tv": None if tv is None or tv != tv else float(tv),
            "samples": int(report.samples), "family_p": _float(family_p(report)),
            "first_reject": next((t.name for t in report.tests if t.reject), None),
            "notes": [str(n) for n in report.notes][:6], "seconds": round(time.perf_counter() - started, 2),
            "utc": time.strftime("%Y-%m-%d", time.gmtime())}


def _float(x):
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if x != x else x


def not_run_record(cls: type[Engine], method: str, check: str, truth: str, why: str) -> dict:
    return {"engine": cls.name, "version": None, "method": method, "check": check, "truth": truth,
            "verdict": "not run", "why": why}

