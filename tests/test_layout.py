"""The policy / mechanism split: results producers live in suites/, reached through `specdec`.

(The import-layer rules — statistics import no torch, harness imports nothing from suites, no cycles —
are import-linter contracts in pyproject.toml, run by `nox -s lint` in CI.)"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from harness.cli import campaign_names, main, policy

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENTRY_POINTS = {"harness/__main__.py", "harness/cli.py"}


def _modules(package: str):
    """(path relative to the root, parsed module) of every .py file under `package`."""
    for path in sorted((ROOT / package).rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _main_blocks(package: str) -> list[str]:
    found = []
    for rel, tree in _modules(package):
        for node in tree.body:
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and rel not in ENTRY_POINTS:
                found.append(rel)
    return found


@pytest.mark.lint
def test_no_hidden_python_m_producers_in_the_harness():
    assert _main_blocks("harness") == []


def test_every_campaign_is_reachable_from_specdec(capsys):
    names = campaign_names()
    assert {"zoo", "sequential", "tree", "families", "engine", "params", "invariance", "demo"} <= set(names)
    from harness.runner import is_campaign

    for name in names:
        module = policy(name)
        assert is_campaign(module), name  # built on the runner (harness.runner)
        assert main(["campaign", name, "--help"]) == 0, name
    capsys.readouterr()
    assert main(["campaign", "no-such-campaign"]) == 2
    assert "unknown campaign" in capsys.readouterr().err


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert capsys.readouterr().out.startswith("specdec ")


CATALOGUE_TYPES = {"SamplerCase", "TreeCase", "ConstrainedCase", "Setting", "Sweep", "Prompt"}


def _catalogues_and_folders(package: str) -> list[str]:
    """Module-level collections of cases / settings / sweeps, and string constants naming a results/ folder."""
    found = []
    for rel, tree in _modules(package):
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, (ast.List, ast.Tuple, ast.Dict)):
                calls = {n.func.id for n in ast.walk(node.value) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
                if calls & CATALOGUE_TYPES:
                    found.append(f"{rel}:{node.lineno} a catalogue of {sorted(calls & CATALOGUE_TYPES)}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(r"\bresults/\w", node.value):
                found.append(f"{rel}:{node.lineno} names {node.value!r}")
    return found


@pytest.mark.lint
def test_the_harness_names_no_case_catalogue_and_no_results_folder():
    """Cases, settings, sweeps, prompts and results/ folders are policy: suites/ holds them, harness/ gets
    them from the installed policy (harness.policy)."""
    assert _catalogues_and_folders("harness") == []
    assert _catalogues_and_folders("suites/catalogues")  # the check can see a catalogue


def test_the_catalogues_load_through_the_policy_layer():
    from harness.bench.plan import suite_specs
    from harness.check.sampler import case_names
    from harness.check.settings import default_settings, parameter_settings
    from harness.check.tree import case_names as tree_case_names
    from harness.prompts import load_prompts
    from suites.catalogues import generation, sampler, tree

    assert case_names() == [c.name for c in sampler.CASES]
    assert tree_case_names() == [c.name for c in tree.CASES]
    assert default_settings() == tuple(generation.DEFAULT_SETTINGS)
    assert parameter_settings() == tuple(generation.PARAMETER_SETTINGS)
    assert {"default", "quick", "synthetic", "gpu"} <= set(suite_specs())
    assert len(load_prompts()) >= 10
    from harness import contexts
    from suites.catalogues import contexts as context_sizes

    assert contexts.BLOCK_SIZES == context_sizes.BLOCK_SIZES and contexts.LENGTHS == context_sizes.LENGTHS


@pytest.mark.lint
def test_tests_mirror_the_packages():
    """tests/X/ holds the tests of harness/X/ (or of the top-level package X); helpers live in tests/impls."""
    dirs = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))} - {"impls"}
    assert dirs, "no test folders"
    for name in dirs:
        assert (ROOT / "harness" / name).is_dir() or (ROOT / name / "__init__.py").exists(), name


def test_every_policy_module_imports():
    """suites/ is not collected by CI's test run: importing every module here keeps a renamed harness name
    from breaking a campaign, a benchmark or a statistical suite unseen."""
    import importlib

    for path in sorted((ROOT / "suites").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        importlib.import_module(name.removesuffix(".__init__"))


def test_check_time_with_an_unknown_commit_exits_2_with_one_line(capsys, tmp_path):
    assert main(["campaign", "check_time", "--old", "no-such-commit", "--rounds", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--old no-such-commit" in err[0]


def test_every_contract_has_a_trial_source_and_every_source_loads():
    """One table builds every level's trial source (the engine's named by path: harness.served sits above
    harness.check); each entry resolves to a callable."""
    from harness.adapters.loading import load_callable
    from harness.check import api

    assert set(api.SOURCES) == set(api.REPORT_LEVEL) >= {"sampler", "draft_step", "tree", "generation",
                                                         "masked_step", "engine"}
    for build in api.SOURCES.values():
        assert callable(load_callable(build) if isinstance(build, str) else build)
