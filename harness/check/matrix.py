"""Several verify configurations in one run: `specdec verify ... --vary FIELD=V1,V2 [--vary ...]`.

The flags of the command line are the base configuration; each `--vary` names a `CheckConfig` field
(`impl`, `pair`, `family`, `gamma`, `seed`, `tv`, `setting`, ...) and the values it takes. The run is
the cross product, one cell per configuration, each an ordinary `run_verify` with its own report. Cells
run one after another here, on a local dask cluster (`--workers N`) or on the workers of a running
dask scheduler (`--scheduler ADDRESS`), through harness.executor: a worker that dies mid-run loses no
finished cell, and every finished cell is journaled (`--matrix-out DIR/journal.jsonl`) the moment it
arrives, so `--resume` after a crash runs only the cells that are missing — and the report marks those
it took from the journal.

Every configuration is validated (and its implementation resolved) before anything runs: a typo in
the third value is a usage error (exit 2) at once, not after an hour. The matrix exits with the most
serious outcome of its cells: 1 if any implementation is not lossless, else 2 if any cell could not be
run, else 3 if any is INCONCLUSIVE, else 0.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.check.config import CheckConfig
from harness.configs import cli_fields
from harness.defaults import EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_USAGE
from harness.errors import HarnessError

# Fields that make no sense to vary: the engine level has its own flags (endpoint, ...).
_NOT_VARIED = ("level",)
_LIST_FIELDS = ("settings", "cases")  # a value is one element: --vary setting=T=1 --vary setting=... crosses


def _fields() -> dict[str, dataclasses.Field]:
    """Varyable field name -> field; the flag's own spelling (--false-alarm-rate, --setting) works too."""
    out = {}
    for f in cli_fields(CheckConfig):
        if f.name in _NOT_VARIED:
            continue
        out[f.name] = f
        out[f.metadata["flag"].lstrip("-").replace("-", "_")] = f
    out["cases"] = next(f for f in dataclasses.fields(CheckConfig) if f.name == "cases")
    return out


def parse_vary(items: list[str]) -> list[tuple[str, list[Any]]]:
    """["gamma=1,3", "impl=a:b,c:d"] -> [("gamma", [1, 3]), ("impl", ["a:b", "c:d"])]; values typed by the field.

    Values are split on commas, except for --setting (a setting itself holds commas: give one value per
    --vary setting=...; repeated --vary of the same field add values)."""
    fields, order, values = _fields(), [], {}
    for item in items:
        name, sep, text = item.partition("=")
        key = name.strip().lstrip("-").replace("-", "_")
        if not sep or not text or key not in fields:
            known = sorted({f.name for f in fields.values()})
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; fields: {', '.join(known)}"
            raise HarnessError(f"--vary wants FIELD=V1,V2 with a field of `specdec verify`, got {item!r}" + hint)
        field = fields[key]
        parts = [text] if field.name == "settings" else [v.strip() for v in text.split(",")]
        parse = field.metadata.get("parse") or (lambda s: s)
        typed = []
        for part in parts:
            if field.metadata.get("action") == "store_true":
                if part.lower() not in ("true", "false"):
                    raise HarnessError(f"--vary {field.name}: values are true/false, got {part!r}")
                typed.append(part.lower() == "true")
                continue
            try:
                typed.append(parse(part))
            except (ValueError, HarnessError) as exc:
                raise HarnessError(f"--vary {field.name}: bad value {part!r}: {exc}") from None
        if field.name not in values:
            order.append(field.name)
            values[field.name] = []
        values[field.name] += typed
    for name in order:
        if len(set(map(repr, values[name]))) != len(values[name]):
            raise HarnessError(f"--vary {name}: a value is listed twice")
    return [(name, values[name]) for name in order]


def expand(base: CheckConfig, vary: list[tuple[str, list[Any]]]) -> list[CheckConfig]:
    """The cross product over the varied fields, each configuration validated."""
    if base.level == "engine":
        raise HarnessError("--vary runs implementations (sampler or generation level), not --level engine")
    configs = []
    for combo in itertools.product(*(values for _, values in vary)):
        changes = {}
        for (name, _), value in zip(vary, combo, strict=True):
            changes[name] = [value] if name in _LIST_FIELDS else value
        configs.append(dataclasses.replace(base, **changes).validate())
    return configs


def describe(config: CheckConfig, vary: list[tuple[str, list[Any]]]) -> dict[str, Any]:
    """The varied fields of one configuration (its label in the report)."""
    return {name: _plain(getattr(config, name)) for name, _ in vary}


def cell_key(config: CheckConfig) -> str:
    """A journal key: the whole configuration, so a resumed run never reuses another configuration's cell."""
    return json.dumps({k: _plain(v) for k, v in dataclasses.asdict(config).items()}, sort_keys=True)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value if isinstance(value, (str, int, float, bool, list, type(None))) else repr(value)


