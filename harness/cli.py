"""Command line: `specdec` (also `python -m specdec`).

Only this module prints (the first line above is `specdec --help`'s description).

Exit codes (docs/EXIT_CODES.md): 0 success / all tests pass; 1 the implementation under test is judged
not lossless (a test rejects, it returned malformed output, raised or hung) or a mutant escaped; 2 the
run itself could not be done (usage, input, unwritable outputs, unavailable device/dtype, environment).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from harness import preflight
from harness.adapters.calling import ImplementationError
from harness.configs import Parser
from harness.defaults import EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_USAGE
from harness.errors import HarnessError, describe_fault
from harness.policy import results_folder
from harness.progress import Progress
from specdec_ref.errors import SpecDecInputError


def _cmd_pairs(args) -> int:
    from harness.pairs import list_pairs

    rows = list_pairs()
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        status = "available" if r["available"] else f"not available: {r['note']}"
        print(f"{r['name']:<{width}}  {status:<12}  {r['description']}")
    print("\nBring your own pair: --target NAME_OR_PATH --draft NAME_OR_PATH (any two causal LMs, same tokenizer)")
    return EXIT_OK


def _cmd_engines(args) -> int:
    """`specdec engines`: every registered engine (harness.engines), its version, installed or why not, capabilities."""
    from harness.engines.registry import listing

    for r in listing():
        caps = r["capabilities"]
        state = "installed" if r["installed"] else f"not installed: {r['reason']}"
        if not r["runnable"]:
            state += f"; not run by the battery: {r['not_runnable_why']}"
        print(f"{r['name']} ({r['kind']}, {r['version'] or 'version unknown'}): {state}")
        print(f"    methods {', '.join(caps['methods']) or '-'}; speculation off {'yes' if caps['speculation_off'] else 'no'}"
              f"; levels {', '.join(caps['levels'])}; sampling {', '.join(caps['sampling'])}; returns "
              f"{', '.join(caps['returns'])}; seeds {'yes' if caps['seeds'] else 'no'}; n {'yes' if caps['n'] else 'no'}"
              f"; streams {'yes' if caps['streams'] else 'no'}")
        if caps["notes"]:
            print(f"    {caps['notes']}")
    print("\nRun the battery on one: specdec campaign engines --engine NAME (docs/ENGINES-INTERFACE.md)")
    return EXIT_OK


def _fmt(x, spec=".3g") -> str:
    return "-" if x is None else format(x, spec)


SHOWN_REJECTIONS = 8  # without -v: the failure summary, then this many rejected tests


STEP_LEVELS = ("sampler", "draft_step", "tree")  # report levels of one verification step (a --tv per position)


def plural(n: int, word: str, words: str | None = None) -> str:
    """"1 test", "2 tests" (the count and the word that agrees with it)."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"


def case_tv(report, case: str) -> float:
    """The achieved detectable TV of one sampler case: the report's headline rule applied to that case's tests."""
    return dataclasses.replace(report, tests=[t for t in report.tests if t.name.startswith(case + "/")]).detectable_tv


def tv_phrase(report) -> str:
    """The summary line's words for the achieved detectable TV, never "inf" (too few draws to promise any)."""
    tv = report.detectable_tv
    if math.isinf(tv):
        return f"no detectable TV at power {report.power:g}: too few samples for any test to detect a discrepancy"
    if math.isnan(tv):
        return "no test states a detectable TV"
    head = f"achieved detectable TV ≤ {tv:.3g} at power {report.power:g}"
    if report.level not in STEP_LEVELS:
        return f"{head} ({headline_scope(report)})"
    per_case = {c["name"]: case_tv(report, c["name"]) for c in report.cases} if report.level == "sampler" else {}
    if not per_case:
        return f"{head} {headline_scope(report)} (requested --tv {report.target_tv:g})"
    reached = sum(v <= report.target_tv * (1 + 1e-9) for v in per_case.values())
    worst = report.headline["test"].split("/", 1)[0] if report.headline["test"] else None
    where = f"the weakest case {worst}; " if worst and len(per_case) > 1 else ""
    return (f"{head} {headline_scope(report)} ({where}requested --tv {report.target_tv:g}, reached in "
            f"{reached} of {plural(len(per_case), 'case')}: per case in the table)")


