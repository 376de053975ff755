"""The architectures campaign (issue 44): hybrid, recurrent and sliding-window models end to end, on the tiny
offline pairs of suites/catalogues/architectures.py (one per cache family).

    specdec campaign architectures [--parts shape,mutants,reference,transformers,engine] [--pairs arch-ssm ...]
                                   [--seeds 1] [--time-budget 300] [--samples N] [--out results/findings/architectures]

Every run is a cell of the campaign runner (harness.runner), one row journaled in OUT/journal.jsonl (a rerun resumes:
a run already journaled is not run again; --first-seed / --seeds add seeds on top). The report covers every row of
the journal, whichever command ran it: OUT/campaign.json (the rows, a result envelope) and OUT/README.md's tables.
Parts (--parts, default: all):
- shape: per pair, the draft's acceptance per position and the target's entropy (the reference's own counters,
  T = 1, γ = 3);
- mutants: every mutant of harness.mutants.architectures at the default plan of `specdec verify --level generation`
  on its pair, `--seeds` seeds (each must FAIL);
- reference: the reference with the stateful path forced (harness.mutants.generation:reference_kv_cache) on every
  pair, `--seeds` seeds (each must not FAIL); `--samples N` for a fixed plan instead of the default;
- transformers: `harness.adapters.hf:assisted_generate` and `:prompt_lookup_generate` on every pair: greedy
  equality and the sampling law, within `--time-budget` seconds of sampling per run (a crash is a finding: FAIL,
  exit 1, the exception named);
- engine: llama.cpp's llama-server on every pair (harness.served.llama_server's binary, built by `nox -s engines`;
  without it the part is not run and the report says so): the pair saved with a WordPiece tokenizer t0 … t47, converted
  to F32 GGUFs by the vendored convert_hf_to_gguf.py (harness.models.gguf_convert), served with speculation off and
  with the draft (`--spec-type draft-simple -md DRAFT`); per server, the same greedy request three times and
  `specdec verify --level engine --api llama-server` against the local float64 target: greedy equality (16 tokens)
  and the T = 1 law with llama-server's truncation off (ENGINE_SAMPLES continuations of 3 tokens per prompt).
Each row carries the verdict, seconds, detectable TV, seed and versions. Exit (over this command's runs): 0 when
every mutant FAILed and the reference never did, 1 otherwise, 2 when a run could not be done (a harness fault);
transformers' and the engine's verdicts are findings, not gates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from pathlib import Path

from harness.configs import option
from harness.reporting import header, num, rate, rerun, table

PARTS = ("shape", "mutants", "reference", "transformers", "engine")
REFERENCE = "harness.mutants.generation:reference_kv_cache"
TRANSFORMERS = ("harness.adapters.hf:assisted_generate", "harness.adapters.hf:prompt_lookup_generate")


def _pairs():
    from suites.catalogues.architectures import FAMILIES

    return FAMILIES


def _versions() -> dict:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def _verify(impl: str, pair: str, *, seed: int, samples: int | None, time_budget: float | None,
            settings: list[str] | None = None, contexts: str | None = None) -> dict:
    """One `specdec verify --level generation` run, as a row (never raises: a harness fault is verdict 'error')."""
    from harness.adapters.calling import ImplementationError
    from harness.check.api import run_verify
    from harness.check.config import CheckConfig
    from harness.errors import HarnessError, describe_fault
    from harness.stats.rates import family_p

    started = time.perf_counter()
    row = {"impl": impl, "pair": pair, "seed": seed, "samples_requested": samples, "time_budget_s": time_budget,
           "settings": settings or "default", **({"contexts": contexts} if contexts else {})}
    try:
        report = run_verify(CheckConfig(impl=impl, level="generation", pair=pair, seed=seed, samples=samples,
                                        time_budget_s=time_budget, settings=settings,
                                        **({"contexts": contexts} if contexts else {})))
    except ImplementationError as exc:
        return {**row, "verdict": "fail", "exit": 1, "message": f"CRASH (a finding): {exc}"[:400],
                "seconds": time.perf_counter() - started}
    except HarnessError as exc:
        return {**row, "verdict": "error", "exit": 2, "message": str(exc)[:400], "seconds": time.perf_counter() - started}
    except Exception as exc:  # noqa: BLE001 - the run's own fault: recorded as such, never as a verdict
        return {**row, "verdict": "error", "exit": 2, "message": describe_fault(exc)[:400],
                "seconds": time.perf_counter() - started}
    rejected = [t for t in report.tests if t.reject]
    summary = report.failure_summary() + [f"{t.name}: {t.details.get('message', '')}" for t in rejected[:2]]
    return {**row, "verdict": report.verdict, "exit": {"pass": 0, "fail": 1, "inconclusive": 3}[report.verdict],
            "samples": report.samples, "detectable_tv": report.detectable_tv, "declared_tests": report.declared_tests,
            "family_p": family_p(report),  # m · min p (Holm's first step): a false alarm at family-wise rate a iff ≤ a
            "message": " / ".join(summary)[:600], "seconds": report.seconds,
            "notes": [n for n in report.notes if "float32" in n or "decided at" in n][:3]}


def shape(pair_name: str, *, rows: int = 16, length: int = 24, gamma: int = 3) -> dict:
    """Acceptance per draft position (accepted / reached) and the target's mean entropy, from the reference."""
    import torch

    from harness.pairs import get_pair
    from specdec_ref.generate import speculative_generate

    pair = get_pair(pair_name, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, pair.vocab_size, (rows, 12), generator=g)
    started = time.perf_counter()
    out = speculative_generate(pair.target, pair.draft, ids, max_new_tokens=length, gamma=gamma, temperature=1.0,
                               seed=0, cache="cache")
    stats = out.stats
    seqs = torch.cat([ids, out.tokens.clamp_min(0)], 1)
    with torch.inference_mode():
        logp = pair.target(input_ids=seqs, attention_mask=torch.ones_like(seqs)).logits.double().log_softmax(-1)
    entropy = float(-(logp.exp() * logp).sum(-1).mean())
    return {"part": "shape", "pair": pair_name, "acceptance_per_position": [
        round(a / r, 3) if r else None for a, r in zip(stats.accepted, stats.reached, strict=True)],
        "acceptance_rate": round(stats.alpha, 3), "mean_accepted_tokens": round(stats.mean_accepted_tokens, 3),
        "entropy_nats": round(entropy, 3), "max_entropy_nats": round(float(torch.log(torch.tensor(pair.vocab_size))), 3),
        "seconds": time.perf_counter() - started}


