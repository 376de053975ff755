"""ONNX Runtime GenAI 0.18 end to end (issue 57, item 3): draft model and n-gram, greedy and T > 0, against the
local target and against ONNX Runtime GenAI's own speculation-off generation -> results/findings/onnxruntime-genai.

    SPECDEC_ORT_GENAI_PYTHON=V/bin/python specdec campaign onnxruntime_genai [--no-smollm2] [--two-sample-n 8000]

Cells (harness.engines.onnxruntime_genai runs the engine in its own venv, on models its builder made):

- local/PAIR/IMPL      the generation-level check (`run_verify`, the default plan, --contexts none) of a §1b
                       function of the adapter: greedy equality with the target's greedy, and the exact joint law of
                       3 new tokens at T = 1 and T = 0.7 / top-p 0.9 (toy pairs) or the PIT (SmolLM2); `off_generate`
                       is the control (speculation off: what conversion and kernels alone change)
- greedy/PAIR/METHOD   token-for-token equality of speculative greedy with the engine's own greedy and with
                       transformers' greedy, on --greedy-prompts prompts × --greedy-length tokens
- two/PAIR/METHOD/SET  two-sample chi-square homogeneity per position and of whole continuations
                       (harness.served.battery.tests_for_two_sample), speculation on vs off, disjoint seeds, Holm at
                       the family-wise rate over the cell
- control/PAIR/K       the same cell with speculation off in both arms (false-alarm rate of the two-sample cell)
- planted/PAIR/METHOD  the same cell with the speculative arm at 0.85 × T (a known fault it must catch)
- same-seed/PAIR/M     how many of 2,000 rows speculation reproduces token for token with the plain run's seeds
- rule/IMPL            ONNX Runtime GenAI's acceptance rule transcribed (harness.engines.onnxruntime_genai_rule) at
                       the sampler level: as written, and with the q = 0 branch taken (the edge read in the code)
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

from harness.configs import option
from harness.defaults import DEFAULT_FALSE_ALARM_RATE, DEFAULT_POWER

WHERE = "local"
CONTEXT = True
ADAPTER = "harness.engines.onnxruntime_genai"
RULE = "harness.engines.onnxruntime_genai_rule"
SETTINGS = {"T=1": (1.0, None), "T=0.7,top_p=0.9": (0.7, 0.9)}
PLANTED_SCALE = 0.85  # the planted fault: the speculative arm samples at 0.85 × T
TWO_SAMPLE_LENGTH = 3  # new tokens per row of the two-sample and same-seed cells
# SmolLM2 at the generation level, per prompt: (impl, setting, samples). T = 0.7 / top-p 0.9 with speculation off too:
# a token outside the target's nucleus is an exact support failure, decided by a few dozen samples
SMOLLM2_LOCAL = (("off_generate", "T=0.7,top_p=0.9", 40), ("int8_draft_generate", "T=0.7,top_p=0.9", 40),
                 ("int8_draft_generate", "T=1", 100))


@dataclasses.dataclass
class Config:
    """`specdec campaign onnxruntime_genai`: which pairs, and the sizes of the two-sample and greedy cells."""

    pair: str = option("toy-low", "--pair", "the toy pair (α ≈ 0.2 on toy-low: many rejections)", metavar="NAME")
    smollm2: bool = option(True, "--no-smollm2", "leave out the SmolLM2 cells", action="store_false")
    local_samples: int | None = option(4000, "--local-samples", "samples per prompt and setting of the toy pair's "
                                       "generation-level cells (0: the check's own plan)", int, "N")
    two_sample_n: int = option(6000, "--two-sample-n", "continuations per arm, prompt and setting", int, "N")
    controls: int = option(5, "--controls", "two-sample cells with speculation off in both arms", int, "K")
    greedy_prompts: int = option(16, "--greedy-prompts", "prompts of the greedy equality cells", int, "N")
    greedy_length: int = option(32, "--greedy-length", "new tokens per greedy prompt", int, "N")
    gamma: int = option(3, "--gamma", "drafted tokens per round (max_draft_tokens)", int, "G")
    seed: int = option(0, "--seed", "seed of every draw", int, "S")


def cells(config: Config) -> dict[str, tuple]:
    p, out = config.pair, {"versions": ("versions",)}
    for impl in ("off_generate", "draft_generate", "ngram_generate"):
        out[f"local/{p}/{impl}/{config.local_samples}"] = ("local", p, impl, config.local_samples or None, None)
    if config.smollm2:  # few samples: the target scores each continuation, and the CPU is shared
        for impl, setting, n in SMOLLM2_LOCAL:
            out[f"local/smollm2/{impl}/{setting}/{n}"] = ("local", "smollm2", impl, n, setting)
    for pair in (p, "smollm2") if config.smollm2 else (p,):
        for method in ("draft", "ngram"):
            k, n = (config.greedy_prompts, config.greedy_length) if pair == p else (8, 24)
            out[f"greedy/{pair}/{method}/{k}x{n}"] = ("greedy", pair, method, k, n)
    for method in ("draft", "ngram"):
        for name in SETTINGS:
            out[f"two/{p}/{method}/{name}/{config.two_sample_n}"] = ("two", p, method, name, config.two_sample_n, 1.0)
    for method in ("draft", "ngram"):
        out[f"same-seed/{p}/{method}"] = ("same_seed", p, method, 2000)
    for k in range(config.controls):
        out[f"control/{p}/{k}/{config.two_sample_n}"] = ("control", p, k, config.two_sample_n)
    out[f"planted/{p}/draft/{config.two_sample_n}"] = ("two", p, "draft", "T=1", config.two_sample_n, PLANTED_SCALE)
    for impl in ("verify", "q_zero_verify"):
        out[f"rule/{impl}"] = ("rule", impl)
    return out


class Engines:
    """The campaign's context: ONNX Runtime GenAI engines started on first use (at most two at a time)."""

    def __init__(self, config: Config, out):
        self.config, self.out, self.up = config, out, {}

    def get(self, pair: str, method: str | None):
        from harness.engines.base import Setup
        from harness.engines.onnxruntime_genai import OnnxRuntimeGenAI

        key = (pair, method)
        if key not in self.up:
            for old in [k for k in self.up if k[0] != pair or (k[1] is not None and method is not None)]:
                self.up.pop(old).stop()
            engine = OnnxRuntimeGenAI(Setup(pair, method, self.config.gamma, self.out / "logs"))
            try:
                engine.start()
            except BaseException:
                engine.stop()
                raise
            self.up[key] = engine
        return self.up[key]

    def close(self) -> None:
        for key in list(self.up):
            self.up.pop(key).stop()


