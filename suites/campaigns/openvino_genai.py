"""The OpenVINO GenAI finding (issue 57 item 2) -> results/findings/openvino-genai (`specdec campaign openvino_genai`).

OpenVINO GenAI 2026.4.1 runs in its own venv (`$SPECDEC_OPENVINO_PYTHON`, harness.engines.openvino_genai) on the
embedded SmolLM2-135M Q4_1 GGUF at f32 (inference and KV cache). The cells, in run order:

    law/SETTING         per setting, N continuations of one prompt from each arm (speculation off twice: the
                        control; the draft model, the draft at bf16 / u8, prompt lookup, with prefix caching off and
                        on) -> the project's two-sample test per position and for the whole continuation
                        (harness.served.battery.tests_for_two_sample, Holm at --false-alarm-rate) of every arm
                        against the first off arm; a crashed request is counted, and left out of that arm's law
    greedy              greedy continuations of every arm against speculation off, token for token
    crash/gamma=G       prefix caching on, the draft model, the issue's setting: crashed requests out of N
    generation/IMPL     `specdec verify --level generation --impl harness.engines.openvino_genai:IMPL
                        --pair smollm2`: one-sample against the local transformers target
    sampler/NAME        `specdec verify --impl harness.mutants.openvino:NAME` (the rule as read from sampler.cpp, the
                        rule with #4190's patch, the 101-level uniform alone) and the reference on the same plan

Cells run in this process (WHERE = "local") against the engines its session holds (CONTEXT = True), one
OpenVINO worker at a time (the cores are shared). Journaled; the report (README.md, finding.json) is written from
the cells' records (suites/campaigns/_openvino_report.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

from harness.configs import option
from harness.defaults import DEFAULT_FALSE_ALARM_RATE, DEFAULT_POWER
from harness.errors import HarnessError

WHERE = "local"
CONTEXT = True

PROMPT = ("Repeat this list exactly, five times, separated by commas: red apple, green pear, "
          "yellow banana, red apple, green pear, yellow banana")  # = suites/campaigns/_servers.COPY_PROMPT
GREEDY_PROMPTS = (PROMPT, "The quick brown fox jumps over the lazy dog. The quick brown fox",
                  "Write one sentence about a cat.")
GREEDY_TOKENS = 32
# Arms: name -> (method, Setup.options); "off" is the ground truth, "off-control" the second sample of it.
ARMS = {
    "off": (None, {}),
    "off-control": (None, {}),
    "draft": ("draft", {}),
    "draft-bf16": ("draft", {"draft_precision": "default"}),
    "lookup": ("ngram", {}),
    "draft+prefix-cache": ("draft", {"prefix_caching": True}),
    "lookup+prefix-cache": ("ngram", {"prefix_caching": True}),
}
# Settings of the law cells: label -> (temperature, top_k, top_p, the arms run there). The first is the issue's, with
# the control (off against off) and the crash count at γ = --gamma; the others are sized to the shared CPU.
SETTINGS = {
    "T=1,top_k=3": (1.0, 3, None, ("off", "off-control", "draft", "draft+prefix-cache")),
    "T=1": (1.0, None, None, ("off", "draft", "draft-bf16", "lookup")),
    "T=0.7,top_p=0.9": (0.7, None, 0.9, ("off", "draft", "lookup")),
}
ISSUE_SETTING = "T=1,top_k=3"
GREEDY_ARMS = ("off", "draft", "lookup", "draft+prefix-cache")
SAMPLER_IMPLS = ("harness.mutants.openvino:as_read_verify", "harness.mutants.openvino:patched_4190_verify",
                 "harness.mutants.openvino:uniform101_verify", "specdec_ref.adapters:verify")
GENERATION_IMPLS = ("off_generate", "off_generate_q41", "draft_generate", "lookup_generate")
GENERATION_DEFAULT = ("off_generate", "off_generate_q41")  # numerics alone; the CPU does not allow the others here
GENERATION_LENGTH = 8
SEED_STRIDE = 1_000_003  # each arm's seeds: seed + stride * arm index + k (disjoint ranges)


@dataclasses.dataclass
class Config:
    """`specdec campaign openvino_genai`: sizes of its cells."""

    samples: int = option(150, "--samples", "continuations per arm and setting (the law cells)", int, "N")
    samples_other: int | None = option(100, "--samples-other", "continuations per arm in the law cells other than "
                                       "the issue's setting (T=1,top_k=3); none: --samples", int, "N")
    length: int = option(4, "--length", "new tokens per continuation (the law and crash cells)", int, "N")
    gamma: int = option(3, "--gamma", "drafted tokens per step (num_assistant_tokens)", int, "G")
    crash_requests: int = option(40, "--crash-requests", "requests per crash cell", int, "N")
    crash_gammas: list[int] = option([1], "--crash-gammas", "γ of the crash cells (the law cell T=1,top_k=3 counts "
                                     "the crashes at --gamma)", int, "G", nargs="+")
    seed: int = option(0, "--seed", "seed of every request", int, "S")
    false_alarm_rate: float = option(DEFAULT_FALSE_ALARM_RATE, "--false-alarm-rate", "family-wise false-alarm "
                                     "rate of each law comparison (Holm over its positions and the whole "
                                     "continuation)", float, "A")
    settings: list[str] = option(list(SETTINGS), "--settings", "law cells to run", choices=tuple(SETTINGS),
                                 nargs="+")
    sampler: bool = option(True, "--no-sampler", "skip the sampler-level cells", action="store_false")
    generation: bool = option(True, "--no-generation", "skip the generation-level checks against the local target",
                              action="store_false")
    generation_impls: list[str] = option(list(GENERATION_DEFAULT), "--generation-impls", "the generation-level "
                                         "checks to run", choices=GENERATION_IMPLS, nargs="+")
    generation_samples: int = option(60, "--generation-samples", "--samples of the generation-level checks (per "
                                     "prompt and setting)", int, "N")


def validate(config: Config) -> None:
    if min(config.samples, config.length, config.gamma, config.crash_requests) < 1:
        raise HarnessError("--samples, --length, --gamma and --crash-requests must be >= 1")
    from harness.engines.openvino_genai import OpenVinoGenAI

    probe = OpenVinoGenAI.installed()
    if not probe.installed:
        raise HarnessError(f"OpenVINO GenAI is not available: {probe.reason}")


def provenance_fields(config: Config) -> dict:
    return {"seed": config.seed, "dtype": "float32 (OpenVINO f32 inference and KV cache; Q4_1 weights)"}


class Host:
    """The one started OpenVINO engine (per arm configuration), stopped when another is needed and at the end."""

    def __init__(self, out, gamma: int):
        self.out, self.gamma = out, gamma
        self.key = None
        self.engine = None
        self.stops: list[str] = []

    def get(self, method, options: dict, gamma: int | None = None):
        from harness.engines.base import Setup
        from harness.engines.openvino_genai import OpenVinoGenAI

        gamma = gamma or self.gamma
        key = (method, gamma, tuple(sorted(options.items())))
        if key != self.key:
            self.close()
            engine = OpenVinoGenAI(Setup("smollm2", method, gamma, self.out / "logs", dict(options)))
            try:
                engine.start()
            except BaseException:
                engine.stop()
                raise
            self.key, self.engine = key, engine
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.stop()
            self.stops.append(f"{self.key}: {self.engine.stop_report}")
            self.engine, self.key = None, None


@contextlib.contextmanager
def session(config: Config, out):
    from pathlib import Path

    host = Host(Path(out), config.gamma)
    try:
        yield host
    finally:
        host.close()


def cells(config: Config) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for label in config.settings:
        n = config.samples if label == ISSUE_SETTING or config.samples_other is None else config.samples_other
        out[f"law/{label}/n={n}/length={config.length}/gamma={config.gamma}/seed={config.seed}"] = (
            "law", label, n, config.length, config.seed, config.false_alarm_rate)
    out[f"greedy/tokens={GREEDY_TOKENS}/gamma={config.gamma}"] = ("greedy",)
    for gamma in config.crash_gammas:
        out[f"crash/gamma={gamma}/n={config.crash_requests}/seed={config.seed}"] = (
            "crash", gamma, config.crash_requests, config.length, config.seed)
    if config.generation:
        for impl in config.generation_impls:
            out[f"generation/{impl}/n={config.generation_samples}/seed={config.seed}"] = (
                "generation", impl, config.generation_samples, config.seed)
    if config.sampler:
        for impl in SAMPLER_IMPLS:
            out[f"sampler/{impl}/seed={config.seed}"] = ("sampler", impl)
    return out


def _prompt_ids(text: str) -> tuple[int, ...]:
    from harness.pairs import get_pair
    from harness.prompts import Prompt, encode_prompts

    tok = get_pair("smollm2").tokenizer
    return tuple(encode_prompts(tok, [Prompt(id="p", kind="open", text=text)])[0])


def _request(prompt, n, length, temperature, top_k, top_p, seed, method, gamma):
    from harness.engines.base import Request

    return Request(prompt, n=n, max_new_tokens=length, temperature=temperature, top_k=top_k, top_p=top_p,
                   seed=seed, method=method, gamma=gamma)


def _law_cell(host: Host, label: str, samples: int, length: int, seed: int, rate: float) -> dict:
    from harness.served.battery import count_tests_for_two_sample, tests_for_two_sample
    from harness.stats.multiplicity import holm

    temperature, top_k, top_p, arms = SETTINGS[label]
    prompt = _prompt_ids(PROMPT)
    rows, record = {}, {"setting": label, "prompt": PROMPT, "arms": {}, "comparisons": {}}
    for a, arm in enumerate(arms):
        method, options = ARMS[arm]
        engine = host.get(method, options)
        started = time.perf_counter()
        reply = engine.raw(_request(prompt, samples, length, temperature, top_k, top_p, seed + SEED_STRIDE * a,
                                    method, host.gamma), ignore_eos=False)
        errors = [e for e in reply["errors"] if e]
        rows[arm] = [r for r, e in zip(reply["rows"], reply["errors"], strict=True) if not e]
        record["arms"][arm] = {"requests": samples, "crashed": len(errors), "first_error": errors[0] if errors else None,
                               "seconds": round(time.perf_counter() - started, 2),
                               "pipelines_rebuilt": reply.get("pipelines_rebuilt")}
    m = count_tests_for_two_sample(length)
    for arm in arms[1:]:
        tests = holm(tests_for_two_sample(rows[arm], rows["off"], length=length, rate=rate / m,
                                          power=DEFAULT_POWER, prefix=arm), rate)
        record["comparisons"][arm] = {
            "verdict": "fail" if any(t.reject for t in tests) else "pass",
            "n_arm": len(rows[arm]), "n_off": len(rows["off"]),
            "tests": [t.to_dict() for t in tests],
            "plugin_tv": [_plugin_tv(rows[arm], rows["off"], j) for j in range(length)]}
    return record


def _plugin_tv(a: list, b: list, j: int) -> float:
    """The plug-in TV between the two samples' token laws at position j (descriptive: biased up at small n)."""
    from collections import Counter

    ca, cb = Counter(r[j] if j < len(r) else -1 for r in a), Counter(r[j] if j < len(r) else -1 for r in b)
    na, nb = max(1, len(a)), max(1, len(b))
    return 0.5 * sum(abs(ca[k] / na - cb[k] / nb) for k in set(ca) | set(cb))