def print_check_report(report, verbose: bool = False) -> None:
    """Verdict and where it fails first, then the per-case table and (with -v) every test."""
    rejected = [t for t in report.tests if t.reject]
    family = f", {report.family} family" if report.level == "sampler" and report.family != "chain" else ""
    print(f"\n{report.level}-level losslessness check of {report.impl}{family}")
    print(f"  verdict: {report.verdict_line()}"
          + (f" ({plural(len(rejected), 'test rejects', 'tests reject')} losslessness)" if rejected else ""))
    for line in report.failure_summary():
        print(f"    {line}")
    estimates = report.estimate_lines()
    if estimates:
        print("  how far from the target (bias-corrected TV, 95% interval; docs/ESTIMATES.md):")
        for line in estimates:
            print(f"    {line}")
    if report.verdict == "inconclusive":
        from harness.testing import inconclusive_line

        advice = ("more --samples, or none: the plan sets them" if math.isinf(report.detectable_tv) else
                  "more --samples, or --inconclusive-tv to accept it")
        print(f"    {inconclusive_line(report)} ({advice})")
    for note in report.notes:
        print(f"  note: {note}")
    if report.level == "sampler":
        print(f"\n  {'case':<26} {'γ':>2} {'V':>6} {'rows':>8} {'TV':>7}  acceptance measured/optimal per position"
              "  (TV: the case's achieved detectable TV)")
        for c in report.cases:
            acc = " ".join(f"{a['measured']:.3f}/{a['optimal']:.3f}" for a in c.get("acceptance", []))
            flag = "  WASTEFUL (lossless, below optimal)" if c.get("wasteful") and not rejected else ""
            tv = case_tv(report, c["name"])
            tv_text = "none" if math.isinf(tv) else _fmt(None if math.isnan(tv) else tv)
            print(f"  {c['name']:<26} {c['gamma']:>2} {c['vocab']:>6} {c.get('samples', 0):>8} {tv_text:>7}  "
                  f"{acc}{flag}")
    shown = report.tests if verbose else rejected[:SHOWN_REJECTIONS]
    if shown:
        print(f"\n  {'test':<52} {'statistic':>10} {'p-value':>9} {'Holm p':>9} {'decision':>8} {'detect TV':>9}")
        for t in shown:
            print(f"  {t.name:<52} {_fmt(t.statistic, '.4g'):>10} {_fmt(t.p_value, '.2e'):>9} "
                  f"{_fmt(t.details.get('p_holm'), '.2e'):>9} {'REJECT' if t.reject else 'pass':>8} "
                  f"{_fmt(t.detectable_tv):>9}")
            if t.reject and t.details.get("message"):
                print(f"      {t.details['message']}")
        if not verbose and len(rejected) > len(shown):
            print(f"  … {len(rejected) - len(shown)} more rejections (-v shows every test)")
    for a in report.advisories:
        if a.p_value < 1e-3 or a.details.get("kind"):
            print(f"  advisory: {a.name}: {a.details.get('message') or f'p = {a.p_value:.2e}'}")
    print(f"\n  {len(report.tests)} of {plural(report.declared_tests, 'declared gating test')}, "
          f"{plural(report.samples, 'sample')}, {report.seconds:.1f} s; family-wise false-alarm rate "
          f"{report.false_alarm_rate:g}; {tv_phrase(report)}")


def headline_scope(report) -> str:
    """The summary line's words for what the headline TV is: never "per tested position" for a pooled test."""
    scope = report.headline["scope"]
    if scope == "one law":
        if report.level == "tree":
            return "per tested node"
        return "per tested position" if report.level in STEP_LEVELS else "per tested law: one prompt's continuation"
    if scope == "pooled":
        return "pooled over contexts, binned PIT: not a per-position TV; see the notes"
    return "no test states a TV"



def _engine_progress(total, desc):
    return Progress(total, desc, unit="samples")