def run_cell(config: CheckConfig, threads: int | None = None) -> dict:
    """One configuration, in a worker process: its verdict and report, or why it could not be run."""
    from harness.adapters.calling import ImplementationError
    from harness.check.api import run_verify
    from specdec_ref.errors import SpecDecInputError

    if threads:
        import torch

        torch.set_num_threads(threads)
    started = time.perf_counter()
    utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        report = run_verify(config)
    except ImplementationError as exc:  # the implementation raised, hung or returned garbage: not lossless
        return {"verdict": "fail", "message": str(exc), "seconds": time.perf_counter() - started, "utc": utc}
    except (HarnessError, SpecDecInputError, ValueError, OSError) as exc:  # the run itself could not be done
        return {"verdict": "error", "message": f"{type(exc).__name__}: {exc}",
                "seconds": time.perf_counter() - started, "utc": utc}
    except Exception as exc:  # noqa: BLE001 - a fault of the harness, a model or a kernel: never a verdict
        from harness.errors import describe_fault

        return {"verdict": "error", "message": describe_fault(exc), "seconds": time.perf_counter() - started,
                "utc": utc}
    return {"verdict": report.verdict, "report": report.to_dict(), "seconds": report.seconds, "utc": utc,
            "detectable_tv": report.detectable_tv, "samples": report.samples,
            "message": report.failure_summary()[0] if report.verdict == "fail" and report.failure_summary() else ""}


@dataclasses.dataclass
class MatrixResult:
    cells: list[dict]  # {"config": varied fields, "key", "resumed", **run_cell's record}, in matrix order
    seconds: float
    executor: str
    configs: list = dataclasses.field(default_factory=list)  # every cell's whole CheckConfig, in matrix order

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.cells:
            out[c["verdict"]] = out.get(c["verdict"], 0) + 1
        return out

    def exit_code(self, allow_inconclusive: bool = False) -> int:
        verdicts = {c["verdict"] for c in self.cells}
        if "fail" in verdicts:
            return EXIT_FAIL
        if "error" in verdicts:
            return EXIT_USAGE
        if "inconclusive" in verdicts and not allow_inconclusive:
            return EXIT_INCONCLUSIVE
        return EXIT_OK

    def to_dict(self) -> dict:
        return {"cells": self.cells, "seconds": self.seconds, "executor": self.executor, "counts": self.counts()}

    def write_json(self, path: str | Path, command: str | None = None) -> Path:
        """A result envelope of kind "check.matrix": one row per cell; `config` holds every cell's configuration."""
        from harness.envelope import config_dict, write_result
        from harness.records import provenance

        seeds = sorted({c.seed for c in self.configs})
        devices = sorted({c.device for c in self.configs}) or ["cpu"]
        dtypes = sorted({c.dtype or "float64" for c in self.configs}) or ["float64"]
        config = {"command": command, "configs": [config_dict(c) for c in self.configs]}
        return write_result(path, "check.matrix", config=config,
                            provenance=provenance(seed=seeds[0] if len(seeds) == 1 else seeds, device=devices[0],
                                                  dtype=",".join(dtypes)),
                            rows=self.cells, summary={"counts": self.counts(), "seconds": self.seconds,
                                                      "executor": self.executor})


def run_matrix(configs: list[CheckConfig], vary, *, scheduler: str | None = None, workers: int | None = None,
               journal=None, threads: int | None = None,
               progress: Callable[[int, int], None] | None = None) -> MatrixResult:
    """Every configuration through `run_cell`, here or on dask (harness.executor), journaled as each finishes."""
    from harness.executor import make_executor, run_cells

    keys = [cell_key(c) for c in configs]
    if len(set(keys)) != len(keys):
        raise HarnessError("two --vary combinations give the same configuration")
    earlier = set(journal.load()) if journal is not None else set()
    cells = {k: (c, threads) for k, c in zip(keys, configs, strict=True)}
    started = time.perf_counter()
    with make_executor(scheduler, workers) as executor:
        done = run_cells(executor, run_cell, cells, journal=journal, progress=progress)
    where = (f"the workers of the dask scheduler {scheduler}" if scheduler else
             f"a local dask cluster of {workers} workers" if workers else "this process")
    rows = [{"config": describe(c, vary), "key": k, "resumed": k in earlier, **done[k]} for k, c in zip(keys, configs, strict=True)]
    return MatrixResult(rows, time.perf_counter() - started, where, configs=list(configs))


def markdown(result: MatrixResult, command: str) -> str:
    lines = ["# specdec verify over a configuration matrix", "", f"Command: `{command}`", "",
             f"{len(result.cells)} configurations on {result.executor}, {result.seconds:.0f} s wall; "
             + ", ".join(f"{n} {v}" for v, n in sorted(result.counts().items())) + ".", ""]
    names = list(result.cells[0]["config"]) if result.cells else []
    lines += ["| " + " | ".join(names) + " | verdict | detectable TV | samples | seconds | note |",
              "|" + "---|" * (len(names) + 5)]
    for c in result.cells:
        tv = c.get("detectable_tv")
        note = c.get("message", "")
        if c.get("resumed"):
            note = (note + "; " if note else "") + f"from the journal (measured {c.get('utc', '?')})"
        lines.append("| " + " | ".join(str(c["config"][n]) for n in names) + f" | **{c['verdict'].upper()}** | "
                     + ("-" if tv is None or tv != tv else f"{tv:.3g}") + f" | {c.get('samples', '-')} | "
                     f"{c['seconds']:.1f} | {note.replace('|', '/')} |")
    return "\n".join(lines + [""])


def write(result: MatrixResult, out: str | Path, command: str) -> Path:
    from harness.records import atomic_write_text

    out = Path(out)
    result.write_json(out / "matrix.json", command)
    return atomic_write_text(out / "report.md", markdown(result, command))
