"""Issue 18 campaign: structured outputs under speculation, on the toy pairs.

    specdec campaign structured --out results/structured \
        [--seeds 20 --control-seeds 200 --samples 1000 --budget-s 2400 --stop-at HH:MM]

1. `exact_tv.json`: TV between the exact output law of the reference (and of every structured mutant /
   control whose hooks are p/q only) and the constrained target law, float64 enumeration of 3 new tokens,
   γ = 3, per toy prompt and automaton.
2. `report.md` / `campaign.{csv,json}` (suites.campaigns.zoo): each mutant over `--seeds` seeds, both controls
   (the reference with the constraint, the mask on the target only) over 20 seeds; `reference/report.md`:
   the reference control in chunks of 20 more seeds until `--control-seeds`, `--budget-s` or `--stop-at`;
   each report states the seeds that ran (a journal keeps finished runs: a rerun resumes).
3. `step.json`: the sampler-level masked step (harness.check.structured_step) on harness-drawn automata:
   the reference `specdec_ref.adapters:verify_masked` over `--step-seeds` seeds, each step mutant over `--seeds`.
4. `transformers_assisted.json`: transformers assisted generation with the constraint as
   `prefix_allowed_tokens_fn` (harness.adapters.hf:assisted_generate), the generation-level check on the toy pair.
5. `smollm2.json`: the reference and transformers assisted generation on SmolLM2 under a JSON schema (PIT of
   the masked law, teacher-forced; `--real-samples` per prompt).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from harness.check.generation import Setting, continuation_law, run_generation_check, total_variation
from harness.check.structured import ConstraintSpec, bind_constraints
from harness.executor import Journal
from harness.models.toy_pairs import _prompts, _toy_models
from harness.mutants import get, implementations
from harness.mutants.generation import exact_output_law
from harness.mutants.structured import ALTERNATION, FORCED_EOS, FREE_THEN_CONSTRAINED
from harness.pairs import get_pair
from harness.records import atomic_write_json
from specdec_ref.generate import REFERENCE_HOOKS, default_eos, eos_set
from suites.campaigns.zoo import CampaignConfig, run_campaign, write_report

KINDS = {"toy": "0.7", "toy-eos": "eos"}  # registered pair -> its float64 toy models
CONTROLS = ("reference_constrained", "mask_target_not_draft")
REFERENCE_AUTOMATA = (  # (pair, setting): the reference's exact law under each
    ("toy", Setting(1.0, constraint=ConstraintSpec("regex", FREE_THEN_CONSTRAINED))),
    ("toy", Setting(0.8, top_p=0.95, constraint=ConstraintSpec("regex", ALTERNATION))),
    ("toy-eos", Setting(1.0, constraint=ConstraintSpec("regex", FORCED_EOS))),
)
CONTROL_CHUNK = 20
PARTS = ("exact", "transformers", "step", "zoo", "real", "reference")  # in the order they run; README.md always


def structured_names() -> list[str]:
    return [i.name for i in implementations(level="generation") if i.fn.__module__ == "harness.mutants.structured"]


def _tv(pair: str, setting, hooks, length: int = 3, gamma: int = 3) -> list[float]:
    target, draft = _toy_models(KINDS[pair], torch.float64)
    eos = eos_set(default_eos(target))
    (bound,) = bind_constraints((setting,), get_pair(pair), length)
    return [total_variation(exact_output_law(target, draft, p, length, gamma, bound, hooks, eos),
                            continuation_law(target, p, length, bound, target.config.vocab_size, eos))
            for p in _prompts()[:2]]


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


def real_pair_runs(samples: int, seed: int = 0) -> dict:
    """The reference and transformers assisted generation on SmolLM2 under a JSON schema (PIT of the masked law)."""
    from harness.adapters.hf import assisted_generate
    from specdec_ref.adapters import generate

    setting = Setting(1.0, constraint=ConstraintSpec("json_schema", REAL_SCHEMA))
    return {"reference": check_record(generate, "specdec_ref.adapters:generate", "smollm2", setting, samples, seed),
            "transformers": check_record(assisted_generate, "harness.adapters.hf:assisted_generate "
                                         "(prefix_allowed_tokens_fn)", "smollm2", setting, samples, seed)}


def step_campaign(control_seeds: int, seeds: int, gate: float = 1e-3) -> dict:
    from harness.check.structured_step import run_constrained_step_check
    from harness.mutants.structured import STEP_MUTANTS
    from specdec_ref.adapters import verify_masked

    out = {}
    for fn, n in ((verify_masked, control_seeds), *((m, seeds) for m in STEP_MUTANTS)):
        started = time.perf_counter()
        verdicts = [run_constrained_step_check(fn, seed=5000 + s, false_alarm_rate=gate,
                                               stop_on_fail=fn is not verify_masked).verdict for s in range(n)]
        out[fn.__name__] = {"kind": "control" if fn is verify_masked else "mutant", "seeds": n,
                            "fail": verdicts.count("fail"), "inconclusive": verdicts.count("inconclusive"),
                            "gate": gate, "seconds": time.perf_counter() - started}
    return out


def _load(path: Path):
    import json

    return json.loads(path.read_text()) if path.exists() else None


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a regex alternation inside a table cell


def readme(out: Path) -> str:
    """OUT/README.md from the records present in OUT (a part that did not run says so)."""
    lines = ["# Issue 18: structured outputs under speculation", "",
             "Produced by `specdec campaign structured --out results/structured` (suites/campaigns/structured.py; "
             "the parts and their options are in its docstring). Every number below is read from the records in "
             "this folder; a part that has no record did not run.", ""]
    tvs = _load(out / "exact_tv.json")
    lines += ["## Exact output laws (`exact_tv.json`)", ""]
    if tvs:
        lines += ["TV between the exact output law (3 new tokens, γ = 3, float64 enumeration of the batched loop with "
                  "its hooks) and the constrained target law, toy prompts 0 / 1.", "",
                  "| implementation | pair | setting | TV (prompt 0 / 1) |", "|---|---|---|---|"]
        for row in tvs["reference"]:
            lines.append(f"| reference | {row['pair']} | `{_cell(row['setting'])}` | "
                         + " / ".join(f"{t:.2g}" for t in row["tv_per_prompt"]) + " |")
        for name, row in tvs.items():
            if name != "reference":
                tv = row["tv_per_prompt"]
                lines.append(f"| `{name}` ({row['kind']}) | {row['pair']} | `{_cell(row['setting'])}` | "
                             + (" / ".join(f"{t:.3g}" for t in tv) if tv else row["note"]) + " |")
    else:
        lines.append("not run")
    lines += ["", "## Mutants and controls at the generation level (`report.md`, `campaign.{csv,json}`)", ""]
    zoo = _load(out / "campaign.json")
    if zoo:
        cfg = zoo["config"]
        lines += [f"{cfg['generation_samples']} samples per prompt × setting, gate {cfg.get('gate', cfg.get('gate_alpha'))}; "
                  "each entry on its own pair and constrained setting.", "",
                  "| entry | kind | failed / runs at the gate | 95% CI |", "|---|---|---|---|"]
        for row in zoo["rows"]:
            lines.append(f"| `{row['name']}` | {row['kind']} | {row['failed_runs']}/{row['runs']} | "
                         f"{100 * row['ci_gate_low']:.1f}–{100 * row['ci_gate_high']:.1f}% |")
    else:
        lines.append("not run")
    ref = _load(out / "reference" / "campaign.json")
    if ref:
        row = ref["rows"][0]
        lines += ["", f"Reference control over more seeds (`reference/report.md`): `{row['name']}` failed "
                  f"{row['failed_runs']}/{row['runs']} runs at the gate (95% CI {100 * row['ci_gate_low']:.1f}–"
                  f"{100 * row['ci_gate_high']:.1f}%)."]
    lines += ["", "## Sampler level: the masked step (`step.json`)", ""]
    step = _load(out / "step.json")
    if step:
        lines += ["| implementation | kind | failed / seeds |", "|---|---|---|"]
        lines += [f"| `{name}` | {row['kind']} | {row['fail']}/{row['seeds']} |" for name, row in step.items()]
    else:
        lines.append("not run")
    lines += ["", "## Third-party: transformers assisted generation with `prefix_allowed_tokens_fn`", ""]
    for name, label in (("transformers_assisted.json", "toy"), ("smollm2.json", "SmolLM2")):
        rec = _load(out / name)
        if rec is None:
            lines.append(f"- {label}: not run")
            continue
        for who, r in ({"transformers": rec} if label == "toy" else rec).items():
            lines.append(f"- {label}, {who} (`{r['setting']}`, {r['samples_per_prompt']} samples per prompt): "
                         f"**{r['verdict']}**, smallest p {r['min_p_value']:.3g}, outputs the constraint does not "
                         f"allow per prompt {r['constraint_violations']}, {r['seconds']:.0f} s")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/structured")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--control-seeds", type=int, default=200)
    ap.add_argument("--samples", type=int, default=1000, help="per prompt × setting")
    ap.add_argument("--budget-s", type=float, default=2400.0, help="stop adding reference seeds after this")
    ap.add_argument("--stop-at", default=None, metavar="HH:MM",
                    help="UTC wall time after which no further reference seeds (or SmolLM2 runs) start")
    ap.add_argument("--finding-samples", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--step-seeds", type=int, default=200)
    ap.add_argument("--real-samples", type=int, default=60, help="SmolLM2 runs (0: skip)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    known = (*PARTS, "readme")  # readme alone: only rewrite README.md from the records
    if parts - set(known):
        from harness.errors import HarnessError

        raise HarnessError(f"--parts: unknown {', '.join(sorted(parts - set(known)))}; known: {', '.join(known)}")
    torch.set_num_threads(1)
    started = time.monotonic()
    out = Path(args.out)

    def time_left() -> bool:
        if time.monotonic() - started > args.budget_s:
            return False
        if args.stop_at:
            now = time.strftime("%H:%M", time.gmtime())
            return now < args.stop_at
        return True

    tvs = exact_tvs() if "exact" in parts else {}
    if tvs:
        atomic_write_json(out / "exact_tv.json", tvs)
    journal = Journal(out / "journal.jsonl")
    names = tuple(structured_names())
    ok = True
    # 1. the third-party finding and the sampler-level step (short)
    if "transformers" in parts:
        finding = transformers_finding(args.finding_samples)
        atomic_write_json(out / "transformers_assisted.json", finding)
        print(f"transformers assisted generation + prefix_allowed_tokens_fn: {finding['verdict']} "
              f"(min p {finding['min_p_value']:.3g}, violations {finding['constraint_violations']})", flush=True)
    if "step" in parts:
        step = step_campaign(args.step_seeds, args.seeds)
        atomic_write_json(out / "step.json", step)
        for name, row in step.items():
            print(f"step {name:32s} {row['kind']:8s} fail {row['fail']}/{row['seeds']}", flush=True)
            ok &= (row["fail"] == 0) if row["kind"] == "control" else (row["fail"] == row["seeds"])
    # 2. every entry: mutants over --seeds, both controls over the first chunk of seeds -> OUT/report.md
    first = min(CONTROL_CHUNK, args.control_seeds)
    if "zoo" in parts:
        config = CampaignConfig(seeds=args.seeds, generation_control_seeds=first, generation_samples=args.samples,
                                only=names, curve_seeds=0, workers=args.workers)
        summary = write_report(run_campaign(config, journal=journal), out)
        ok &= summary["ok"]
        print(f"zoo ({args.seeds} seeds per mutant, {first} per control): "
              f"{'ok' if summary['ok'] else 'PROBLEMS: ' + '; '.join(summary['problems'])}", flush=True)
    # 3. the real pair
    if "real" in parts and args.real_samples and time_left():
        real = real_pair_runs(args.real_samples)
        atomic_write_json(out / "smollm2.json", real)
        for who, row in real.items():
            print(f"smollm2 {who}: {row['verdict']} (min p {row['min_p_value']:.3g}, violations "
                  f"{row['constraint_violations']}, {row['seconds']:.0f} s)", flush=True)
    # 4. the reference control, in chunks, until --control-seeds or the time is up -> OUT/reference/report.md
    seeds = first
    while "reference" in parts and seeds < args.control_seeds and time_left():
        seeds = min(args.control_seeds, seeds + CONTROL_CHUNK)
        config = CampaignConfig(seeds=args.seeds, generation_control_seeds=seeds, generation_samples=args.samples,
                                only=("reference_constrained",), curve_seeds=0, workers=args.workers)
        ref = write_report(run_campaign(config, journal=journal), out / "reference")
        ok &= ref["ok"]
        print(f"reference_constrained over {seeds} seeds: {'ok' if ref['ok'] else 'PROBLEMS: ' + '; '.join(ref['problems'])}",
              flush=True)
    from harness.records import atomic_write_text

    atomic_write_text(out / "README.md", readme(out))
    for name, row in tvs.items():
        if name != "reference":
            tv = row["tv_per_prompt"]
            print(f"{name:30s} {row['kind']:8s} exact TV {', '.join(f'{t:.3g}' for t in tv) if tv else row['note']}")
    for row in tvs.get("reference", []):
        print(f"reference {row['pair']:8s} {row['setting']:40s} exact TV {max(row['tv_per_prompt']):.3g}")
    return 0 if ok else 1
