"""The campaign runner: `specdec campaign NAME` for every campaign of suites/campaigns built on it.

A campaign (suites/campaigns/NAME.py) is its cells, its tests and its report:

    Config                        a dataclass whose fields declare the campaign's flags (harness.configs.option)
    cells(config) -> {key: args}  the cells, in the order they run (a key names one cell for the journal)
    run_cell(*args) -> record     one cell: a JSON-able record (module level: it may run in another process)
    report(run) -> int            the report from the finished cells (`run.done`); the exit code (0 as expected)

and, where it needs them,

    validate(config)              raise HarnessError on a bad setting (exit 2) before any cell runs
    provenance_fields(config)     the record's seed / device / dtype (default: seed None, cpu, float32)
    WHERE = "local"               the cells run in this process, in order (a server it holds, a timing): the
                                  campaign has no --local-workers / --scheduler / --workers
    journaled(config) -> bool     False: never resume this run (e.g. a --timing run); a campaign that never resumes
                                  says so on its Config instead (`JOURNALED: ClassVar[bool] = False`, a timing
                                  ratio must come from one run): then it has no --fresh / --report-only at all
    session(config)               a context manager around the cells and the report (e.g. a checkout they use);
    session(config, out)          the same, given the output folder (e.g. servers whose logs, and cells whose
                                  reports, go there)
    halted(config) -> bool        True: no further cell starts (e.g. the server the cells need has died); the rest
                                  is left unrun, as at --stop-at
    KEPT = ("responses", ...)     folders under OUT that cells keep to resume within a cell (e.g. an engine
                                  check's responses): --fresh removes them with the journal
    LOCAL_WORKERS = N             the default of --local-workers
    CONTEXT = True                run_cell(ctx, *args): ctx is what `session` yields (the engines or servers it
                                  holds, its output folder), never a module global; needs WHERE = "local". The
                                  report finds it as `run.context` (with or without CONTEXT)
    cells(config, out)            the cells, given the output folder (cells that run elsewhere and write there: the
                                  folder is one of their arguments)
    PARTS = ("a", "b", ...)       the campaign's parts, in the order they run, with a plain field `parts` on its
    OPT_IN_PARTS = ("c",)         Config (default PARTS, no flag of its own): the runner gives it `--parts a,b`
                                  (default: every part of PARTS; OPT_IN_PARTS run only when named), validates it and
                                  sets `parts` to the parts chosen, in that order. `--only` is never a part: it
                                  names entries

The runner owns the rest, once for every campaign (`RunnerConfig`, `WhereConfig`): the output folder (default:
suites/outputs.py, "campaign.NAME"), fresh/resume (one rule: OUT/journal.jsonl is resumed unless --fresh),
--stop-at / --budget-s (no cell starts after them), --report-only, where the cells run, the provenance of the
records, and the exit code (a bad setting: 2 in one line, never a traceback). The report is written with
harness.reporting (its header line, tables, rates, the command that reproduces the run; `Run.write_text` leaves a
file alone that would change only in its header line).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import inspect
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.configs import Parser, add_arguments, cli_fields, field_default, from_args, option
from harness.errors import HarnessError
from harness.executor import JOURNAL, Journal, ScheduleConfig, WhereConfig, deadline, make_executor, run_cells

_OUTPUT = "campaign runner (journal, resume, when to stop)"


@dataclasses.dataclass
class RunnerConfig(ScheduleConfig):
    """The options every campaign has: when no new cell starts and resuming (ScheduleConfig), where it writes."""

    out: str | None = option(None, "--out", "results folder: report, records and the journal OUT/journal.jsonl "
                             "(default: the campaign's, suites/outputs.py)", metavar="DIR", group=_OUTPUT)
    report_only: bool = option(False, "--report-only", "run no cell: write the report from the journal",
                               action="store_true", group=_OUTPUT)


@dataclasses.dataclass
class Run:
    """What a campaign's `report` gets: its config, the cells planned and finished, where to write."""

    name: str
    config: Any
    runner: RunnerConfig
    out: Path
    cells: dict[str, tuple]
    done: dict[str, Any]  # key -> record of every finished cell, in the cells' order
    provenance: dict
    seconds: float
    command: str  # the command line that reproduces the run (flags that differ from their defaults)
    where: WhereConfig = dataclasses.field(default_factory=WhereConfig)  # where the cells ran
    journal: dict[str, Any] = dataclasses.field(default_factory=dict)  # every record of OUT/journal.jsonl (key ->
    #   record), also cells of other configurations: a report may cover runs split over several processes
    context: Any = None  # what the campaign's `session` yielded (None without one)
    load: tuple[float, ...] | None = None  # the load average (1, 5, 15 min) when the run started

    @property
    def records(self) -> list[Any]:
        return list(self.done.values())

    @property
    def complete(self) -> bool:
        return len(self.done) == len(self.cells)

    def write_result(self, name: str, kind: str, *, rows: list | None = None, report: dict | None = None,
                     summary: dict | None = None) -> Path:
        """OUT/NAME as a result envelope (harness.envelope.write_result) with this run's config and provenance."""
        from harness.envelope import write_result

        return write_result(self.out / name, kind, config=self.config, provenance=self.provenance, rows=rows,
                            report=report, summary=summary)

    def write_text(self, name: str, text: str) -> Path:
        """OUT/NAME, unless it says the same already apart from its header line (harness.reporting.write)."""
        from harness.reporting import write

        write(self.out / name, text)
        return self.out / name


