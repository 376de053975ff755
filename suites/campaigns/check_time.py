"""Sampler-check time of a vectorized implementation: this checkout against an earlier commit, alternating.

    specdec campaign check_time --old 5cf0c7c --rounds 3 --out results/bench/check-time

Each round runs `run_sampler_check(specdec_ref.adapters:verify, seed=0)` at the default plan once in each
checkout (a fresh Python process each, 1 torch thread; the order alternates between rounds so that a
drift in the machine's load favours neither), and records the verdict, the rows drawn, the seconds and
the load average. The old commit is checked out into a temporary git worktree (removed afterwards).
Run it alone (`nice`-free, nothing else heavy on the machine): the ratio of neighbouring runs is the
measurement; the report states the load average beside every line.

The runs are cells of `harness.executor.run_cells`, the one campaign runner, with no journal (`journal=None`):
a timing ratio must come from one run, so this campaign never resumes from an earlier one (always fresh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.envelope import write_result
from harness.errors import HarnessError
from harness.executor import LocalExecutor, run_cells
from harness.records import atomic_write_text, provenance

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specdec campaign check_time", description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the commit to compare against (e.g. the previous release)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="results/bench/check-time")
    args = parser.parse_args(argv)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        added = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.old],
                               capture_output=True, text=True)
        if added.returncode != 0:  # not a git checkout, or no such commit: the run cannot be done (exit 2)
            raise HarnessError(f"--old {args.old}: cannot check it out ({added.stderr.strip().splitlines()[-1:]})")

        def measure(r: int, name: str, checkout: Path) -> dict:
            run = {"round": r + 1, "which": name, **one_run(checkout)}
            print(json.dumps(run), flush=True)
            return run

        cells = {f"round{r + 1}/{name}": (r, name, checkout) for r in range(args.rounds)
                 for name, checkout in ([("old", old), ("new", ROOT)] if r % 2 == 0 else [("new", ROOT), ("old", old)])}
        try:
            with LocalExecutor() as here:  # one process, one run at a time, in this order: no journal, never resumed
                done = run_cells(here, measure, cells, journal=None)
            runs += [done[k] for k in cells]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], capture_output=True)
    med = {w: statistics.median(x["seconds"] for x in runs if x["which"] == w) for w in ("old", "new")}
    meta = provenance(seed=0)
    out = Path(args.out)
    write_result(out / "runs.json", "campaign.check_time", config=args, provenance=meta, rows=runs,
                 summary={"old_commit": args.old, "median_seconds": med})
    lines = ["# Sampler-check time of a vectorized implementation: this commit against an earlier one", "",
             f"Measured {meta['utc_time']} · this commit `{meta['git_commit']}` · old commit `{args.old}` · "
             f"{meta['device']}", "",
             f"Command: `specdec campaign check_time --old {args.old} --rounds {args.rounds} --out {args.out}` "
             "(suites/campaigns/check_time.py: `run_sampler_check(specdec_ref.adapters:verify, seed=0)` at the "
             "default plan, a fresh process per run, 1 thread, the order alternating per round).", "",
             "| round | which | verdict | rows | seconds | load average before |", "|---|---|---|---|---|---|"]
    lines += [f"| {x['round']} | {x['which']} | {x['verdict']} | {x['rows']:,} | {x['seconds']:.2f} | "
              f"{' '.join(f'{v:.2f}' for v in x['load_before'])} |" for x in runs]
    lines += ["", f"Median: old {med['old']:.2f} s, new {med['new']:.2f} s (new / old = {med['new'] / med['old']:.2f})."]
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    return 0 if all(x["verdict"] == "pass" for x in runs) else 1
