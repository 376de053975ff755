"""Measure the API check (`--engine-checks api`) against `specdec serve` on the toy pair: the correct server with
speculation on and off, each planted API bug (harness.mutants.api), and the correct server over many run seeds
(false alarms). Writes results.json next to this file; README.md states what it holds.

    .nox/tests/bin/python results/findings/api-semantics/run.py [--seeds 20] [--parts default,false_alarms,detection]

Each part replaces its key in results.json (the others are kept).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

from harness.mutants.api import API_MUTANTS
from harness.pairs import get_pair
from harness.served.check import EngineConfig, run_engine_check
from harness.served.serve import serving
from specdec_ref.adapters import generate

PAIR = "toy"


def one(server: dict, **config) -> dict:
    started = time.perf_counter()
    with serving(generate, get_pair(PAIR), **server) as s:
        report = run_engine_check(EngineConfig(endpoint=s.url + "/v1", pair=PAIR, checks=("api",), **config))
    cases = [{k: c.get(k) for k in ("name", "requests", "stop_requests", "stops_placed", "stops_inside_step",
                                    "stops_across_steps", "tokens_per_delta", "seed_reproducible")}
             for c in report.cases]
    return {"server": server, "config": config, "verdict": report.verdict, "seconds": time.perf_counter() - started,
            "rejected": sorted({t.name.rsplit("/", 1)[-1] for t in report.tests if t.reject}),
            "first_problem": next((t.details.get("message", "")[:300] for t in report.tests if t.reject), ""),
            "cases": cases}


SMALL = dict(prompts=1, api_seeds=2, api_length=16)  # the false-alarm and detection runs: one prompt, 2 seeds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20, help="run seeds of the false-alarm and detection parts")
    parser.add_argument("--parts", default="default,false_alarms,detection")
    args = parser.parse_args()
    path = pathlib.Path(__file__).parent / "results.json"
    out: dict = {}
    parts = args.parts.split(",")
    if "default" in parts:  # the default plan: 2 prompts x 4 seeds x 32 tokens
        out["default"] = []
        for server in ({}, {"speculative": False}, *({"api_mutant": m} for m in API_MUTANTS)):
            out["default"].append(one(server))
            print(server, out["default"][-1]["verdict"], out["default"][-1]["rejected"], flush=True)
    if "false_alarms" in parts:
        out["false_alarms"] = []
        for seed in range(args.seeds):
            out["false_alarms"].append(one({}, seed=100 + seed, **SMALL))
            print("seed", 100 + seed, out["false_alarms"][-1]["verdict"], flush=True)
    if "detection" in parts:
        out["detection"] = {}
        for mutant in API_MUTANTS:
            runs = [one({"api_mutant": mutant}, seed=100 + seed, **SMALL) for seed in range(args.seeds)]
            out["detection"][mutant] = [{"seed": r["config"]["seed"], "verdict": r["verdict"], "rejected": r["rejected"]}
                                        for r in runs]
            print(mutant, sum(r["verdict"] == "fail" for r in runs), "of", len(runs), flush=True)
    kept = json.loads(path.read_text()) if path.exists() else {}  # read at the end: parts may run side by side
    path.write_text(json.dumps({**kept, **out}, indent=1))


if __name__ == "__main__":
    main()