# --- the engine part: llama-server on the tiny pairs ----------------------------------------------------------------

ENGINE_SIDES = ("off", "draft")  # llama-server with speculation off, and with the pair's draft (draft-simple)
ENGINE_SAMPLES = 4_000  # T = 1 continuations per prompt (3 tokens, V = 48): detectable TV 0.077 per prompt
ENGINE_GREEDY_LENGTH = 16
ENGINE_CONVERT = {"arch-linear": ("--no-mtp",)}  # Qwen3-Next: the converter asserts MTP layers unless told none
GREEDY_PROMPT = [1, 2, 3, 4]
# pair -> (what differs, config.json fields set): the pair as llama.cpp's converter reproduces it. On these two the
# catalogue's config is one the converter does not carry over (results/findings/architectures/repro: Bamba's
# rope_parameters.partial_rotary_factor is ignored; Gemma 3's query_pre_attn_scalar is ignored and no sliding-window
# pattern is written, llama.cpp making every 6th layer global), so speculation off already differs from transformers
# and says nothing of speculation. The engine part runs each also as PAIR@gguf: the same weights with these fields,
# for llama-server and for its ground truth (the saved target) alike.
ENGINE_FAITHFUL = {
    "arch-swa": ("query_pre_attn_scalar = head_dim = 8, both layers sliding (window 8)",
                 {"query_pre_attn_scalar": 8, "layer_types": ["sliding_attention", "sliding_attention"]}),
    "arch-mamba2-hybrid": ("rope partial_rotary_factor 1.0", {"rope_parameters": {"partial_rotary_factor": 1.0}}),
}
FAITHFUL = "@gguf"
NO_LLAMA_SERVER = "no llama-server (build one with `nox -s engines`, or set $SPECDEC_LLAMA_SERVER)"


def _engine_binary():
    """llama-server's binary (None: not built); its own function, so a test can stand in for it."""
    from harness.served.llama_server import find_binary

    return find_binary()


def _engine_version(binary) -> dict:
    from harness.served.llama_server import LLAMA_CPP_PYTHON, version

    return {"binary": str(binary), "version": version(binary), "llama.cpp": f"vendored in llama-cpp-python "
            f"{LLAMA_CPP_PYTHON}"}


