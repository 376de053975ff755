"""The architectures campaign (issue 44): hybrid, recurrent and sliding-window models end to end, on the tiny
offline pairs of suites/catalogues/architectures.py (one per cache family).

    specdec campaign architectures [--only shape mutants reference transformers] [--pairs arch-ssm ...]
                                   [--seeds 1] [--time-budget 300] [--samples N] [--out results/findings/architectures]

Every run is a cell of the campaign runner (harness.runner), one row journaled in OUT/journal.jsonl (a rerun resumes:
a run already journaled is not run again; --first-seed / --seeds add seeds on top). The report covers every row of
the journal, whichever command ran it: OUT/campaign.json (the rows, a result envelope) and OUT/README.md's tables.
Parts (--only):
- shape: per pair, the draft's acceptance per position and the target's entropy (the reference's own counters,
  T = 1, γ = 3);
- mutants: every mutant of harness.mutants.architectures at the default plan of `specdec verify --level generation`
  on its pair, `--seeds` seeds (each must FAIL);
- reference: the reference with the stateful path forced (harness.mutants.generation:reference_kv_cache) on every
  pair, `--seeds` seeds (each must not FAIL); `--samples N` for a fixed plan instead of the default;
- transformers: `harness.adapters.hf:assisted_generate` and `:prompt_lookup_generate` on every pair: greedy
  equality and the sampling law, within `--time-budget` seconds of sampling per run (a crash is a finding: FAIL,
  exit 1, the exception named).
Each row carries the verdict, seconds, detectable TV, seed and versions. Exit (over this command's runs): 0 when
every mutant FAILed and the reference never did, 1 otherwise, 2 when a run could not be done (a harness fault);
transformers' verdicts are findings, not gates.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from harness.configs import option

PARTS = ("shape", "mutants", "reference", "transformers")
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
            "family_p": family_p(report),  # m · min p (Holm's first step): a false alarm at level a iff ≤ a
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


def _plan(samples: int | None, budget: float | None, settings: list[str] | None, contexts: str | None) -> str:
    return json.dumps([samples, budget, settings, contexts])


def cell_key(part: str, pair: str, *, name: str = "", seed: int | None = None, samples: int | None = None,
             budget: float | None = None, settings: list[str] | None = None, contexts: str | None = None) -> str:
    """What identifies a run in the journal: its part, pair, entry, seed and (reference, transformers) plan."""
    if part == "shape":
        return f"shape/{pair}"
    if part == "mutants":
        return f"mutants/{name}/{pair}/{seed}"
    if part == "reference":
        return f"reference/{pair}/{seed}/{_plan(samples, budget, settings, contexts)}"
    return f"transformers/{pair}/{name}/{_plan(samples, budget, settings, contexts)}"


def _mutants(pairs, names=None) -> list:
    from harness.mutants.registry import implementations

    return [impl for impl in implementations(kind="mutant", level="generation")
            if impl.spec.startswith("harness.mutants.architectures:") and impl.pair in pairs
            and (not names or impl.name in names)]


def run_cell(part: str, pair: str, name: str, seed: int, samples: int | None, budget: float | None,
             settings: list[str] | None, contexts: str | None) -> dict:
    """One run of a part, as a row with the versions and the time it finished."""
    if part == "shape":
        row = shape(pair)
    elif part == "mutants":
        from harness.mutants.registry import get

        row = {"part": "mutants", "name": name, **_verify(get(name).spec, pair, seed=seed, samples=None,
                                                            time_budget=None)}
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
    tv = row.get("detectable_tv")
    return "-" if tv is None or tv != tv else f"{tv:.3g}"


def _cell(rows: list[dict]) -> str:
    """The last run of each setting: 'greedy (T=0): FAIL (35 s, TV -): ...; T=1: PASS ...'."""
    if not rows:
        return "not run"
    texts = []
    for key, last in {str(r.get("settings", "default")): r for r in rows}.items():
        text = f"{key}: {last['verdict'].upper()} ({last['seconds']:.0f} s, TV {_tv(last)})"
        if last["verdict"] in ("fail", "error") and last.get("message"):
            text += f": {last['message'][:140]}"
        texts.append(text)
    return "; ".join(texts).replace("|", "/")


def readme(rows: list[dict], out: Path) -> str:
    """OUT/README.md: one table row per family, then the mutants and the rerun command."""
    families = _pairs()
    versions = next((r["versions"] for r in reversed(rows) if r.get("versions")), {})
    lines = ["# Architectures: hybrid, recurrent and sliding-window models end to end (issue 44)", "",
             "Regenerated from journal.jsonl by `specdec campaign architectures` (suites/campaigns/architectures.py); "
             "every number below is a row there, with its seed, time and versions.", "",
             f"Versions: {', '.join(f'{k} {v}' for k, v in versions.items()) or 'see journal.jsonl'}; CPU, pure-PyTorch "
             "fallback kernels; models float32, ground truth float64 (MoE experts run eager so float64 works).", "",
             "| pair | family | acceptance per position / entropy (nats of ln 48 = 3.87) | reference (stateful path) "
             "| transformers assisted | transformers prompt lookup |", "|---|---|---|---|---|---|"]
    for name, (family, model_type, _config, _noise) in families.items():
        mine = [r for r in rows if r.get("pair") == name]
        sh = [r for r in mine if r["part"] == "shape"]
        shape_text = (f"{sh[-1]['acceptance_per_position']} / {sh[-1]['entropy_nats']}" if sh else "not measured")
        ref = list({r["seed"]: r for r in mine if r["part"] == "reference"}.values())
        ref_text = (f"{len(ref)} runs, {sum(r['verdict'] == 'fail' for r in ref)} FAIL; " + _cell(ref)) if ref else "not run"
        cells = [_cell([r for r in mine if r["part"] == "transformers" and r["impl"] == impl]) for impl in TRANSFORMERS]
        lines.append(f"| {name} | {family} ({model_type}) | {shape_text} | {ref_text} | {cells[0]} | {cells[1]} |")
    lines += ["", "## Mutants (each must FAIL at the default plan)", "", "| mutant | pair | seeds FAILed | median s |",
              "|---|---|---|---|"]
    for name in sorted({r["name"] for r in rows if r["part"] == "mutants"}):
        mine = list({r["seed"]: r for r in rows if r["part"] == "mutants" and r["name"] == name}.values())  # last per seed
        secs = sorted(r["seconds"] for r in mine)
        lines.append(f"| {name} | {mine[-1]['pair']} | {sum(r['verdict'] == 'fail' for r in mine)}/{len(mine)} "
                     f"| {secs[len(secs) // 2]:.0f} |")
    lines += _false_alarms(rows, families)
    lines += ["", "## Rerun", "", "```", f"specdec campaign architectures --out {out}", "```", ""]
    notes = out / "notes.md"  # the hand-written part: what the rows mean, what is missing and why
    if notes.exists():
        lines += [notes.read_text()]
    return "\n".join(lines)


@dataclasses.dataclass
class Config:
    only: list[str] = option(list(PARTS), "--only", "the parts to run", choices=PARTS, nargs="+")
    pairs: list[str] | None = option(None, "--pairs", "arch-* pairs (default: all)", metavar="PAIR", nargs="+")
    seeds: int = option(1, "--seeds", "seeds per mutant and per reference run", int, "N")
    first_seed: int = option(0, "--first-seed", "seeds run: first-seed … first-seed + seeds − 1 (more seeds on top of "
                             "the journal's)", int, "S")
    mutants: list[str] | None = option(None, "--mutants", "only these mutants (default: every one)", metavar="NAME",
                                       nargs="+")
    samples: int | None = option(None, "--samples", "fixed plan for reference / transformers runs", int, "N")
    time_budget: float = option(300.0, "--time-budget", "seconds of sampling per reference / transformers run (the "
                                "achieved TV is reported); 0: none, the plan in full", float, "S")
    setting: list[str] | None = option(None, "--setting", "reference / transformers runs: only this sampling setting "
                                       "(as `specdec verify --setting`, repeatable), e.g. T=0 for greedy equality "
                                       "alone", metavar="SETTING", action="append")
    contexts: str | None = option(None, "--contexts", "reference / transformers runs: as `specdec verify --contexts` "
                                  "(none: the pair's prompts only)")


def validate(config: Config) -> None:
    from harness.errors import HarnessError

    unknown = sorted(set(config.pairs or ()) - set(_pairs()))
    if unknown:
        raise HarnessError(f"unknown pair(s) {', '.join(unknown)}; known: {', '.join(_pairs())}")
    if config.seeds < 0 or config.first_seed < 0:
        raise HarnessError("--seeds and --first-seed must be >= 0")
    if config.time_budget < 0:
        raise HarnessError(f"--time-budget must be >= 0 seconds, got {config.time_budget}")
    known = {impl.name for impl in _mutants(list(_pairs()))}
    if set(config.mutants or ()) - known:
        raise HarnessError(f"--mutants: not an architectures mutant: {', '.join(sorted(set(config.mutants) - known))}; "
                           f"known: {', '.join(sorted(known))}")


def cells(config: Config) -> dict[str, tuple]:
    """In the order they run: the shapes, the mutants' seeds, the reference's seeds, the transformers runs."""
    pairs = config.pairs or list(_pairs())
    seeds = range(config.first_seed, config.first_seed + config.seeds)
    plan = (config.samples, config.time_budget or None, config.setting, config.contexts)
    out: dict[str, tuple] = {}
    if "shape" in config.only:
        out.update({cell_key("shape", p): ("shape", p, "", 0, None, None, None, None) for p in pairs})
    if "mutants" in config.only:
        for impl in _mutants(pairs, config.mutants):
            out.update({cell_key("mutants", impl.pair, name=impl.name, seed=s):
                        ("mutants", impl.pair, impl.name, s, None, None, None, None) for s in seeds})
    if "reference" in config.only:
        for p in pairs:
            out.update({cell_key("reference", p, seed=s, samples=plan[0], budget=plan[1], settings=plan[2],
                                 contexts=plan[3]): ("reference", p, "", s, *plan) for s in seeds})
    if "transformers" in config.only:
        for p in pairs:
            out.update({cell_key("transformers", p, name=impl, samples=plan[0], budget=plan[1], settings=plan[2],
                                 contexts=plan[3]): ("transformers", p, impl, 0, *plan) for impl in TRANSFORMERS})
    return out


def report(run) -> int:
    """OUT/campaign.json and OUT/README.md from every row of the journal; the exit code from this command's runs."""
    rows = list(run.journal.values())
    mine = list(run.done.values())
    bad_mutants = [r for r in mine if r["part"] == "mutants" and r["verdict"] != "fail"]
    false_alarms = [r for r in mine if r["part"] == "reference" and r["verdict"] == "fail"]
    errors = [r for r in mine if r["part"] in ("mutants", "reference") and r["verdict"] == "error"]
    run.write_result("campaign.json", "campaign.architectures", rows=rows,
                     summary={"rows": len(rows), "this_command": {"runs": len(mine), "mutants_not_caught": len(
                         bad_mutants), "reference_failed": len(false_alarms), "errors": len(errors)},
                         "command": run.command})
    run.write_text("README.md", readme(rows, run.out))
    if errors:
        return 2
    return 1 if bad_mutants or false_alarms else 0


