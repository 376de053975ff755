"""Command line: `specdec` (also `python -m harness`). Only this module prints.

Exit codes (shared/CONTRACT.md §2): 0 success / all tests pass, 1 a test rejects losslessness
(or a mutant escaped), 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import sys

from harness.errors import HarnessError
from specdec_ref.errors import SpecDecInputError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _cmd_pairs(args) -> int:
    from harness.pairs import list_pairs

    rows = list_pairs()
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        status = "available" if r["available"] else f"not available: {r['note']}"
        print(f"{r['name']:<{width}}  {status:<12}  {r['description']}")
    print("\nBring your own pair: --target NAME_OR_PATH --draft NAME_OR_PATH (any two causal LMs, same tokenizer)")
    return EXIT_OK


def _progress_bar(total: int | None, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="rows", file=sys.stderr, dynamic_ncols=True,
                disable=not sys.stderr.isatty() and total is None)


def _fmt(x, spec=".3g") -> str:
    return "-" if x is None else format(x, spec)


def print_check_report(report, verbose: bool = False) -> None:
    rejected = [t for t in report.tests if t.reject]
    print(f"\n{report.level}-level losslessness check of {report.impl}")
    for note in report.notes:
        print(f"  note: {note}")
    if report.level == "sampler":
        print(f"\n  {'case':<26} {'γ':>2} {'V':>6} {'rows':>8}  acceptance measured/optimal per position")
        for c in report.cases:
            acc = " ".join(f"{a['measured']:.3f}/{a['optimal']:.3f}" for a in c.get("acceptance", []))
            flag = "  WASTEFUL (lossless, below optimal)" if c.get("wasteful") else ""
            print(f"  {c['name']:<26} {c['gamma']:>2} {c['vocab']:>6} {c['rows']:>8}  {acc}{flag}")
    shown = report.tests if verbose else rejected
    if shown:
        print(f"\n  {'test':<52} {'statistic':>10} {'p-value':>9} {'Holm p':>9} {'decision':>8} {'detect TV':>9}")
        for t in shown:
            print(f"  {t.name:<52} {_fmt(t.statistic, '.4g'):>10} {_fmt(t.p_value, '.2e'):>9} "
                  f"{_fmt(t.details.get('p_holm'), '.2e'):>9} {'REJECT' if t.reject else 'pass':>8} "
                  f"{_fmt(t.detectable_tv):>9}")
            if t.reject and t.details.get("message"):
                print(f"      {t.details['message']}")
    for a in report.advisories:
        if a.p_value < 1e-3 or a.details.get("kind"):
            print(f"  advisory: {a.name}: {a.details.get('message') or f'p = {a.p_value:.2e}'}")
    print(f"\n  {len(report.tests)} tests, {report.samples} samples, {report.seconds:.1f} s; family-wise "
          f"false-alarm rate {report.false_alarm_rate:g}; detectable TV ≤ {_fmt(report.detectable_tv)} at power "
          f"{report.power:g} (per tested position)")
    print(f"  verdict: {report.verdict.upper()}" + (f" ({len(rejected)} tests reject losslessness)" if rejected else ""))


def _cmd_verify(args) -> int:
    if args.level == "engine":  # engine level (harness/engine): a served engine over HTTP, no --impl
        from harness.engine.cli import run_verify as run_engine_verify

        return run_engine_verify(args, print_check_report, _progress_bar)
    if not args.impl:
        raise HarnessError("--impl MODULE:CALLABLE is required (except with --level engine)")
    from harness.check.api import VerifyConfig, planned_rows, resolve, run_verify
    from harness.records import atomic_write_json

    config = VerifyConfig(impl=args.impl, level=args.level, pair=args.pair, target=args.target, draft=args.draft,
                          alpha=args.alpha, tv=args.tv, power=args.power, seed=args.seed, samples=args.samples,
                          cases=args.cases, gamma=args.gamma, device=args.device, dtype=args.dtype,
                          time_budget_s=args.time_budget)
    for name, value, ok in [("--alpha", args.alpha, 0 < args.alpha < 1), ("--tv", args.tv, 0 < args.tv < 1),
                            ("--power", args.power, 0 < args.power < 1)]:
        if not ok:
            raise HarnessError(f"{name} must be in (0, 1), got {value}")
    resolve(config.impl, config.level)  # usage errors before any progress bar
    with _progress_bar(planned_rows(config), f"verify {args.level}") as bar:
        report = run_verify(config, progress=bar.update)
    print_check_report(report, verbose=args.verbose)
    if args.json:
        atomic_write_json(args.json, report.to_dict())
        print(f"  report written to {args.json}")
    return EXIT_OK if report.verdict == "pass" else EXIT_FAIL


def _cmd_mutants(args) -> int:
    from harness.campaign import CampaignConfig, run_campaign, write_report

    chosen = {k: v for k, v in (("seeds", args.seeds), ("control_seeds", args.control_seeds)) if v is not None}
    make = CampaignConfig.quick if args.quick else CampaignConfig
    config = make(gate_alpha=args.alpha, only=tuple(args.only or ()), **chosen)
    if config.seeds < 1 or config.control_seeds < 1:
        raise HarnessError("--seeds and --control-seeds must be >= 1")
    if config.only:
        from harness.mutants.registry import get

        for name in config.only:
            get(name)  # unknown names: "Did you mean ...?"
    from tqdm import tqdm

    with tqdm(desc="mutant zoo", unit="runs", file=sys.stderr, dynamic_ncols=True) as bar:
        def progress(done, total):
            bar.total = total
            bar.update(done - bar.n)

        result = run_campaign(config, progress=progress)
    summary = write_report(result, args.out)
    for r in result["rows"]:
        print(f"  {r['name']:<34} {r['level']:<10} {r['kind']:<10} rate at gate {100 * r['rate_at_gate']:5.1f}% "
              f"({r['runs']} runs)")
    print(f"\n  report: {summary['out']}/report.md")
    for problem in summary["problems"]:
        print(f"  PROBLEM: {problem}")
    print(f"  overall: {'PASS' if summary['ok'] else 'FAIL'}")
    return EXIT_OK if summary["ok"] else EXIT_FAIL


def _cmd_numerics(args) -> int:
    import torch

    from harness.check.api import load_pair, resolve
    from harness.check.numerics import NumericsConfig, run_numerics, write_numerics_report
    from harness.models.hf_pair import resolve_dtype

    fn = resolve(args.impl, "generation")
    low_dtype = resolve_dtype(args.dtype, device=args.device)
    if low_dtype not in (torch.bfloat16, torch.float16):
        raise HarnessError(f"--dtype must be a low precision (bfloat16 or float16), got {args.dtype!r}")
    config = NumericsConfig(prompts=args.prompts, max_new_tokens=args.max_new_tokens, gamma=args.gamma, seed=args.seed)
    if config.prompts < 1 or config.max_new_tokens < 1 or config.gamma < 1:
        raise HarnessError("--prompts, --max-new-tokens and --gamma must be >= 1")
    full = load_pair(args.pair, args.target, args.draft, device=args.device, dtype="float32")
    low = load_pair(args.pair, args.target, args.draft, device=args.device, dtype=low_dtype)
    prompts = (full.prompts or [[0]])[: config.prompts]
    with _progress_bar(len(prompts), "numerics") as bar:
        result = run_numerics(fn, low, full, prompts, config, progress=bar.update)
    name = args.pair if not args.target else f"{args.target} + {args.draft}"
    write_numerics_report(result, args.out, impl_name=args.impl, pair_name=name)
    s = result["summary"]
    print(f"greedy numerics of {args.impl} on {name}: {s['low_dtype']} identical {s['low_equal']}/{s['prompts']} "
          f"(divergences {s['low_divergences'] or 'none'}), float32 identical {s['full_equal']}/{s['prompts']}, "
          f"target {s['low_dtype']} vs float32 identical {s['floor_equal']}/{s['prompts']}")
    for problem in s["problems"]:
        print(f"  PROBLEM: {problem}")
    print(f"  verdict: {s['verdict'].upper()}; report: {args.out}/report.md")
    return EXIT_OK if s["verdict"] == "pass" else EXIT_FAIL


def _cmd_demo(args) -> int:
    from harness.demo import choose_pair, run_demo

    pair, reason = choose_pair()
    print(f"specdec demo: using {reason}", flush=True)
    with _progress_bar(None, "demo") as bar:
        result = run_demo(args.out, quick=args.quick, progress=bar.update)
    print_check_report(result.sampler)
    print_check_report(result.generation)
    from harness.bench.cli import summary_lines

    print("\nspeedup (reference, next to the Leviathan prediction and transformers assisted generation):")
    for line in summary_lines(result.bench.rows):
        print("  " + line)
    print(f"\ndemo report: {result.out / 'report.md'}")
    return EXIT_OK if result.ok else EXIT_FAIL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pairs", help="list registered model pairs and whether each is available here")
    p.set_defaults(func=_cmd_pairs)

    p = sub.add_parser("verify", help="statistical losslessness check of one implementation",
                       description="Exit 0: every test passes; 1: a test rejects losslessness; 2: bad usage/input.")
    p.add_argument("--impl", help="MODULE:CALLABLE, e.g. specdec_ref.adapters:verify (not with --level engine)")
    p.add_argument("--level", choices=["sampler", "generation", "engine"], default="sampler",
                   help="sampler: one verification step (CONTRACT §1a); generation: whole generate() (§1b); "
                   "engine: a served engine over its OpenAI-compatible API (--endpoint)")
    p.add_argument("--pair", default="toy", help="generation level: model pair (see `specdec pairs`)")
    p.add_argument("--target", help="generation level: target checkpoint (hub id or local path), with --draft")
    p.add_argument("--draft", help="generation level: draft checkpoint, with --target")
    p.add_argument("--alpha", type=float, default=1e-3,
                   help="suite false-alarm rate: a correct implementation fails with probability <= this")
    p.add_argument("--tv", type=float, default=0.02,
                   help="sampler level: smallest total variation to detect at --power at every tested position")
    p.add_argument("--power", type=float, default=0.99)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samples", type=int, help="override the planned trials (per case / per prompt and setting)")
    p.add_argument("--cases", nargs="+", help="sampler level: run only these configurations")
    p.add_argument("--gamma", type=int, default=3, help="generation level: drafted tokens per step")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", help="generation level: model dtype, e.g. bfloat16 (default float32 on CPU); "
                   "greedy divergences are then classified against that dtype's rounding")
    p.add_argument("--time-budget", type=float, help="generation level: stop sampling after this many seconds")
    p.add_argument("--json", help="write the machine-readable report here")
    p.add_argument("-v", "--verbose", action="store_true", help="print every test, not only rejections")
    p.set_defaults(func=_cmd_verify)
    from harness.engine import cli as engine_cli  # engine level: serve / probe subcommands, verify flags

    engine_cli.add_verify_arguments(p)
    p = sub.add_parser("serve", help="OpenAI-compatible server around a generation-level implementation",
                       description="Serves MODULE:CALLABLE on a pair at http://127.0.0.1:PORT/v1 until stopped.")
    engine_cli.add_serve_arguments(p)
    p.set_defaults(func=engine_cli.run_serve)
    p = sub.add_parser("probe", help="what an OpenAI-compatible server returns; which ground truth it allows")
    engine_cli.add_probe_arguments(p)
    p.set_defaults(func=engine_cli.run_probe)

    from harness.bench.cli import add_arguments as add_bench_arguments
    from harness.bench.cli import run as run_bench

    p = sub.add_parser("bench", help="speedup sweep -> tables, plots, report (results/bench)",
                       description="Speedup sweeps over pairs x gamma x temperature next to the Leviathan prediction.")
    add_bench_arguments(p)
    p.set_defaults(func=run_bench)

    p = sub.add_parser("demo", help="the main job end to end on the embedded default pair -> results/demo")
    p.add_argument("--out", default="results/demo")
    p.add_argument("--quick", action="store_true", help="smaller samples (a minute or two)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("numerics", help="greedy with vs without speculation in bfloat16: divergences classified",
                       description="Greedy output of an implementation in low precision vs the target alone, with "
                       "each first divergence classified as numerics (near-tie within rounding) or logic (a bug). "
                       "Exit 0 if no divergence is logic.")
    p.add_argument("--impl", default="specdec_ref.adapters:generate", help="MODULE:CALLABLE (generation level)")
    p.add_argument("--pair", default="smollm2", help="registered pair (see `specdec pairs`)")
    p.add_argument("--target", help="target checkpoint (hub id or local path), with --draft")
    p.add_argument("--draft", help="draft checkpoint, with --target")
    p.add_argument("--dtype", default="bfloat16", help="the low precision to examine (bfloat16 or float16)")
    p.add_argument("--prompts", type=int, default=20)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default="results/numerics")
    p.set_defaults(func=_cmd_numerics)

    p = sub.add_parser("mutants", help="run the mutant zoo and correct controls; detection / false-alarm report",
                       description="Exit 0 if every mutant is caught (>= 95% of seeds) and every control passes.")
    p.add_argument("--seeds", type=int, help="seeds per mutant (detection rate); default 20 (quick: 8)")
    p.add_argument("--control-seeds", type=int,
                   help="seeds per correct control (false-alarm rate); default 200 (quick: 20)")
    p.add_argument("--quick", action="store_true",
                   help="the CI profile of `nox -s lossless`: fewer seeds, no detection-vs-samples curve (minutes)")
    p.add_argument("--alpha", type=float, default=1e-3, help="gate: family-wise false-alarm rate")
    p.add_argument("--only", nargs="+", help="run only these implementations")
    p.add_argument("--out", default="results/lossless")
    p.set_defaults(func=_cmd_mutants)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (HarnessError, SpecDecInputError) as exc:
        print(f"specdec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("specdec: interrupted (results written so far are kept)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