def _cmd_verify(args) -> int:
    if args.level == "engine":  # engine level (harness/served): a served engine over HTTP, no --impl
        from harness.served.cli import engine_report

        return _report_and_exit(engine_report(args, _engine_progress), args)
    from harness.check.api import contract_of, planned_rows, resolve, run_verify
    from harness.check.config import CheckConfig
    from harness.configs import from_args

    config = from_args(CheckConfig, args, cases=args.cases)
    if args.vary:
        return _verify_matrix(args, config)
    if args.scheduler or args.workers or args.fresh:
        raise HarnessError("--scheduler, --workers and --fresh go with --vary (a matrix of configurations)")
    config.validate()
    preflight.common(args)
    if args.level == "generation":
        preflight.pair(args.pair, args.target, args.draft)
        if args.dtype:
            preflight.dtype(args.dtype, args.device)
    resolve(config.impl, contract_of(config))  # usage errors before any progress bar
    with Progress(planned_rows(config), f"verify {args.level}",
                  unit="rows" if args.level == "sampler" else "samples") as bar:
        report = run_verify(config, progress=bar)
    return _report_and_exit(report, args)


def _cmd_run(args) -> int:
    """`specdec run --config FILE`: run again what a result file records (harness.rerun)."""
    from harness import rerun

    kind, recorded = rerun.load(args.config)
    if kind == "check":
        from harness.check.api import contract_of, planned_rows, resolve, run_verify

        config = rerun.check_config(recorded).validate()
        if args.out:
            preflight.output_file(args.out, "--out")
        if config.level == "engine":  # the recorded EngineConfig, against the endpoint it names
            if args.dry_run:
                print(f"specdec run: would rerun the engine-level check of {config.endpoint} ({args.config})")
                return EXIT_OK
            with _engine_progress(None, "rerun engine") as bar:
                report = run_verify(config, progress=bar)
            return _report_and_exit(report, argparse.Namespace(json=args.out, verbose=False, allow_inconclusive=False))
        preflight.device(config.device)
        if config.level == "generation":
            preflight.pair(config.pair, config.target, config.draft)
        resolve(config.impl, contract_of(config))
        if args.dry_run:
            planned_rows(config)  # sampler level: unknown --cases, impossible plans
            print(f"specdec run: would rerun the {config.level}-level check of {_impl_name(config.impl)} "
                  f"({args.config})")
            return EXIT_OK
        with Progress(planned_rows(config), f"rerun {config.level}",
                      unit="rows" if config.level == "sampler" else "samples") as bar:
            report = run_verify(config, progress=bar)
        return _report_and_exit(report, argparse.Namespace(json=args.out, verbose=False, allow_inconclusive=False))
    if kind.startswith("campaign."):
        from harness.runner import run

        name = kind.split(".")[1]
        policy(name)  # an unknown campaign: exit 2 naming the ones there are
        argv = rerun.campaign_argv(name, recorded, args.out)
        if args.dry_run:
            print(f"specdec run: would run {rerun.campaign_dry_run(name, argv)}")
            return EXIT_OK
        return run(name, argv)
    if kind == "bench":
        from harness.bench.cli import run_config

        config = rerun.bench_config(recorded, args.out)
        if args.dry_run:
            run_config(config, dry_run=True)
            print(f"specdec run: would rerun the bench sweep into {config.out}/{config.run_name or '(the suite)'}")
            return EXIT_OK
        return run_config(config)
    raise HarnessError(f"specdec run cannot rerun a result of kind {kind!r} (it reruns: check, bench, campaign.NAME "
                       "of a campaign on the runner)")


def _impl_name(impl) -> str:
    return impl if isinstance(impl, str) else f"{getattr(impl, '__module__', '?')}:{getattr(impl, '__qualname__', impl)}"