def _greedy_cell(host: Host) -> dict:
    prompts = [_prompt_ids(p) for p in GREEDY_PROMPTS]
    out: dict = {"prompts": list(GREEDY_PROMPTS), "tokens": GREEDY_TOKENS, "arms": {}}
    for arm in GREEDY_ARMS:
        method, options = ARMS[arm]
        engine = host.get(method, options)
        out["arms"][arm] = [engine.raw(_request(p, 1, GREEDY_TOKENS, 0.0, None, None, 0, method, host.gamma))["rows"][0]
                            for p in prompts]
    off = out["arms"]["off"]
    out["identical"] = {arm: [r == o for r, o in zip(rows, off, strict=True)] for arm, rows in out["arms"].items()}
    return out


def _crash_cell(host: Host, gamma: int, n: int, length: int, seed: int) -> dict:
    temperature, top_k, top_p, _ = SETTINGS[ISSUE_SETTING]
    engine = host.get("draft", {"prefix_caching": True}, gamma)
    started = time.perf_counter()
    reply = engine.raw(_request(_prompt_ids(PROMPT), n, length, temperature, top_k, top_p, seed + 7 * SEED_STRIDE,
                                "draft", gamma))
    errors = [e for e in reply["errors"] if e]
    return {"gamma": gamma, "requests": n, "crashed": len(errors), "first_error": errors[0] if errors else None,
            "setting": ISSUE_SETTING, "length": length, "seconds": round(time.perf_counter() - started, 2),
            "pipelines_kept": reply.get("pipelines_kept"), "pipelines_rebuilt": reply.get("pipelines_rebuilt")}


