"""Measure the API check (`--engine-checks api`) against `specdec serve` on the toy pair: the correct server with
speculation on and off, each planted API bug (harness.mutants.api), and the correct server over many run seeds
(false alarms). Writes results.json next to this file; README.md states what it holds.

    .nox/tests/bin/python results/findings/api-semantics/run.py [--seeds 20] [--parts default,false_alarms,detection]
        [--mutants a,b] [--pair toy-eos]

Every server runs a reasoning parser on its chat route (token REASONING_END ends the reasoning) and a tool-call parser
(tokens TOOL_CALL_TOKENS open and close a call), so that the chat stream test sees reasoning and tool-call markers
inside speculative steps.

Each part replaces its key in results.json (the others are kept).
"""

from __future__ import annotations

import argparse
import pathlib
import time

from harness.mutants.api import API_MUTANTS
from harness.pairs import get_pair
from harness.served.check import run_engine_check
from harness.served.config import EngineConfig
from harness.served.serve import serving
from specdec_ref.adapters import generate

PAIR = "toy"
REASONING_END = 2  # a token the toy target often emits inside a speculative step (not at its edges)
TOOL_CALL_TOKENS = (5, 9)  # likewise, after the reasoning: tool calls open and close inside steps


def one(server: dict, pair: str = PAIR, **config) -> dict:
    started = time.perf_counter()
    with serving(generate, get_pair(pair), reasoning_end=REASONING_END, tool_call_tokens=TOOL_CALL_TOKENS,
                 **server) as s:
        report = run_engine_check(EngineConfig(endpoint=s.url + "/v1", pair=pair, checks=("api",), **config))
    cases = [{k: c.get(k) for k in ("name", "requests", "stop_requests", "stops_placed", "stops_inside_step",
                                    "stops_across_steps", "tokens_per_delta", "seed_reproducible", "chat_requests",
                                    "chat_reasoning_split", "chat_marker_in_multi_token_delta",
                                    "chat_marker_mid_delta", "chat_tokens_per_delta", "chat_tools",
                                    "chat_tool_call_replies", "chat_tool_calls",
                                    "chat_tool_call_in_multi_token_delta", "min_tokens_eos",
                                    "min_tokens_with_stop_ids", "min_tokens_stop_ids", "n_independent")}
             for c in report.cases]
    return {"server": server, "pair": pair, "config": config, "verdict": report.verdict, "seconds": time.perf_counter() - started,
            "rejected": sorted({t.name.rsplit("/", 1)[-1] for t in report.tests if t.reject}),
            "first_problem": next((t.details.get("message", "")[:300] for t in report.tests if t.reject), ""),
            "cases": cases}


SMALL = dict(prompts=1, api_seeds=2, api_length=16)  # the false-alarm and detection runs: one prompt, 2 seeds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20, help="run seeds of the false-alarm and detection parts")
    parser.add_argument("--parts", default="default,false_alarms,detection")
    parser.add_argument("--mutants", default=",".join(API_MUTANTS), help="the planted bugs of the detection part")
    parser.add_argument("--pair", default=PAIR, help="toy, or toy-eos (EOS inside steps: the min_tokens EOS test)")
    parser.add_argument("--tag", default="", help="suffix of the keys written (e.g. -toy-eos)")
    args = parser.parse_args()
    path = pathlib.Path(__file__).parent / "results.json"
    out: dict = {}
    parts = args.parts.split(",")
    pair = args.pair
    if "default" in parts:  # the default plan: 2 prompts x 4 seeds x 32 tokens
        out["default"] = []
        for server in ({}, {"speculative": False}, *({"api_mutant": m} for m in API_MUTANTS)):
            out["default"].append(one(server, pair))
            print(server, out["default"][-1]["verdict"], out["default"][-1]["rejected"], flush=True)
    if "false_alarms" in parts:
        out["false_alarms"] = []
        for seed in range(args.seeds):
            out["false_alarms"].append(one({}, pair, seed=100 + seed, **SMALL))
            print("seed", 100 + seed, out["false_alarms"][-1]["verdict"], flush=True)
    if "detection" in parts:
        out["detection"] = {}
        for mutant in args.mutants.split(","):
            runs = [one({"api_mutant": mutant}, pair, seed=100 + seed, **SMALL) for seed in range(args.seeds)]
            out["detection"][mutant] = [{"seed": r["config"]["seed"], "verdict": r["verdict"], "rejected": r["rejected"]}
                                        for r in runs]
            print(mutant, sum(r["verdict"] == "fail" for r in runs), "of", len(runs), flush=True)
    save(path, {key + args.tag: value for key, value in out.items()}, vars(args), [100 + s for s in range(args.seeds)])


def save(path: pathlib.Path, parts: dict, options: dict, seeds: list[int]) -> None:
    """Merge `parts` into the result envelope at `path` (its report: one key per part; a detection part adds to the
    mutants already there). Read at the end: parts may run side by side."""
    from harness.envelope import read_result, write_result
    from harness.records import provenance

    report = dict(read_result(path).report or {}) if path.exists() else {}
    for key, value in parts.items():
        report[key] = {**report.get(key, {}), **value} if key.startswith("detection") else value
    summary = {key: (f"{sum(r['verdict'] != 'pass' for r in value)} of {len(value)} runs FAILED"
                     if isinstance(value, list) and key.startswith("false_alarms") else
                     {m: f"{sum(r['verdict'] == 'fail' for r in runs)} of {len(runs)} FAILED" for m, runs in value.items()}
                     if key.startswith("detection") else None) for key, value in report.items()}
    write_result(path, "finding.api_semantics", config={"command": "results/findings/api-semantics/run.py",
                                                         "last_options": options},
                 provenance=provenance(seed=[0, *seeds]), report=report,
                 summary={k: v for k, v in summary.items() if v is not None})


if __name__ == "__main__":
    main()
