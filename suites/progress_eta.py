"""How far off the progress line's ETA is on the default plans: `python -m suites.progress_eta [--out DIR]`.

Runs each command of PLANS with a progress line every INTERVAL_S seconds (SPECDEC_PROGRESS_S), timestamps every
stderr line as it arrives, and at 25 %, 50 % and 75 % of the run's elapsed time takes the last line that gave an
ETA: its predicted end (the line's time + its ETA) minus the actual end (the process's exit) is the error, in
seconds and as a share of the run's duration. Writes OUT/eta.json (every line, every error) and OUT/README.md
(default OUT: results/progress). The machine's load average is recorded beside each run: the ETA extrapolates
the time per unit of cost measured so far, so a load that changes mid-run moves the error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

INTERVAL_S = 5
FRACTIONS = (0.25, 0.5, 0.75)
PLANS = {
    "sampler default": ["verify", "--impl", "specdec_ref.adapters:verify"],
    "generation default (toy)": ["verify", "--impl", "specdec_ref.adapters:generate", "--level", "generation",
                                 "--pair", "toy"],
}
_ETA = re.compile(r"ETA (?:(\d+):)?(\d+):(\d\d)")


def _seconds(match: re.Match) -> float:
    h, m, s = match.groups()
    return 3600 * int(h or 0) + 60 * int(m) + int(s)


def _specdec() -> list[str]:
    here = Path(sys.executable).with_name("specdec")
    return [str(here)] if here.exists() else [sys.executable, "-m", "harness"]


def measure(args: list[str], interval_s: float = INTERVAL_S) -> dict:
    """One run of `specdec ARGS`: its timestamped stderr lines, exit code, duration and the ETA's errors."""
    env = {**os.environ, "SPECDEC_PROGRESS_S": str(interval_s)}
    load_before = os.getloadavg()
    started = time.monotonic()
    proc = subprocess.Popen(_specdec() + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.monotonic() - started, line.rstrip("\n"))
                                                          for line in proc.stderr), daemon=True)
    reader.start()
    stdout = proc.stdout.read()
    code = proc.wait()
    total = time.monotonic() - started
    reader.join()
    return {"command": "specdec " + " ".join(args), "exit_code": code, "seconds": round(total, 1),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "verdict_line": next((x.strip() for x in stdout.splitlines() if x.strip().startswith("verdict:")), None),
            "errors": eta_errors(lines, total), "lines": [[round(t, 2), text] for t, text in lines]}


def eta_errors(lines: list[tuple[float, str]], total: float) -> list[dict]:
    """At each fraction of `total`: the last line with an ETA at or before it, and (predicted end − actual end)."""
    out = []
    with_eta = [(t, text, m) for t, text in lines if (m := _ETA.search(text))]
    for fraction in FRACTIONS:
        at = fraction * total
        before = [x for x in with_eta if x[0] <= at]
        if not before:
            out.append({"fraction": fraction, "line": None, "error_s": None})
            continue
        t, text, m = before[-1]
        error = t + _seconds(m) - total
        out.append({"fraction": fraction, "at_s": round(t, 1), "line": text, "predicted_end_s": round(t + _seconds(m), 1),
                    "error_s": round(error, 1), "error_share": round(error / total, 3)})
    return out


def _row(name: str, run: dict) -> str:
    cells = [f"{e['error_s']:+.0f} s ({100 * e['error_share']:+.0f} %)" if e["error_s"] is not None else "no ETA yet"
             for e in run["errors"]]
    return (f"| {name} | {run.get('commit', '?')} | {run['seconds']:.0f} s | " + " | ".join(cells) +
            f" | {run['load_average_before'][0]:.1f} → {run['load_average_after'][0]:.1f} |")


def readme(runs: dict, earlier: list[dict]) -> str:
    head = ["| plan | commit | duration | error at 25 % | at 50 % | at 75 % | load average (1 min) before → after |",
            "|---|---|---|---|---|---|---|"]
    lines = [
        "# The progress line's ETA error on the default plans",
        "",
        f"Measured by `python -m suites.progress_eta` (progress line every {INTERVAL_S} s, `SPECDEC_PROGRESS_S`). "
        "Error = the end the last progress line predicted (its time + its ETA) − the actual end (the process's exit), "
        "taken at 25 %, 50 % and 75 % of the run's elapsed time; positive: the run ended earlier than predicted. The "
        "ETA is the time per unit of cost measured so far times the cost left in every step of the plan "
        "(harness/progress.py; costs: sampler rows (2γ+1)·V + 240 input floats, harness/check/sampler_source.py; generation "
        "calls × new tokens × sequence length, harness/check/context_cells.py). The elapsed time includes the "
        "start (imports, loading the pair: ~20 s under this load), which no ETA covers.",
        "",
        "## Latest",
        "",
        *head,
        *(_row(name, run) for name, run in runs.items()),
        "",
        "Commands: " + "; ".join(f"`{run['command']}`" for run in runs.values()) + ".",
    ]
    if earlier:
        lines += ["", "## Earlier measurements", "", *head,
                  *(_row(e["name"] + (f" {e['note']}" if e.get("note") else ""), e) for e in earlier)]
    lines += ["", "Every stderr line with its time is in eta.json. The machine: 2 cores, shared with other jobs (the load "
              "average column); a load that changes mid-run changes the time per unit of cost, which no ETA foresees.",
              ""]
    return "\n".join(lines)


def _read(path: Path) -> dict:
    """The measurements kept in OUT/eta.json (a result envelope of kind "progress_eta"; {} when there is none)."""
    from harness.envelope import read_result

    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if "schema_version" not in data else read_result(path).report


def _write(path: Path, runs: dict, earlier: list, args) -> None:
    from harness.envelope import write_result
    from harness.records import provenance

    write_result(path, "progress_eta", config={"out": args.out, "only": args.only, "interval_s": INTERVAL_S},
                 provenance=provenance(seed=None), report={"interval_s": INTERVAL_S, "runs": runs, "earlier": earlier},
                 summary={"plans": sorted(runs)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suites.progress_eta", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/progress")
    parser.add_argument("--only", choices=list(PLANS), help="one plan (default: every plan)")
    parser.add_argument("--readme-only", action="store_true", help="rewrite OUT/README.md from OUT/eta.json")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    path = out / "eta.json"
    kept = _read(path)
    runs, earlier = kept.get("runs", {}), kept.get("earlier", [])
    for name, plan in PLANS.items():
        if args.readme_only or (args.only and name != args.only):
            continue
        print(f"progress_eta: {name}: specdec {' '.join(plan)}", file=sys.stderr, flush=True)
        run = measure(plan)
        if name in runs:  # the one it replaces stays, under "earlier"
            earlier.append({"name": name, **runs[name]})
        runs[name] = {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **run}
        _write(path, runs, earlier, args)
        for e in run["errors"]:
            print(f"  at {e['fraction']:.0%}: error {e['error_s']} s", file=sys.stderr, flush=True)
    (out / "README.md").write_text(readme(runs, earlier))
    return 0


if __name__ == "__main__":
    sys.exit(main())