def _engine_models(pair_name: str, work: Path, log) -> dict:
    """The pair saved with the WordPiece tokenizer (the local ground truth) and converted to F32 GGUFs."""
    from harness.models.gguf_convert import convert
    from harness.models.tiny_arch import save_pair
    from harness.pairs import get_pair
    from harness.served.llama_server import cache_root

    # with the tokenizer: the Gemma 3 converter reads the vocabulary size from tokenizer.json (the vocabulary itself
    # is written by gguf_convert, the same words)
    base = pair_name.removesuffix(FAITHFUL)
    target, draft = save_pair(get_pair(base), work / "hf", tokenizer=True)
    paths = {"target": Path(target), "draft": Path(draft)}
    if pair_name != base:
        for path in paths.values():
            set_config_fields(path / "config.json", ENGINE_FAITHFUL[base][1])
    ggufs = {role: convert(cache_root() / "llama.cpp", path, work / f"{role}.f32.gguf",
                           extra=ENGINE_CONVERT.get(base, ()), log=log) for role, path in paths.items()}
    return {"target_hf": paths["target"], **ggufs}


def _engine_labels(pair_name: str) -> tuple[str, ...]:
    """The engine part's pairs for one catalogue pair: itself, and PAIR@gguf where the converter drops fields."""
    return (pair_name, *([pair_name + FAITHFUL] if pair_name in ENGINE_FAITHFUL else []))


def set_config_fields(path: Path, fields: dict) -> None:
    """Set `fields` in a saved config.json (a dict-valued field is updated key by key, e.g. rope_parameters)."""
    config = json.loads(path.read_text())
    for key, value in fields.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    path.write_text(json.dumps(config, indent=2))


@contextlib.contextmanager
def _engine_server(binary, target: Path, draft: Path | None, log: Path):
    """llama-server on a free localhost port (the harness's flags: harness.served.llama_server.server_command)."""
    from harness.served.llama_server import server_command
    from harness.served.process import served
    from harness.served.vllm_server import free_port

    port = free_port()
    cmd = [*server_command(binary, target, port, draft=draft, ctx=512, slots=4), "-lv", "3"]  # info: acceptance
    with served(cmd, f"http://127.0.0.1:{port}", "/health", "llama-server", startup_timeout_s=300,
                log_path=str(log), describe_command=True) as url:
        yield url


def _engine_greedy(url: str, prompt: list[int], repeats: int = 3) -> list[dict]:
    """The same greedy request (12 tokens) `repeats` times: an engine must return one answer."""
    import httpx

    outs = []
    for _ in range(repeats):
        reply = httpx.post(f"{url}/completion", json={"prompt": prompt, "n_predict": 12, "temperature": 0,
                                                      "return_tokens": True, "cache_prompt": False}, timeout=300).json()
        timings = reply.get("timings") or {}
        outs.append({"tokens": reply.get("tokens"), "draft_n": timings.get("draft_n"),
                     "draft_n_accepted": timings.get("draft_n_accepted")})
    return outs


def _draft_counts(log: Path) -> dict | None:
    """llama-server's own count of drafted and accepted tokens over every request it served (its log at verbosity 3:
    "draft acceptance = … (A accepted / G generated)" per request); None without speculation."""
    import re

    found = re.findall(r"draft acceptance = [0-9.]+ \(\s*(\d+) accepted / \s*(\d+) generated\)",
                       log.read_text(errors="replace") if log.exists() else "")
    if not found:
        return None
    accepted, drafted = (sum(int(x[i]) for x in found) for i in (0, 1))
    return {"requests": len(found), "drafted": drafted, "accepted": accepted}


def trim_log(log: Path, head: int = 200, tail: int = 50) -> None:
    """Keep a server log's start (its flags, the model it loaded) and end; at verbosity 3 a run of 8,000 requests
    logs megabytes (what the rows need is counted by _draft_counts first)."""
    if not log.exists():
        return
    lines = log.read_text(errors="replace").splitlines(keepends=True)
    if len(lines) > head + tail:
        log.write_text("".join(lines[:head]) + f"[... {len(lines) - head - tail:,} lines cut ...]\n"
                       + "".join(lines[-tail:]))


def _engine_check(config):
    """`run_engine_check` (one place, so a test can stand in for the engine)."""
    from harness.served.check import run_engine_check

    return run_engine_check(config)