def is_campaign(module: ModuleType) -> bool:
    """A campaign built on the runner (its Config, cells, run_cell and report)."""
    return all(hasattr(module, n) for n in ("Config", "cells", "run_cell", "report"))


def _load(name: str) -> ModuleType:
    from harness.policy import load

    return load(f"campaigns.{name}", "campaign")


def never_journaled(config_class: type) -> bool:
    """The campaign keeps no journal in any run (its Config's `JOURNALED` is False): every run is fresh."""
    return getattr(config_class, "JOURNALED", True) is False


@dataclasses.dataclass
class PartsConfig:
    """--parts, for a campaign that declares PARTS (its Config's `parts` field holds the parts chosen)."""

    parts: str | None = option(None, "--parts", "comma-separated: the parts to run", metavar="PART,...")


def parts_of(module: ModuleType) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The campaign's (PARTS, OPT_IN_PARTS) where its Config has the plain field `parts` (no flag of its own) that
    --parts sets; ((), ()) for a campaign without parts."""
    fields = {f.name: f for f in dataclasses.fields(module.Config)}
    if "parts" not in fields or fields["parts"].metadata.get("flag"):
        return (), ()
    return tuple(getattr(module, "PARTS", ())), tuple(getattr(module, "OPT_IN_PARTS", ()))


def chosen_parts(name: str, module: ModuleType, text: str | None) -> tuple[str, ...]:
    """The parts `--parts text` names, in the campaign's order (PARTS, then OPT_IN_PARTS); None: PARTS. An unknown
    or an empty list is a HarnessError (exit 2) naming the campaign's parts."""
    parts, opt_in = parts_of(module)
    if text is None:
        return parts
    named = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in named if p not in parts + opt_in]
    if unknown or not named:
        known = ", ".join(parts) + (f" (opt-in: {', '.join(opt_in)})" if opt_in else "")
        what = f"unknown part {', '.join(map(repr, unknown))}" if unknown else "no part named"
        raise HarnessError(f"--parts {text!r}: {what} of campaign {name}; its parts: {known}")
    return tuple(p for p in parts + opt_in if p in named)


def campaign_config(name: str, module: ModuleType, args: argparse.Namespace) -> Any:
    """The campaign's Config from flags parsed by `parser_for(name, module)`: its own flags, and the parts --parts
    chose (a campaign with PARTS)."""
    config = from_args(module.Config, args)
    if parts_of(module)[0]:
        config = dataclasses.replace(config, parts=chosen_parts(name, module, getattr(args, "parts", None)))
    return config