def _report_and_exit(report, args) -> int:
    """Print a verify report (and write --json); its exit code: 0 pass, 3 INCONCLUSIVE, 1 not lossless."""
    print_check_report(report, verbose=args.verbose)
    if args.json:
        report.write_json(args.json)
        print(f"  report written to {args.json}")
        if getattr(args, "estimate", False):  # asked for: --estimate --json PATH also plots them to PATH-estimates.png
            from harness.check.estimate_plot import write_estimates_figure

            figure = write_estimates_figure(report, args.json)  # per-position estimates and their bands, when any
            if figure:
                print(f"  estimates plotted in {figure}")
    if report.verdict == "inconclusive":
        return EXIT_OK if args.allow_inconclusive else EXIT_INCONCLUSIVE
    if report.verdict == "pass":
        return EXIT_OK
    print(f"specdec: FAIL: {fail_line(report)}", file=sys.stderr)
    return EXIT_FAIL


def _verify_matrix(args, base) -> int:
    """`specdec verify --vary FIELD=V1,V2 ...`: the cross product, here or on dask workers (harness.check.matrix)."""
    from pathlib import Path

    from harness.check.api import contract_of, planned_rows, resolve
    from harness.check.matrix import expand, parse_vary, run_matrix, write
    from harness.executor import JOURNAL, Journal

    vary = parse_vary(args.vary)
    configs = expand(base, vary)
    preflight.common(args)
    for config in configs:  # every usage error before anything runs
        if config.level == "generation":
            preflight.pair(config.pair, config.target, config.draft)
        resolve(config.impl, contract_of(config))
        planned_rows(config)  # sampler level: unknown --cases, impossible plans
    args.matrix_out = args.matrix_out or results_folder("verify-matrix")
    journal = Journal(Path(args.matrix_out) / JOURNAL, fresh=args.fresh)  # resumed unless --fresh
    with Progress(len(configs), "verify matrix", unit="configs") as bar:
        def progress(done, total):
            bar.update(done - bar.n)

        result = run_matrix(configs, vary, scheduler=args.scheduler, workers=args.workers, journal=journal,
                            threads=args.threads, progress=progress)
    command = "specdec verify " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else "specdec verify"
    path = write(result, args.matrix_out, command)
    print(f"\nverify matrix: {len(configs)} configurations on {result.executor}, {result.seconds:.0f} s")
    for cell in result.cells:
        label = " ".join(f"{k}={v}" for k, v in cell["config"].items())
        tv = cell.get("detectable_tv")
        tail = f"detectable TV {tv:.3g}, {cell.get('samples')} samples" if tv is not None and tv == tv else ""
        extra = cell.get("message") or ""
        print(f"  {cell['verdict'].upper():<12} {label}  {tail}{'; ' if tail and extra else ''}{extra}"
              + ("  (from the journal)" if cell["resumed"] else ""))
    print(f"  report: {path}")
    if args.json:
        result.write_json(args.json, command)
        print(f"  report written to {args.json}")
    code = result.exit_code(args.allow_inconclusive)
    if code == EXIT_FAIL:
        print(f"specdec: FAIL: {sum(c['verdict'] == 'fail' for c in result.cells)} of {len(configs)} "
              "configurations are not lossless", file=sys.stderr)
    elif code == EXIT_USAGE:
        print("specdec: error: " + next(c["message"] for c in result.cells if c["verdict"] == "error"),
              file=sys.stderr)
    return code


def fail_line(report) -> str:
    """One line for stderr: how many tests reject, and the first of them with its message."""
    rejected = [t for t in report.tests if t.reject]
    first = rejected[0]
    message = " ".join(str(first.details.get("message") or f"p = {first.p_value:.2e}").split())
    line = (f"{report.impl} is not lossless: {plural(len(rejected), 'test rejects', 'tests reject')}; "
            f"first {first.name}: {message}")
    conventions = report.conventions() if hasattr(report, "conventions") else []
    if conventions:
        line += "; " + "; ".join(f"consistent with the target under {o}: declare it with --processing-order {o}"
                                 for o in conventions)
    return line


def _cmd_mutants(args) -> int:
    """`specdec mutants` is the zoo campaign (suites/campaigns/zoo.py) on the campaign runner."""
    from harness.runner import run_parsed

    return run_parsed("zoo", args, policy("zoo"))


