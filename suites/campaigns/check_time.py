"""Sampler-check time of a vectorized implementation: this checkout against an earlier commit, alternating.

    specdec campaign check_time --old 5cf0c7c --rounds 3 --out results/bench/check-time

Each round runs `run_sampler_check(specdec_ref.adapters:verify, seed=0)` at the default plan once in each
checkout (a fresh Python process each, 1 torch thread; the order alternates between rounds so that a
drift in the machine's load favours neither), and records the verdict, the rows drawn, the seconds and
the load average. The old commit is checked out into a temporary git worktree (removed afterwards).
Run it alone (`nice`-free, nothing else heavy on the machine): the ratio of neighbouring runs is the
measurement; the report states the load average beside every line.

The runs are cells of the campaign runner (harness.runner), in this process and in order, with no journal: a
timing ratio must come from one run, so this campaign never resumes from an earlier one (always fresh).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import ClassVar

from harness.configs import option
from harness.errors import HarnessError
from harness.reporting import header, rerun, table

SNIPPET = """
import json, time, torch
torch.set_num_threads(1)
from harness.check.sampler import run_sampler_check
from specdec_ref.adapters import verify
t = time.perf_counter()
r = run_sampler_check(verify, seed=0)
print(json.dumps({"verdict": r.verdict, "rows": r.samples, "seconds": time.perf_counter() - t}))
"""
ROOT = Path(__file__).resolve().parents[2]
WHERE = "local"  # one process, one run at a time, in the cells' order
CONTEXT = True  # run_cell(checkouts, ...): {"new": this checkout, "old": the session's worktree of --old}


@dataclasses.dataclass
class Config:
    JOURNALED: ClassVar[bool] = False  # a timing ratio comes from one run: always fresh, no --fresh / --report-only
    old: str | None = option(None, "--old", "the commit to compare against, e.g. the previous release (required)",
                             metavar="COMMIT")
    rounds: int = option(3, "--rounds", "rounds; each runs both checkouts, the order alternating", int, "N")


def validate(config: Config) -> None:
    if not config.old:
        raise HarnessError("give the commit to compare against: --old COMMIT")
    if config.rounds < 1:
        raise HarnessError(f"--rounds must be >= 1, got {config.rounds}")


def provenance_fields(config: Config) -> dict:
    return {"seed": 0}


@contextlib.contextmanager
def session(config: Config):
    """The --old commit checked out into a temporary git worktree while the cells run (removed afterwards)."""
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        added = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), config.old],
                               capture_output=True, text=True)
        if added.returncode != 0:  # not a git checkout, or no such commit: the run cannot be done (exit 2)
            raise HarnessError(f"--old {config.old}: cannot check it out ({added.stderr.strip().splitlines()[-1:]})")
        try:
            yield {"new": ROOT, "old": old}
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], capture_output=True)


def cells(config: Config) -> dict[str, tuple]:
    return {f"round{r + 1}/{name}": (r, name) for r in range(config.rounds)
            for name in (("old", "new") if r % 2 == 0 else ("new", "old"))}


def run_cell(checkouts: dict[str, Path], r: int, name: str) -> dict:
    run = {"round": r + 1, "which": name, **one_run(checkouts[name])}
    print(json.dumps(run), flush=True)
    return run


def _load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]] if Path("/proc/loadavg").exists() else []


def one_run(checkout: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    load = _load()
    done = subprocess.run([sys.executable, "-c", SNIPPET], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        raise HarnessError(f"the check failed to run in {checkout}: {done.stderr.strip().splitlines()[-1:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load_before": load}


def timing_rows(runs: list[dict]) -> list[list[str]]:
    """One row per run: round, checkout, verdict, rows drawn, seconds and the load average before it."""
    return [[str(x["round"]), x["which"], x["verdict"], f"{x['rows']:,}", f"{x['seconds']:.2f}",
             " ".join(f"{v:.2f}" for v in x["load_before"])] for x in runs]


def report(run) -> int:
    config, runs = run.config, run.records
    if not run.complete:
        raise HarnessError(f"{len(runs)} of {len(run.cells)} runs made (--budget-s / --stop-at): no ratio to report")
    med = {w: statistics.median(x["seconds"] for x in runs if x["which"] == w) for w in ("old", "new")}
    run.write_result("runs.json", "campaign.check_time", rows=runs,
                     summary={"old_commit": config.old, "median_seconds": med})
    lines = ["# Sampler-check time of a vectorized implementation: this commit against an earlier one", "",
             header(run, f"old commit `{config.old}`"), "",
             rerun(run) + " (suites/campaigns/check_time.py: `run_sampler_check(specdec_ref.adapters:verify, seed=0)` "
             "at the default plan, a fresh process per run, 1 thread, the order alternating per round).", "",
             table(["round", "which", "verdict", "rows", "seconds", "load average before"], timing_rows(runs)),
             "", f"Median: old {med['old']:.2f} s, new {med['new']:.2f} s (new / old = {med['new'] / med['old']:.2f})."]
    run.write_text("report.md", "\n".join(lines) + "\n")
    return 0 if all(x["verdict"] == "pass" for x in runs) else 1