@contextlib.contextmanager
def session(config: Config, out):
    import torch

    torch.set_num_threads(1)
    engines = Engines(config, out)
    try:
        yield engines
    finally:
        engines.close()


def run_cell(ctx: Engines, kind: str, *args) -> dict:
    started = time.perf_counter()
    record = {"versions": _versions, "local": _local, "greedy": _greedy, "two": _two, "control": _control,
              "rule": _rule, "same_seed": _same_seed}[kind](ctx, *args)
    return {"kind": kind, **record, "wall_s": round(time.perf_counter() - started, 1)}


def _versions(ctx: Engines) -> dict:
    """The engine venv's versions (its worker's `versions` op) and this process's torch / transformers."""
    import torch
    import transformers

    from harness.engines.onnxruntime_genai import Worker, worker_python

    worker = Worker(worker_python())
    try:
        reply = worker.call({"op": "versions"}, 120)
    finally:
        worker.close()
    reply.pop("ok", None)
    return {**reply, "torch": torch.__version__, "transformers": transformers.__version__}


def _summary(report) -> dict:
    """Per setting of a generation-level report: its gating tests' smallest p, rejections and detectable TV."""
    out: dict = {}
    for t in report.tests:
        setting = t.name.split("/", 1)[0]
        row = out.setdefault(setting, {"tests": 0, "rejected": [], "min_p": 1.0, "detectable_tv": None})
        row["tests"] += 1
        row["min_p"] = min(row["min_p"], float(t.p_value))
        if t.reject:
            row["rejected"].append(t.name)
        if t.detectable_tv is not None and t.detectable_tv == t.detectable_tv and "joint_pooled" in t.name:
            row["detectable_tv"] = max(row["detectable_tv"] or 0.0, float(t.detectable_tv))
    for case in report.cases:
        setting = case["name"].split("/", 1)[0]
        if setting in out:
            out[setting]["samples"] = out[setting].get("samples", 0) + int(case.get("samples", 0))
    return out