def _false_alarms(rows: list[dict], families) -> list[str]:
    """Every reference run is one trial of a false alarm (the reference is lossless): per family and plan, the
    runs (one per seed, the last), the FAILs at the gate, their Clopper–Pearson 95% interval, and the runs whose
    family p-value m · min p is ≤ 0.05 (a nominal level where a few runs already say something)."""
    from harness.defaults import DEFAULT_FALSE_ALARM_RATE
    from harness.stats.rates import clopper_pearson

    lines = ["", "## Reference false alarms (each reference run is one trial; the reference is lossless)", "",
             f"Gate: family-wise {DEFAULT_FALSE_ALARM_RATE:g} (Holm over the run's m gating tests: the first "
             "step rejects a test at p ≤ gate / m).", "",
             "| pair | plan (settings, samples per cell, time budget) | runs (seeds) | FAIL at the gate (95% CI) "
             "| family p ≤ 0.05 | m (declared tests) | per-test level at Holm's first step |",
             "|---|---|---|---|---|---|---|"]
    pooled: dict[tuple, list[dict]] = {}
    for name in [*families, "all families"]:
        plans: dict[tuple, dict] = {}
        for r in rows:
            if r.get("part") == "reference" and r.get("pair") == name:
                plan = (str(r.get("settings", "default")), r.get("samples_requested"), r.get("time_budget_s"),
                        r.get("contexts"))
                plans.setdefault(plan, {})[r["seed"]] = r
        if name == "all families":  # every family's runs of a plan together (plans run on more than one family)
            plans = {plan: dict(enumerate(runs)) for plan, runs in pooled.items()
                     if len({r["pair"] for r in runs}) > 1}
        for (settings, samples, budget, contexts), by_seed in plans.items():
            runs = list(by_seed.values())
            if name != "all families":
                pooled.setdefault((settings, samples, budget, contexts), []).extend(runs)
            k = sum(r["verdict"] == "fail" for r in runs)
            low, high = clopper_pearson(k, len(runs))
            with_p = [r["family_p"] for r in runs if r.get("family_p") is not None]
            m = max((r.get("declared_tests") or 0) for r in runs)
            seeds = sorted(r["seed"] for r in runs)
            level = f"{DEFAULT_FALSE_ALARM_RATE / m:.1e}" if m else "-"
            plan = (f"{settings}, {samples or 'planned'}" + (f", ≤ {budget:.0f} s" if budget else "")
                    + (f", contexts {contexts}" if contexts else ""))
            lines.append(f"| {name} | {plan} | {len(runs)} ({seeds[0]}–{seeds[-1]}) "
                         f"| {k}/{len(runs)} ({low:.0%}–{high:.0%}) | {sum(p <= 0.05 for p in with_p)}/{len(with_p)} "
                         f"| {m or '-'} | {level} |")
    return lines