def _cmd_numerics(args) -> int:
    import torch

    from harness.check.api import load_pair, resolve
    from harness.check.numerics import NumericsConfig, run_numerics, write_numerics_report
    from harness.configs import from_args
    from harness.models.hf_pair import resolve_dtype

    fn = resolve(args.impl, "generation")
    args.out = args.out or results_folder("numerics")
    low_dtype = resolve_dtype(args.dtype, device=args.device)
    if low_dtype not in (torch.bfloat16, torch.float16):
        raise HarnessError(f"--dtype must be a low precision (bfloat16 or float16), got {args.dtype!r}")
    config = from_args(NumericsConfig, args)
    for flag in ("prompts", "max_new_tokens", "gamma"):
        preflight.at_least(getattr(args, flag), "--" + flag.replace("_", "-"))
    preflight.common(args)
    preflight.dtype(low_dtype, args.device)
    preflight.pair(args.pair, args.target, args.draft)
    full = load_pair(args.pair, args.target, args.draft, device=args.device, dtype="float32")
    low = load_pair(args.pair, args.target, args.draft, device=args.device, dtype=low_dtype)
    prompts = (full.prompts or [[0]])[: config.prompts]
    with Progress(len(prompts), "numerics", unit="prompts") as bar:
        result = run_numerics(fn, low, full, prompts, config, progress=bar)
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
    """`specdec demo` is the demo campaign (suites/campaigns/demo.py) on the campaign runner."""
    from harness.runner import run_parsed

    preflight.common(args)  # --threads, --out
    return run_parsed("demo", args, policy("demo"))


def add_threads(p: argparse.ArgumentParser) -> None:
    from harness.configs import ThreadsOption, add_arguments

    add_arguments(p, ThreadsOption)


def command_config(name: str):
    """The policy's "campaigns._commands": the configs of the campaigns that are `specdec` commands (mutants, demo),
    taken from the installed policy like every policy module (light: their flags are built when the parser is)."""
    from harness.policy import load

    return load("campaigns._commands", "policy module")


_Parser = Parser  # argparse, but a usage error is one line on stderr (exit 2)


def policy(name: str):
    """A campaign of the installed policy (harness.policy: "campaigns.NAME"): the mechanism (harness) imports
    nothing of the policy's (an import-linter contract); the composition layer hands it over."""
    from harness.policy import load

    if name not in campaign_names():
        raise HarnessError(f"unknown campaign {name!r}; available: {', '.join(campaign_names())}")
    return load(f"campaigns.{name}", "campaign")


def campaign_names() -> list[str]:
    """The installed policy's campaigns (its helpers, "_NAME", are not campaigns)."""
    from harness.policy import names

    return [n for n in names("campaigns") if not n.startswith("_")]