def _local(ctx: Engines, pair: str, impl: str, samples: int | None, setting: str | None) -> dict:
    from harness.check.api import run_verify
    from harness.check.config import CheckConfig
    from harness.engines import onnxruntime_genai as ort
    from harness.errors import HarnessError
    from harness.stats.rates import family_p

    row = {"pair": pair, "impl": f"{ADAPTER}:{impl}", "samples_requested": samples, "setting": setting}
    try:
        report = run_verify(CheckConfig(impl=f"{ADAPTER}:{impl}", level="generation", pair=pair, seed=ctx.config.seed,
                                        samples=samples, gamma=ctx.config.gamma, contexts="none",
                                        settings=[setting] if setting else None))
    except (HarnessError, ort.EngineRequestFailed) as exc:
        return {**row, "verdict": "error", "message": str(exc)[:400]}
    return {**row, "verdict": report.verdict, "samples": report.samples, "detectable_tv": report.detectable_tv,
            "family_p": family_p(report), "declared_tests": report.declared_tests, "seconds": report.seconds,
            "settings": _summary(report), "stats": ort.last_stats(),
            "failure": report.failure_summary()[:3]}


def _first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ (None: equal)."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), None if len(a) == len(b) else n)


def _greedy(ctx: Engines, pair_name: str, method: str, prompts: int, length: int) -> dict:
    import torch

    from harness.adapters.hf import hf_generate
    from harness.engines.base import Request
    from harness.pairs import get_pair

    pair = get_pair(pair_name)
    g = torch.Generator().manual_seed(ctx.config.seed)
    ids = [list(p) for p in (pair.prompts or [])][:prompts]
    while len(ids) < prompts:
        ids.append(torch.randint(0, pair.vocab_size, (8,), generator=g).tolist())
    spec, off = ctx.get(pair_name, method), ctx.get(pair_name, None)
    rows = []
    for prompt in ids:
        req = Request(tuple(prompt), max_new_tokens=length, temperature=0.0, method=method, gamma=ctx.config.gamma)
        got = spec.generate(req).token_ids[0]
        ref = off.generate(dataclasses.replace(req, method=None)).token_ids[0]
        hf = [int(t) for t in hf_generate(pair.target, torch.tensor([prompt]), max_new_tokens=length, temperature=0.0,
                                          top_k=None, top_p=None, seed=0)[0].tolist() if t >= 0]
        rows.append({"spec_vs_off": _first_difference(got, ref), "off_vs_transformers": _first_difference(ref, hf),
                     "spec_vs_transformers": _first_difference(got, hf), "tokens": len(got)})
    count = lambda key: sum(r[key] is not None for r in rows)  # noqa: E731
    return {"pair": pair_name, "method": method, "prompts": len(rows), "length": length,
            "spec_vs_off_differ": count("spec_vs_off"), "off_vs_transformers_differ": count("off_vs_transformers"),
            "spec_vs_transformers_differ": count("spec_vs_transformers"), "rows": rows, "stats": dict(spec.stats)}


def _rows(engine, prompt, n, seed, temperature, top_p, method, gamma) -> list[list[int]]:
    from harness.engines.base import Request

    req = Request(tuple(prompt), n=1, max_new_tokens=TWO_SAMPLE_LENGTH, temperature=temperature, top_p=top_p,
                  seed=seed, method=method, gamma=gamma)
    reply = engine.raw(dataclasses.replace(req, n=n))  # n generators, seeds seed .. seed + n - 1, one call
    bad = [e for e in reply["errors"] if e]
    if bad:
        raise RuntimeError(f"ONNX Runtime GenAI aborted {len(bad)} rows: {bad[0]}")
    return [r[:TWO_SAMPLE_LENGTH] for r in reply["rows"]]


def _two_sample(ctx: Engines, pair_name: str, arm_a, arm_b, settings, n: int, scale: float, label: str) -> dict:
    from harness.pairs import get_pair
    from harness.served.battery import tests_for_two_sample
    from harness.stats.multiplicity import holm

    pair = get_pair(pair_name)
    prompts = (pair.prompts or [])[:2]
    m = len(prompts) * len(settings) * (TWO_SAMPLE_LENGTH + 1)
    rate, tests, started = DEFAULT_FALSE_ALARM_RATE, [], time.perf_counter()
    seed = ctx.config.seed * 7_919
    for name in settings:
        temperature, top_p = SETTINGS[name]
        for j, prompt in enumerate(prompts):
            engine_a, method_a = arm_a
            engine_b, method_b = arm_b
            base = seed + 10_000_000 * j + 1_000_000 * list(SETTINGS).index(name)
            a = _rows(engine_a, prompt, n, base, temperature * scale, top_p, method_a, ctx.config.gamma)
            b = _rows(engine_b, prompt, n, base + 500_000, temperature, top_p, method_b, ctx.config.gamma)
            tests += tests_for_two_sample(a, b, length=TWO_SAMPLE_LENGTH, rate=rate / m, power=DEFAULT_POWER,
                                          prefix=f"{name}/prompt{j}")
    tests = holm(tests, rate)
    finite = [t.detectable_tv for t in tests if t.detectable_tv is not None and t.detectable_tv == t.detectable_tv
              and t.detectable_tv != float("inf")]
    rejected = [t.name for t in tests if t.reject]
    return {"pair": pair_name, "label": label, "settings": list(settings), "n_per_arm": n, "tests": len(tests),
            "verdict": "fail" if rejected else "pass", "rejected": rejected[:6], "family_p": min(1.0, len(tests) * min(float(t.p_value) for t in tests)),
            "min_p": min(float(t.p_value) for t in tests), "detectable_tv": max(finite) if finite else None,
            "detectable_tv_positions": max((t.detectable_tv for t in tests if "/pos" in t.name
                                            and t.detectable_tv not in (None, float("inf"))), default=None),
            "samples": 2 * n * len(prompts) * len(settings), "seconds": round(time.perf_counter() - started, 1)}


