"""harness.policy (issue 56, item 2): the policy reaches the mechanism as an argument, not by a package name. The
harness names no module of suites; with no policy installed a call is a HarnessError (exit 2, one line); what a
caller installs is what the call sites see; the default one comes from the composition layer (specdec._policy),
installed by `import specdec` and the console script, and declared in the entry-point group for every other entry."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import policy
from harness.errors import HarnessError

ROOT = Path(__file__).resolve().parents[1]
IMPORTERS = {"import_module", "find_spec", "__import__", "iter_modules", "walk_packages", "resolve_name"}


def _policy_names_in(tree: ast.AST) -> list[str]:
    """Where a module of the policy package is named as an import target: `import suites...`, a string that starts
    with "suites." (an f-string's too), or a string argument naming suites given to an import function."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if re.match(r"suites(\.|$)", a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and re.match(r"suites(\.|$)", node.module):
            found.append(f"{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.match(r"suites\.\w*", node.value):
            found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Call):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for arg in node.args if func in IMPORTERS else []:
                texts = [c.value for c in ast.walk(arg) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                if any("suites" in t for t in texts):
                    found.append(f"{node.lineno}: {func}({ast.unparse(arg)})")
    return found


@pytest.mark.lint
def test_the_harness_names_no_module_of_the_policy():
    found = {str(p.relative_to(ROOT)): hits for p in sorted((ROOT / "harness").rglob("*.py"))
             if (hits := _policy_names_in(ast.parse(p.read_text())))}
    assert found == {}


@pytest.mark.lint
def test_the_scan_sees_what_it_looks_for():
    source = ('import suites.outputs\nfrom suites.catalogues import sizes\nimport importlib\n'
              'importlib.import_module(f"suites.{name}")\nimportlib.util.find_spec("suites")\n')
    assert len(_policy_names_in(ast.parse(source))) == 5
    assert _policy_names_in(ast.parse('"benchmark suites"; "(suites/outputs.py)"')) == []


@pytest.fixture
def no_policy(monkeypatch):
    """Nothing installed and no entry point to fall back on."""
    monkeypatch.setattr(policy, "ENTRY_POINT_GROUP", "specdec.policy.none-in-this-test")
    previous = policy.install(None)
    yield
    policy.install(previous)


@pytest.fixture
def fake_policy():
    """A policy of the test's own, installed for the test."""
    generation = SimpleNamespace(DEFAULT_SETTINGS=["only-default"], PARAMETER_SETTINGS=["only-parameter"])
    outputs = SimpleNamespace(FOLDERS={"bench": "elsewhere/bench", "campaign.solo": "elsewhere/solo"})
    solo = SimpleNamespace(__doc__="the only campaign")
    fake = policy.Policy({"catalogues.generation": lambda: generation, "outputs": lambda: outputs,
                          "campaigns.solo": lambda: solo, "campaigns._helper": lambda: None}, source="the test's policy")
    previous = policy.install(fake)
    yield SimpleNamespace(policy=fake, solo=solo)
    policy.install(previous)


def test_with_no_policy_installed_a_call_is_a_harness_error_naming_what_was_asked(no_policy):
    with pytest.raises(HarnessError, match=r"no policy installed, so no catalogue 'catalogues.sampler'") as caught:
        policy.catalogue("sampler")
    assert "\n" not in str(caught.value)
    with pytest.raises(HarnessError, match="no outputs table 'outputs'"):
        policy.results_folder("bench")
    with pytest.raises(HarnessError, match="no campaigns list"):
        policy.names("campaigns")


def test_with_no_policy_installed_the_command_line_exits_2_with_one_line(no_policy, capsys):
    from harness.cli import main

    assert main(["campaign", "zoo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specdec: error: no policy installed") and err.count("\n") == 1


def test_what_is_installed_is_what_the_call_sites_see(fake_policy):
    from harness.bench.config import BenchConfig
    from harness.check.settings import default_settings, parameter_settings
    from harness.cli import campaign_names
    from harness.cli import policy as campaign

    assert default_settings() == ("only-default",) and parameter_settings() == ("only-parameter",)
    assert BenchConfig(suite="quick").out == "elsewhere/bench"
    assert campaign_names() == ["solo"]  # "_helper" is a helper, not a campaign
    assert campaign("solo") is fake_policy.solo
    with pytest.raises(HarnessError, match="unknown campaign 'zoo'; available: solo"):
        campaign("zoo")


def test_a_name_the_installed_policy_lacks_is_named(fake_policy):
    with pytest.raises(HarnessError, match=r"unknown catalogue 'catalogues.sampler': the test's policy has none "
                                           r"\(it has catalogues.generation\)"):
        policy.catalogue("sampler")
    with pytest.raises(HarnessError, match="no folder for 'numerics'"):
        policy.results_folder("numerics")


def test_install_takes_a_policy_only():
    with pytest.raises(HarnessError, match="takes a Policy, got dict"):
        policy.install({"outputs": None})


def test_the_default_policy_is_the_declared_entry_point_and_has_every_name_the_harness_asks_for():
    from specdec import _policy

    (declared,) = entry_points(group=policy.ENTRY_POINT_GROUP)  # stale metadata: reinstall the project (pip -e)
    assert declared.load() is _policy.POLICY
    asked = set()
    for path in (ROOT / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                if node.func.id in ("catalogue", "catalogue_module"):
                    asked.add(f"catalogues.{node.args[0].value}")
                elif node.func.id in ("load", "load_policy") and node.args[0].value:
                    asked.add(node.args[0].value)
    assert {"catalogues.sizes", "outputs", "http_bench", "sweeps", "campaigns._commands"} <= asked  # the scan works
    assert sorted(asked - set(_policy.POLICY.modules)) == []
    for name in sorted(n for n in _policy.POLICY.modules if not n.startswith("campaigns.")):
        assert _policy.POLICY.modules[name]() is not None, name  # each loads (the campaigns: tests/suites)


def test_import_specdec_installs_the_default_policy_and_keeps_one_a_caller_installed():
    code = ("from harness import policy\nassert policy.installed() is None\nimport specdec\n"
            "from specdec import _policy\nassert policy.installed() is _policy.POLICY\n"
            "mine = policy.Policy({})\npolicy.install(mine)\n_policy.install()\nassert policy.installed() is mine\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("module", ["harness", "specdec"])
def test_python_m_finds_the_default_policy(module, tmp_path):
    """`python -m harness` installs nothing itself (the entry point's policy); `python -m specdec` installs it."""
    done = subprocess.run([sys.executable, "-m", module, "campaign", "nonesuch"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("specdec: error: unknown campaign 'nonesuch'; available: ") and "zoo" in done.stderr