def _cmd_campaign(args) -> int:
    from harness.runner import run

    return run(args.name, args.args, policy(args.name))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specdec", description=__doc__.splitlines()[0])
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("specdec")
    except PackageNotFoundError:  # run from a source tree that is not installed
        release = "unknown (not installed)"
    parser.add_argument("--version", action="version", version=f"specdec {release}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("campaign", help="run a campaign of suites/campaigns (calibrations, zoo profiles) -> results/",
                       description="Campaigns: " + ", ".join(campaign_names()) + ". Options after the name go to "
                       "the campaign (`specdec campaign NAME --help`).")
    p.add_argument("name", metavar="NAME", help="one of: " + ", ".join(campaign_names()))
    p.add_argument("args", nargs=argparse.REMAINDER, help="the campaign's own options")
    p.set_defaults(func=_cmd_campaign)
    p = sub.add_parser("run", help="run again what a result file records (its config): specdec run --config FILE",
                       description="Reruns a result file's config (docs/RESULTS-FORMAT.md): a check report of "
                       "`specdec verify --json` (sampler, generation level), or a campaign on the runner.")
    from harness.configs import add_arguments
    from harness.rerun import RunOptions

    add_arguments(p, RunOptions)
    p.set_defaults(func=_cmd_run)
    p = sub.add_parser("pairs", help="list registered model pairs and whether each is available here")
    p.set_defaults(func=_cmd_pairs)

    p = sub.add_parser("engines", help="list registered engines: version, installed or why not, capabilities")
    p.set_defaults(func=_cmd_engines)

    p = sub.add_parser("verify", help="statistical losslessness check of one implementation",
                       description="Exit 0: every test passes; 1: the implementation is not lossless (a test "
                       "rejects, malformed output, or it raised); 2: the run could not be done (usage, input, "
                       "environment, outputs); 3: INCONCLUSIVE (nothing rejects, but the achieved detectable TV "
                       "is above --inconclusive-tv).")
    from harness.check.config import CheckConfig, MatrixOptions, NumericsConfig, VerifyOptions
    from harness.configs import add_arguments

    add_arguments(p, CheckConfig)
    add_arguments(p, VerifyOptions)
    add_threads(p)
    add_arguments(p, MatrixOptions)
    p.set_defaults(func=_cmd_verify)
    from harness.served import cli as engine_cli  # engine level: serve / probe subcommands, verify flags

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

    p = sub.add_parser("bench", help="speedup sweep -> tables, plots, report (results/)",
                       description="Speedup sweeps over pairs x gamma x temperature next to the Leviathan prediction.")
    add_bench_arguments(p)
    p.set_defaults(func=run_bench)

    p = sub.add_parser("demo", help="the main job end to end on the embedded default pair -> results/")
    commands = command_config("demo")
    from harness.runner import add_campaign_arguments  # = `specdec campaign demo`'s flags

    add_campaign_arguments(p, commands.DemoConfig, where=False)
    add_threads(p)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("numerics", help="greedy with vs without speculation in bfloat16: divergences classified",
                       description="Greedy output of an implementation in low precision vs the target alone, with "
                       "each first divergence classified as numerics (near-tie within rounding) or logic (a bug). "
                       "Exit 0 if no divergence is logic.")
    add_arguments(p, NumericsConfig)
    add_threads(p)
    p.set_defaults(func=_cmd_numerics)

    p = sub.add_parser("mutants", help="run the mutant zoo and correct controls; detection / false-alarm report",
                       description="Exit 0 if every mutant is caught (>= 95% of seeds) and every control passes; 1 "
                       "if not; 2 if planned runs were not made (--budget-s / --stop-at: the same command resumes). "
                       "`specdec campaign zoo` is the same campaign.")
    from harness.runner import add_campaign_arguments  # = `specdec campaign zoo`'s flags

    add_campaign_arguments(p, commands.ZooConfig, local_workers=commands.ZOO_LOCAL_WORKERS)
    p.set_defaults(func=_cmd_mutants)
    return parser


def main(argv: list[str] | None = None) -> int:
    from harness.allocator import return_large_blocks

    return_large_blocks()  # long runs: freed tensors go back to the system (harness/allocator.py)
    try:
        parser = build_parser()  # it lists the policy's campaigns: none installed is exit 2, one line
    except HarnessError as exc:
        print(f"specdec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage error (one line, exit 2) or --help (exit 0): a code, not an exception
        return int(exc.code or 0)
    import time

    started = time.time()  # what Ctrl-C kept: the files written since
    try:
        return args.func(args)
    except ImplementationError as exc:  # raised, hung or returned a non-output: a verdict, not a crash
        print(f"  verdict: FAIL ({exc})")
        print(f"specdec: FAIL: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except (HarnessError, SpecDecInputError) as exc:
        print(f"specdec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # outputs checked up front; a disk that fills up mid-run still lands here
        print(f"specdec: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        from harness.progress import interrupted_line

        print(interrupted_line(args, started), file=sys.stderr)  # a path, or "nothing was written"
        return 130
    except SystemExit as exc:  # a campaign's own argument parser (usage error, --help): a code, not an exception
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        print(f"specdec: error: {exc.code}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - anything else is the run's own fault (harness, model load, kernel):
        # exit 2 in one line naming the component, never 1 ("not lossless") and never a traceback
        print(f"specdec: error: {describe_fault(exc)}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