def _sampler_cell(impl: str, seed: int) -> dict:
    from harness.check.api import run_verify
    from harness.check.config import CheckConfig
    from harness.stats.rates import family_p

    started = time.perf_counter()
    report = run_verify(CheckConfig(impl=impl, seed=seed))
    d = report.to_dict()
    return {"impl": impl, "command": f"specdec verify --impl {impl} --seed {seed}", "verdict": d["verdict"],
            "detectable_tv": d.get("detectable_tv"), "samples": d.get("samples"), "family_p": family_p(report),
            "failure_summary": d.get("failure_summary", [])[:6], "seconds": round(time.perf_counter() - started, 2)}


def _generation_cell(host: Host, impl: str, samples: int, seed: int) -> dict:
    from harness.check.api import run_verify
    from harness.check.config import CheckConfig
    from harness.stats.rates import family_p

    host.close()  # the generation functions hold their own worker (harness.engines.openvino_genai._engine)
    started = time.perf_counter()
    full = f"harness.engines.openvino_genai:{impl}"
    report = run_verify(CheckConfig(impl=full, level="generation", pair="smollm2", gamma=host.gamma,
                                    samples=samples, seed=seed, contexts="none", length=GENERATION_LENGTH))
    d = report.to_dict()
    return {"impl": full, "verdict": d["verdict"], "detectable_tv": d.get("detectable_tv"),
            "samples": d.get("samples"), "family_p": family_p(report),
            "command": f"specdec verify --level generation --impl {full} --pair smollm2 --gamma {host.gamma} "
                       f"--samples {samples} --seed {seed} --contexts none --length {GENERATION_LENGTH}",
            "failure_summary": d.get("failure_summary", [])[:6], "seconds": round(time.perf_counter() - started, 2)}


def run_cell(host: Host, kind: str, *args) -> dict:
    from suites.campaigns._servers import plain

    if kind == "sampler":
        return plain(_sampler_cell(args[0], 0))
    if kind == "law":
        return plain(_law_cell(host, *args))
    if kind == "greedy":
        return plain(_greedy_cell(host))
    if kind == "crash":
        return plain(_crash_cell(host, *args))
    if kind == "generation":
        return plain(_generation_cell(host, *args))
    raise HarnessError(f"unknown cell kind {kind!r}")


def report(run) -> int:
    """README.md and finding.json from the cells. Exit 1: OpenVINO GenAI FAILs a law or greedy check, or crashes;
    2: a planted rule was not caught or the reference control failed (the checks cannot speak)."""
    from suites.campaigns._openvino_report import write_report

    return write_report(run)