def _two(ctx: Engines, pair: str, method: str, setting: str, n: int, scale: float) -> dict:
    off = ctx.get(pair, None)
    spec = ctx.get(pair, method)
    before = dict(spec.stats)
    out = _two_sample(ctx, pair, (spec, method), (off, None), [setting], n, scale,
                      f"{method} vs off" + (f" (planted: {scale:g} × T)" if scale != 1.0 else ""))
    out["stats"] = {k: v - before.get(k, 0) for k, v in spec.stats.items()}
    return {"method": method, "setting": setting, "scale": scale, **out}


def _same_seed(ctx: Engines, pair_name: str, method: str, n: int) -> dict:
    """How many rows speculation reproduces exactly with the seed of the plain run (3 new tokens, first prompt)."""
    from harness.pairs import get_pair

    prompt = (get_pair(pair_name).prompts or [])[0]
    spec, off = ctx.get(pair_name, method), ctx.get(pair_name, None)
    out = {"pair": pair_name, "method": method, "n": n}
    for name, (temperature, top_p) in SETTINGS.items():
        rows = [_rows(e, prompt, n, 0, temperature, top_p, m, ctx.config.gamma) for e, m in ((spec, method),
                                                                                            (off, None))]
        out[name] = sum(a == b for a, b in zip(*rows, strict=True))
    return out


def _control(ctx: Engines, pair: str, k: int, n: int) -> dict:
    off = ctx.get(pair, None)
    saved = ctx.config.seed
    ctx.config = dataclasses.replace(ctx.config, seed=saved + 1_000 + k)
    try:
        out = _two_sample(ctx, pair, (off, None), (off, None), list(SETTINGS), n, 1.0, "off vs off")
    finally:
        ctx.config = dataclasses.replace(ctx.config, seed=saved)
    return {"repeat": k, **out}


def _rule(ctx: Engines, impl: str) -> dict:
    from harness.check.api import run_verify
    from harness.check.config import CheckConfig
    from harness.stats.rates import family_p

    report = run_verify(CheckConfig(impl=f"{RULE}:{impl}", level="sampler", seed=ctx.config.seed))
    rejected = [t.name for t in report.tests if t.reject]
    return {"impl": f"{RULE}:{impl}", "verdict": report.verdict, "samples": report.samples,
            "detectable_tv": report.detectable_tv, "family_p": family_p(report), "rejected": rejected[:4],
            "tests": len(report.tests), "seconds": report.seconds}


def provenance_fields(config: Config) -> dict:
    return {"seed": config.seed}


def report(run) -> int:
    """README.md (the findings page) and campaign.json. Exit 1 if speculation changed the law (a speculative cell fails
    where speculation off passes, a two-sample cell fails, greedy differs from the engine's own), 3 if the campaign's
    own checks misbehaved (planted not caught, a control or the faithful rule failing) or a cell broke, else 0; a
    failure the engine shows with speculation off too is a finding of its sampler, reported, not exit 1."""
    from suites.campaigns._ortgenai_report import expected_ok, readme, speculation_failures

    records = run.records + [r for k, r in run.journal.items()  # SmolLM2 cells of an earlier invocation (slow ones)
                             if k.split("/")[1:2] == ["smollm2"] and k not in run.done]
    run.write_result("campaign.json", "campaign.onnxruntime_genai", rows=records)
    run.write_text("README.md", readme(run, records))
    if speculation_failures(records):
        return 1
    if not expected_ok(records) or any(r.get("verdict") == "error" for r in records):
        return 3
    return 0
