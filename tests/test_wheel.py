"""The built wheel's members (docs/DESIGN.md, "Installed top-level names"; issue 56, item 6): it is built from a copy of
the sources, as tools/ci_wheel.sh builds it, and its member list is pinned. tools/ci_wheel.sh (run by .ci/run) installs the
same wheel in a clean venv and runs it from outside the repository."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = {"specdec", "specdec_ref", "harness", "suites"}  # the decision of docs/DESIGN.md


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    import setuptools  # noqa: F401  (the build backend, used without build isolation: a missing one fails here)
    src, dist = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in sorted(TOP_LEVEL):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(dist), str(src)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    (built,) = dist.glob("specdec-*.whl")
    return built


@pytest.fixture(scope="module")
def members(wheel) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def test_the_top_level_names_are_the_decided_ones(wheel, members):
    top = {m.split("/")[0] for m in members if not m.split("/")[0].endswith(".dist-info")}
    assert top == TOP_LEVEL
    with zipfile.ZipFile(wheel) as z:
        declared = z.read(next(m for m in members if m.endswith(".dist-info/top_level.txt"))).decode().split()
    assert set(declared) == TOP_LEVEL


def test_no_test_file_and_no_repository_suite_ships(members):
    shipped_tests = [m for m in members if Path(m).name.startswith("test_") or Path(m).name == "conftest.py"]
    assert shipped_tests == []
    assert not [m for m in members if m.startswith(("suites/lossless/", "suites/bench/", "tests/", "results/", "docs/"))]
    assert [m for m in members if m.startswith("suites/") and m.endswith("/__init__.py")]  # suites itself still ships


def test_the_data_the_installed_code_reads_ships(members):
    """harness.prompts reads suites/prompts/*.jsonl through importlib.resources; harness.adapters.vllm_fix points
    vLLM servers at vllm_site/sitecustomize.py; the engine workers are started by file path."""
    for needed in ("suites/prompts/prompts.jsonl", "suites/prompts/bench.jsonl",
                   "harness/adapters/vllm_site/sitecustomize.py", "harness/engines/openvino_worker.py",
                   "harness/engines/onnxruntime_genai_worker.py", "specdec/__init__.py", "harness/pytest_plugin.py",
                   "specdec/_policy.py", "specdec/cli.py"):
        assert needed in members, needed
    non_python = {m for m in members if not m.endswith(".py") and ".dist-info/" not in m}
    assert non_python == {"suites/prompts/README.md", "suites/prompts/prompts.jsonl", "suites/prompts/bench.jsonl"}


def test_the_entry_points_install_the_default_policy(wheel, members):
    """The console script installs the default policy (specdec.cli), and the entry-point group that harness.policy
    reads when nothing installed one (`python -m harness`, the pytest plugin) names the same object."""
    import configparser

    with zipfile.ZipFile(wheel) as z:
        text = z.read(next(m for m in members if m.endswith(".dist-info/entry_points.txt"))).decode()
    declared = configparser.ConfigParser()
    declared.read_string(text)
    assert dict(declared["console_scripts"]) == {"specdec": "specdec.cli:main"}
    assert dict(declared["pytest11"]) == {"specdec": "harness.pytest_plugin"}
    assert dict(declared["specdec.policy"]) == {"default": "specdec._policy:POLICY"}