def _engine_verify(url: str, target: Path, setting: str, samples: int) -> dict:
    from harness.check.settings import parse_setting
    from harness.served.config import EngineConfig
    from harness.served.llama_server import NO_TRUNCATION

    greedy = setting == "T=0"
    from suites.catalogues.architectures import PROMPTS

    prompts = tuple(" ".join(f"t{i}" for i in p) for p in PROMPTS)  # the pair's own prompts, as words
    config = EngineConfig(endpoint=url, target=str(target), api="llama-server", settings=tuple(parse_setting(setting)),
                          samples=samples, length=ENGINE_GREEDY_LENGTH if greedy else None, prompts=len(prompts),
                          prompt_texts=prompts, checks=("tokens",), contexts="none", stop_on_fail=False,
                          extra_body=None if greedy else NO_TRUNCATION, timeout_s=600.0)
    started = time.perf_counter()
    try:
        report = _engine_check(config)
    except Exception as exc:  # noqa: BLE001 - recorded: the check could not be done against this server
        from harness.errors import describe_fault

        return {"setting": setting, "verdict": "error", "message": describe_fault(exc)[:400],
                "seconds": time.perf_counter() - started}
    return {"setting": setting, "verdict": report.verdict, "samples": report.samples,
            "detectable_tv": report.detectable_tv, "seconds": report.seconds,
            "message": " / ".join(report.failure_summary())[:600]}


def engine_cell(pair_name: str, side: str, samples: int, out: Path) -> dict:
    """One llama-server (speculation `side`) on the pair: its greedy repeats and its checks at T = 0 and T = 1."""
    import tempfile

    binary = _engine_binary()
    logs = out / "engine"
    logs.mkdir(parents=True, exist_ok=True)
    row = {"part": "engine", "pair": pair_name, "side": side, "samples_requested": samples,
           "engine": _engine_version(binary)}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specdec-arch-engine-") as work:
        try:
            with open(logs / f"{pair_name}-{side}-convert.log", "w") as log:
                models = _engine_models(pair_name, Path(work), log)
        except Exception as exc:  # noqa: BLE001 - the converter's failure is a finding about the engine
            from harness.errors import describe_fault

            return {**row, "verdict": "error", "message": f"conversion: {describe_fault(exc)}"[:400],
                    "seconds": time.perf_counter() - started}
        try:
            with _engine_server(binary, models["target"], models["draft"] if side == "draft" else None,
                                logs / f"{pair_name}-{side}.log") as url:
                row["greedy_repeats"] = _engine_greedy(url, GREEDY_PROMPT)
                row["checks"] = [_engine_verify(url, models["target_hf"], setting, samples)
                                 for setting in ("T=0", "T=1")]
        except Exception as exc:  # noqa: BLE001 - a server that does not start or answer: recorded as such
            from harness.errors import describe_fault

            return {**row, "verdict": "error", "message": f"server: {describe_fault(exc)}"[:400],
                    "seconds": time.perf_counter() - started}
    row["drafts"] = _draft_counts(logs / f"{pair_name}-{side}.log")
    trim_log(logs / f"{pair_name}-{side}.log")
    verdicts = [c["verdict"] for c in row["checks"]]
    verdict = next((v for v in ("error", "fail", "inconclusive") if v in verdicts), "pass")
    return {**row, "verdict": verdict, "seconds": time.perf_counter() - started}


def _plan(samples: int | None, budget: float | None, settings: list[str] | None, contexts: str | None) -> str:
    return json.dumps([samples, budget, settings, contexts])


def cell_key(part: str, pair: str, *, name: str = "", seed: int | None = None, samples: int | None = None,
             budget: float | None = None, settings: list[str] | None = None, contexts: str | None = None) -> str:
    """What identifies a run in the journal: its part, pair, entry, seed and (reference, transformers) plan."""
    if part == "shape":
        return f"shape/{pair}"
    if part == "mutants":  # at the default plan (the first runs) no plan in the key; any other plan named
        default = samples is None and budget is None and settings is None and contexts is None
        return f"mutants/{name}/{pair}/{seed}" + ("" if default else f"/{_plan(samples, budget, settings, contexts)}")
    if part == "reference":
        return f"reference/{pair}/{seed}/{_plan(samples, budget, settings, contexts)}"
    if part == "engine":
        return f"engine/{pair}/{name}/{samples}"
    return f"transformers/{pair}/{name}/{_plan(samples, budget, settings, contexts)}"


def _mutants(pairs, names=None) -> list:
    from harness.mutants.registry import implementations

    return [impl for impl in implementations(kind="mutant", contract="generation")
            if impl.spec.startswith("harness.mutants.architectures:") and impl.pair in pairs
            and (not names or impl.name in names)]