def parser_for(name: str, module: ModuleType) -> argparse.ArgumentParser:
    """`specdec campaign NAME`'s parser: the campaign's Config (and --parts, where it declares PARTS), then the
    runner's options."""
    doc = (module.__doc__ or name).strip()
    parser = Parser(prog=f"specdec campaign {name}", description=doc.split("\n\n")[0].replace("\n", " "),
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parts, opt_in = parts_of(module)
    if parts:
        add_arguments(parser, PartsConfig)
        action = next(a for a in parser._actions if a.dest == "parts")
        action.help = (f"comma-separated, the parts to run, of {', '.join(parts)} (default: all of them)"
                       + (f"; opt-in, run only when named: {', '.join(opt_in)}" if opt_in else ""))
    add_campaign_arguments(parser, module.Config, where=getattr(module, "WHERE", None) != "local",
                           local_workers=getattr(module, "LOCAL_WORKERS", 1))
    return parser


def add_campaign_arguments(parser: argparse.ArgumentParser, config_class: type, *, where: bool = True,
                           local_workers: int = 1) -> None:
    """A campaign's flags: its Config's, the runner's and (unless its cells run in this process) where they run.
    Also for a `specdec` command that is a campaign (`specdec mutants` is the zoo: harness.cli)."""
    add_arguments(parser, config_class)
    if never_journaled(config_class):  # nothing to forget or to report from: no --fresh / --report-only
        add_arguments(parser, RunnerConfig, skip=("fresh", "report_only"))
    else:
        add_arguments(parser, RunnerConfig)
    if where:
        add_arguments(parser, WhereConfig, defaults={"local_workers": local_workers})


def campaign_parser(name: str) -> argparse.ArgumentParser:
    """The parser of `specdec campaign NAME` (every flag declared by a config: tests/test_cli_flags.py)."""
    return parser_for(name, _load(name))


def command_line(name: str, *configs: Any) -> str:
    """`specdec campaign NAME` with every flag whose value differs from its field's default."""
    words = ["specdec", "campaign", name]
    for config in configs:
        parts = {f.name: f for f in dataclasses.fields(config)}.get("parts")
        if parts is not None and not parts.metadata.get("flag") and \
                tuple(config.parts) != tuple(field_default(parts)):  # the runner's --parts
            words += ["--parts", ",".join(config.parts)]
        for field in cli_fields(type(config)):
            value, meta = getattr(config, field.name), field.metadata
            if value == field_default(field) or meta.get("hidden"):
                continue
            if meta["action"] in ("store_true", "store_false"):
                words.append(meta["flag"])
            elif meta["action"] == "append" or meta.get("nargs"):
                values = [str(v) for v in value]
                words += [meta["flag"], *values] if meta.get("nargs") else [w for v in values for w in (meta["flag"], v)]
            else:
                words += [meta["flag"], str(value)]
    return shlex.join(words)


def _progress(name: str):
    def report(done: int, total: int) -> None:
        print(f"campaign {name}: {done}/{total} cells", file=sys.stderr, flush=True)

    return report


def _with_out(fn, config: Any, out: Path):
    """`fn(config)`, or `fn(config, out)` where it takes two parameters (a campaign's `session`, `cells`)."""
    return fn(config, out) if len(inspect.signature(fn).parameters) > 1 else fn(config)


def _session(module: ModuleType, config: Any, out: Path):
    """The campaign's `session(config)` or `session(config, out)`; none: a context that does nothing."""
    if not hasattr(module, "session"):
        return contextlib.nullcontext()
    return _with_out(module.session, config, out)


def run(name: str, argv: list[str] | None = None, module: ModuleType | None = None) -> int:
    """Parse `argv` for campaign `name`, run its cells (journaled, resumable) and its report; the exit code."""
    module = module or _load(name)
    return run_parsed(name, parser_for(name, module).parse_args(argv), module)


def run_parsed(name: str, args: argparse.Namespace, module: ModuleType | None = None) -> int:
    """`run` from flags already parsed by `parser_for(name, module)` (or a parser with the same flags)."""
    from harness import preflight
    from harness.policy import results_folder
    from harness.records import provenance

    module = module or _load(name)
    config = campaign_config(name, module, args)
    runner = from_args(RunnerConfig, args)
    where = from_args(WhereConfig, args) if getattr(module, "WHERE", None) != "local" else WhereConfig()
    if hasattr(module, "validate"):
        module.validate(config)
    if where.local_workers < 1 or (where.workers is not None and where.workers < 1):
        raise HarnessError("--local-workers and --workers must be >= 1")
    if runner.budget_s is not None and not runner.budget_s >= 0:
        raise HarnessError(f"--budget-s must be >= 0 seconds, got {runner.budget_s}")
    stop = deadline(runner.stop_at, runner.budget_s)  # a bad --stop-at: exit 2 before anything runs
    if runner.stop_at is not None and not runner.report_only and stop():
        raise HarnessError(f"--stop-at {runner.stop_at} is already past (now {time.strftime('%H:%M', time.gmtime())} "
                           "UTC; HH:MM means today): no cell would start")
    out = Path(runner.out or results_folder(f"campaign.{name}"))
    preflight.output_dir(out, "--out")  # an unwritable folder: exit 2 before any cell runs, not after them
    journaled = not never_journaled(type(config)) and getattr(module, "journaled", lambda c: True)(config)
    if runner.report_only and not journaled:
        raise HarnessError(f"campaign {name} keeps no journal (every run is fresh): --report-only has nothing to report")
    journal = Journal(out / JOURNAL, fresh=runner.fresh and not runner.report_only) if journaled else None
    if journal is not None and runner.fresh and not runner.report_only:
        for kept in getattr(module, "KEPT", ()):  # what the forgotten cells kept goes with them
            shutil.rmtree(out / kept, ignore_errors=True)
    if getattr(module, "CONTEXT", False) and getattr(module, "WHERE", None) != "local":
        raise HarnessError(f"campaign {name}: CONTEXT = True needs WHERE = \"local\" (the context is not sent away)")
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    with _session(module, config, out) as ctx:
        cells = _with_out(module.cells, config, out)
        started = time.perf_counter()
        run_cell = functools.partial(module.run_cell, ctx) if getattr(module, "CONTEXT", False) else module.run_cell
        with make_executor(where.scheduler, where.workers, local_workers=where.local_workers) as executor:
            halted = getattr(module, "halted", lambda c: False)
            done = run_cells(executor, run_cell, cells, journal=journal, progress=_progress(name),
                             stop=(lambda: True) if runner.report_only else (lambda: stop() or halted(config)))
        done = {k: done[k] for k in cells if k in done}
        fields = {"seed": None, "device": "cpu", "dtype": "float32",
                  **(module.provenance_fields(config) if hasattr(module, "provenance_fields") else {})}
        result = Run(name=name, config=config, runner=runner, out=out, cells=cells, done=done,
                     provenance=provenance(**fields), seconds=time.perf_counter() - started,
                     command=command_line(name, config, dataclasses.replace(runner, fresh=False, report_only=False)),
                     where=where, journal=journal.load() if journal else dict(done), context=ctx, load=load)
        return _exit_code(name, result, int(module.report(result) or 0))


def _exit_code(name: str, run: Run, code: int) -> int:
    """One rule for every campaign: a run with planned cells not made (cut short by --stop-at / --budget-s, a halt,
    or --report-only on a journal that lacks them) is not a pass. The report's 1 (something that must pass failed,
    on the cells made) stands; otherwise exit 2, in one line that names how many cells are missing."""
    if run.complete or code == 1:
        return code
    why = "--report-only: not in the journal" if run.runner.report_only else "--stop-at / --budget-s or a halt"
    print(f"specdec: error: campaign {name}: {len(run.cells) - len(run.done)} of {len(run.cells)} planned cells not "
          f"made ({why}); the report covers the {len(run.done)} made, and the same command resumes", file=sys.stderr)
    return 2