def run_cell(part: str, pair: str, name: str, seed: int, samples: int | None, budget: float | None,
             settings: list[str] | None, contexts: str | None) -> dict:
    """One run of a part, as a row with the versions and the time it finished."""
    if part == "shape":
        row = shape(pair)
    elif part == "engine":
        row = engine_cell(pair, name, samples, Path(contexts))  # contexts: here the output folder (cells())
    elif part == "mutants":
        from harness.mutants.registry import get

        row = {"part": "mutants", "name": name, **_verify(get(name).spec, pair, seed=seed, samples=samples,
                                                            time_budget=budget, settings=settings, contexts=contexts)}
    else:
        impl = REFERENCE if part == "reference" else name
        row = {"part": part, **_verify(impl, pair, seed=seed, samples=samples, time_budget=budget, settings=settings,
                                       contexts=contexts)}
    row = {**row, "versions": _versions(), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(json.dumps({k: row.get(k) for k in ("part", "name", "impl", "pair", "seed", "verdict", "seconds",
                                              "detectable_tv", "acceptance_per_position", "entropy_nats")},
                     default=str), flush=True)
    return json.loads(json.dumps(row, default=str))  # JSON-able as journaled (NaN stays NaN)


def _tv(row) -> str:
    return num(row.get("detectable_tv"), missing="-")


def _cell(rows: list[dict]) -> str:
    """The last run of each plan: "['T=0'], planned: FAIL (35 s, TV -): ...; ['T=1'], 300, contexts none: PASS ..."."""
    if not rows:
        return "not run"
    texts = []
    for key, last in {_plan_text(r): r for r in rows}.items():
        text = f"{key}: {last['verdict'].upper()} ({last['seconds']:.0f} s, TV {_tv(last)})"
        if last["verdict"] in ("fail", "error") and last.get("message"):
            text += f": {last['message'][:140]}"
        texts.append(text)
    return "; ".join(texts).replace("|", "/")


def family_rows(rows: list[dict]) -> list[list[str]]:
    """README's first table: per family its shape, the reference's runs and transformers' two entries."""
    out = []
    for name, (family, model_type, _config, _noise) in _pairs().items():
        mine = [r for r in rows if r.get("pair") == name]
        sh = [r for r in mine if r["part"] == "shape"]
        ref = list({(r["seed"], _plan_text(r)): r for r in mine if r["part"] == "reference"}.values())
        out.append([name, f"{family} ({model_type})",
                    f"{sh[-1]['acceptance_per_position']} / {sh[-1]['entropy_nats']}" if sh else "not measured",
                    (f"{len(ref)} runs, {sum(r['verdict'] == 'fail' for r in ref)} FAIL; " + _cell(ref)) if ref
                    else "not run",
                    *(_cell([r for r in mine if r["part"] == "transformers" and r["impl"] == impl])
                      for impl in TRANSFORMERS)])
    return out


def mutant_rows(rows: list[dict]) -> list[list[str]]:
    """The mutants at the default plan: the seeds FAILed (the last run per seed) and the median seconds."""
    default = [r for r in rows if r["part"] == "mutants" and r.get("settings", "default") == "default"]
    out = []
    for name in sorted({r["name"] for r in default}):
        mine = list({r["seed"]: r for r in default if r["name"] == name}.values())
        secs = sorted(r["seconds"] for r in mine)
        out.append([name, mine[-1]["pair"], rate(sum(r["verdict"] == "fail" for r in mine), len(mine), ci=False),
                    f"{secs[len(secs) // 2]:.0f}"])
    return out


def readme(rows: list[dict], out: Path, lead: tuple[str, ...] = ()) -> str:
    """OUT/README.md: `lead` (the header line and the command), one table row per family, then the mutants, the
    reference's false alarms, the engine part and OUT/notes.md."""
    versions = next((r["versions"] for r in reversed(rows) if r.get("versions")), {})
    lines = ["# Architectures: hybrid, recurrent and sliding-window models end to end (issue 44)", "", *lead,
             "Regenerated from journal.jsonl by `specdec campaign architectures` (suites/campaigns/architectures.py); "
             "every number below is a row there, with its seed, time and versions.", "",
             f"Versions: {', '.join(f'{k} {v}' for k, v in versions.items()) or 'see journal.jsonl'}; CPU, pure-PyTorch "
             "fallback kernels; models float32, ground truth float64 (MoE experts run eager so float64 works).", "",
             table(["pair", "family", "acceptance per position / entropy (nats of ln 48 = 3.87)",
                    "reference (stateful path)", "transformers assisted", "transformers prompt lookup"],
                   family_rows(rows)),
             "", "## Mutants (each must FAIL at the default plan)", "",
             table(["mutant", "pair", "seeds FAILed", "median s"], mutant_rows(rows))]
    other = other_plan_rows(rows)
    if other:
        lines += ["", "### Mutants at other plans (greedy cells off: what the sampling law catches alone)", "",
                  table(["mutant", "pair", "plan (settings, samples per cell, time budget)", "seeds FAILed",
                         "median family p (m · min p)", "median s", "median detectable TV"], other)]
    lines += _false_alarms(rows)
    lines += _engine_lines(rows)
    notes = out / "notes.md"  # the hand-written part: what the rows mean, what is missing and why
    if notes.exists():
        lines += ["", notes.read_text()]
    return "\n".join(lines)


@dataclasses.dataclass
class Config:
    parts: tuple[str, ...] = PARTS  # the runner's --parts
    pairs: list[str] | None = option(None, "--pairs", "arch-* pairs (default: all)", metavar="PAIR", nargs="+")
    seeds: int = option(1, "--seeds", "seeds per mutant and per reference run", int, "N")
    first_seed: int = option(0, "--first-seed", "seeds run: first-seed … first-seed + seeds − 1 (more seeds on top of "
                             "the journal's)", int, "S")
    mutants: list[str] | None = option(None, "--mutants", "only these mutants (default: every one)", metavar="NAME",
                                       nargs="+")
    samples: int | None = option(None, "--samples", "fixed plan for reference / transformers runs; engine: T = 1 "
                                "continuations per prompt (default ENGINE_SAMPLES)", int, "N")
    time_budget: float = option(300.0, "--time-budget", "seconds of sampling per reference / transformers run (the "
                                "achieved TV is reported); 0: none, the plan in full", float, "S")
    setting: list[str] | None = option(None, "--setting", "reference / transformers runs: only this sampling setting "
                                       "(as `specdec verify --setting`, repeatable), e.g. T=0 for greedy equality "
                                       "alone", metavar="SETTING", action="append")
    contexts: str | None = option(None, "--contexts", "reference / transformers / mutants runs: as `specdec verify "
                                  "--contexts` (none: the pair's prompts only)")
    threads: int = option(1, "--threads", "torch threads of this process (1: several runs sharing a few cores do not "
                          "oversubscribe them; a reference run at the cheap plan took 8 s with 1 thread and 47-62 s with "
                          "the default 2 on 2 shared cores, load 5-7)", int, "N")


def validate(config: Config) -> None:
    from harness.errors import HarnessError

    unknown = sorted(set(config.pairs or ()) - set(_pairs()))
    if unknown:
        raise HarnessError(f"unknown pair(s) {', '.join(unknown)}; known: {', '.join(_pairs())}")
    if config.seeds < 0 or config.first_seed < 0:
        raise HarnessError("--seeds and --first-seed must be >= 0")
    if config.threads < 1:
        raise HarnessError(f"--threads must be >= 1, got {config.threads}")
    if config.time_budget < 0:
        raise HarnessError(f"--time-budget must be >= 0 seconds, got {config.time_budget}")
    known = {impl.name for impl in _mutants(list(_pairs()))}
    if set(config.mutants or ()) - known:
        raise HarnessError(f"--mutants: not an architectures mutant: {', '.join(sorted(set(config.mutants) - known))}; "
                           f"known: {', '.join(sorted(known))}")


def cells(config: Config, out: Path) -> dict[str, tuple]:
    """In the order they run: the shapes, the mutants' seeds, the reference's seeds, the transformers runs, the
    engine's (their logs go under `out`, the output folder)."""
    pairs = config.pairs or list(_pairs())
    seeds = range(config.first_seed, config.first_seed + config.seeds)
    plan = (config.samples, config.time_budget or None, config.setting, config.contexts)
    found: dict[str, tuple] = {}
    if "shape" in config.parts:
        found.update({cell_key("shape", p): ("shape", p, "", 0, None, None, None, None) for p in pairs})
    if "mutants" in config.parts:
        for impl in _mutants(pairs, config.mutants):
            mplan = plan if (config.samples or config.setting or config.contexts) else (None, None, None, None)
            found.update({cell_key("mutants", impl.pair, name=impl.name, seed=s, samples=mplan[0], budget=mplan[1],
                                 settings=mplan[2], contexts=mplan[3]): ("mutants", impl.pair, impl.name, s, *mplan)
                        for s in seeds})
    if "reference" in config.parts:
        for p in pairs:
            found.update({cell_key("reference", p, seed=s, samples=plan[0], budget=plan[1], settings=plan[2],
                                 contexts=plan[3]): ("reference", p, "", s, *plan) for s in seeds})
    if "transformers" in config.parts:
        for p in pairs:
            found.update({cell_key("transformers", p, name=impl, samples=plan[0], budget=plan[1], settings=plan[2],
                                 contexts=plan[3]): ("transformers", p, impl, 0, *plan) for impl in TRANSFORMERS})
    if "engine" in config.parts:
        if _engine_binary() is None:
            print(f"engine: not run: {NO_LLAMA_SERVER}", flush=True)
        else:
            samples = config.samples or ENGINE_SAMPLES
            found.update({cell_key("engine", p, name=side, samples=samples):
                        ("engine", p, side, 0, samples, None, None, str(out))
                        for pair in pairs for p in _engine_labels(pair) for side in ENGINE_SIDES})
    return found


@contextlib.contextmanager
def session(config: Config):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def report(run) -> int:
    """OUT/campaign.json and OUT/README.md from every row of the journal; the exit code from this command's runs."""
    rows = list(run.journal.values())
    mine = list(run.done.values())
    bad_mutants = [r for r in mine if r["part"] == "mutants" and r.get("settings", "default") == "default"
                   and r["verdict"] != "fail"]  # at another plan (e.g. T > 0 alone) what catches a mutant is measured
    false_alarms = [r for r in mine if r["part"] == "reference" and r["verdict"] == "fail"]
    errors = [r for r in mine if r["part"] in ("mutants", "reference", "engine") and r["verdict"] == "error"]
    run.write_result("campaign.json", "campaign.architectures", rows=rows,
                     summary={"rows": len(rows), "this_command": {"runs": len(mine), "mutants_not_caught": len(
                         bad_mutants), "reference_failed": len(false_alarms), "errors": len(errors)},
                         "command": run.command})
    run.write_text("README.md", readme(rows, run.out, (header(run), "", rerun(run), "")))
    if errors:
        return 2
    return 1 if bad_mutants or false_alarms else 0


def false_alarm_rows(rows: list[dict]) -> list[list[str]]:
    """Every reference run is one trial of a false alarm (the reference is lossless): per family and plan, the
    runs (one per seed, the last), the FAILs at the gate with their Clopper–Pearson 95% interval, the runs whose
    family p-value m · min p is ≤ 0.05 (a nominal level where a few runs already say something), m and the per-test
    rate at Holm's first step; then each plan run on more than one family, pooled."""
    from harness.defaults import DEFAULT_FALSE_ALARM_RATE

    out = []
    pooled: dict[str, list[dict]] = {}
    for name in [*_pairs(), "all families"]:
        plans: dict[str, dict] = {}
        for r in rows:
            if r.get("part") == "reference" and r.get("pair") == name:
                plans.setdefault(_plan_text(r), {})[r["seed"]] = r
        if name == "all families":
            plans = {plan: dict(enumerate(runs)) for plan, runs in pooled.items()
                     if len({r["pair"] for r in runs}) > 1}
        for plan, by_seed in plans.items():
            runs = list(by_seed.values())
            if name != "all families":
                pooled.setdefault(plan, []).extend(runs)
            with_p = [r["family_p"] for r in runs if r.get("family_p") is not None]
            m = max((r.get("declared_tests") or 0) for r in runs)
            seeds = sorted(r["seed"] for r in runs)
            out.append([name, plan, f"{len(runs)} ({seeds[0]}–{seeds[-1]})",
                        rate(sum(r["verdict"] == "fail" for r in runs), len(runs)),
                        rate(sum(p <= 0.05 for p in with_p), len(with_p), ci=False), str(m or "-"),
                        f"{DEFAULT_FALSE_ALARM_RATE / m:.1e}" if m else "-"])
    return out


def _false_alarms(rows: list[dict]) -> list[str]:
    from harness.defaults import DEFAULT_FALSE_ALARM_RATE

    return ["", "## Reference false alarms (each reference run is one trial; the reference is lossless)", "",
            f"Gate: family-wise {DEFAULT_FALSE_ALARM_RATE:g} (Holm over the run's m gating tests: the first "
            "step rejects a test at p ≤ gate / m).", "",
            table(["pair", "plan (settings, samples per cell, time budget)", "runs (seeds)", "FAIL at the gate (95% CI)",
                   "family p ≤ 0.05", "m (declared tests)", "per-test rate at Holm's first step"],
                  false_alarm_rows(rows))]


def _engine_text(row: dict | None) -> tuple[str, str, str]:
    """An engine row's cells: greedy (16 tokens), T = 1, the greedy repeats."""
    if row is None:
        return "not run", "not run", "-"
    if not row.get("checks"):
        return f"{row['verdict'].upper()}: {row.get('message', '')[:160]}".replace("|", "/"), "-", "-"
    texts = []
    for check in row["checks"]:
        text = f"{check['verdict'].upper()} ({check['seconds']:.0f} s" + (
            f", TV {check['detectable_tv']:.3g}" if check["setting"] != "T=0" and check.get("detectable_tv") else "") + ")"
        if check["verdict"] in ("fail", "error") and check.get("message"):
            text += f": {check['message'][:160]}"
        texts.append(text.replace("|", "/"))
    reps = row.get("greedy_repeats") or []
    same = len({json.dumps(r["tokens"]) for r in reps}) == 1
    drafts = [(r.get("draft_n"), r.get("draft_n_accepted")) for r in reps if r.get("draft_n")]
    rep = (f"{'one answer' if same else 'DIFFERENT answers'} ×{len(reps)}: {' '.join(map(str, reps[0]['tokens']))}"
           if reps else "-") + (f"; {drafts[0][1]} of {drafts[0][0]} drafts accepted" if drafts else "")
    counts = row.get("drafts")
    if counts:
        rep += (f" (over all {counts['requests']:,} requests: {counts['accepted']:,} of {counts['drafted']:,} drafted "
                "tokens accepted)")
    return texts[0], texts[1] if len(texts) > 1 else "-", rep


def engine_rows(rows: list[dict]) -> list[list[str]]:
    """The engine part's table: per pair and server (the last run of each), greedy equality, the T = 1 law, the
    greedy repeats and the seconds."""
    engine = {(r["pair"], r["side"]): r for r in rows if r.get("part") == "engine"}
    out = []
    for name, (family, *_rest) in _pairs().items():
        for label in _engine_labels(name):
            for side in ENGINE_SIDES:
                row = engine.get((label, side))
                if row is not None:
                    what = family if label == name else f"{family}; config as converted: {ENGINE_FAITHFUL[name][0]}"
                    out.append([label, what, "speculation off" if side == "off" else "draft model",
                                *_engine_text(row), f"{row['seconds']:.0f}"])
    return out


def _engine_lines(rows: list[dict]) -> list[str]:
    engine = [r for r in rows if r.get("part") == "engine"]
    if not engine and _engine_binary() is not None:
        return []
    lines = ["", "## An engine: llama.cpp's llama-server on the tiny pairs (`--parts engine`)", ""]
    if not engine:  # no binary here, and no row of an earlier run
        return [*lines, f"Not run here: {NO_LLAMA_SERVER}.", ""]
    last = engine[-1]
    lines += [f"llama-server `{last['engine']['version']}` ({last['engine']['llama.cpp']}); models converted by its "
              "vendored convert_hf_to_gguf.py (F32, WordPiece vocabulary t0 … t47: harness.models.gguf_convert); "
              "ground truth the local float64 transformers target; greedy: 16 tokens per prompt; T = 1: llama-server's "
              f"truncation off, 3 tokens, {last['samples_requested']:,} continuations per prompt; the pair's two "
              "prompts; speculation: `--spec-type draft-simple -md DRAFT --spec-draft-n-max 4`.", "",
              table(["pair", "family", "llama-server", "greedy (T=0)", "T=1", "the same greedy request ([1, 2, 3, 4], "
                     "12 tokens); drafts accepted", "s"], engine_rows(rows))]
    if any(name in ENGINE_FAITHFUL for name in _pairs()):
        lines += ["", f"`PAIR{FAITHFUL}`: the pair with the config fields llama.cpp's converter does not carry over set "
                  "to what it assumes, for llama-server and its ground truth alike (the same weights; "
                  "repro/conversion_mismatch.txt): only there does speculation off agree with transformers, so only "
                  "there do the draft-model rows speak of speculation."]
    return lines


def _plan_text(row: dict) -> str:
    return (f"{row.get('settings', 'default')}, {row.get('samples_requested') or 'planned'}"
            + (f", ≤ {row['time_budget_s']:.0f} s" if row.get("time_budget_s") else "")
            + (f", contexts {row['contexts']}" if row.get("contexts") else ""))


def other_plan_rows(rows: list[dict]) -> list[list[str]]:
    """The mutants at plans other than the default (e.g. `--setting T=1`, greedy off): which the sampling law
    catches on its own. Findings about the class, not gates. The last run per seed."""
    groups: dict[tuple, dict] = {}
    for r in rows:
        if r["part"] == "mutants" and r.get("settings", "default") != "default":
            groups.setdefault((r["name"], _plan_text(r)), {})[r["seed"]] = r

    def median(values):
        values = sorted(v for v in values if v is not None and v == v)
        return values[len(values) // 2] if values else None

    return [[name, mine[-1]["pair"], plan, rate(sum(r["verdict"] == "fail" for r in mine), len(mine), ci=False),
             num(median(r.get("family_p") for r in mine), ".2g", "-"), f"{median(r['seconds'] for r in mine):.0f}",
             num(median(r.get("detectable_tv") for r in mine), ".3g", "-")]
            for (name, plan), mine in ((k, list(v.values())) for k, v in sorted(groups.items()))]
