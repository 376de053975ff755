"""The policy / mechanism split: results producers live in suites/, reached through `specdec`.

(The import-layer rules — statistics import no torch, harness imports nothing from suites, no cycles —
are import-linter contracts in pyproject.toml, run by `nox -s lint` in CI.)"""

from __future__ import annotations

import ast
import pathlib

from harness.cli import campaign_names, main, policy

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENTRY_POINTS = {"harness/__main__.py", "harness/cli.py"}


def _main_blocks(package: str) -> list[str]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and rel not in ENTRY_POINTS:
                found.append(rel)
    return found


def test_no_hidden_python_m_producers_in_the_harness():
    assert _main_blocks("harness") == []


def test_every_campaign_is_reachable_from_specdec(capsys):
    names = campaign_names()
    assert {"zoo", "sequential", "tree", "families", "engine", "params", "invariance", "demo"} <= set(names)
    for name in names:
        assert callable(policy(name).main), name
    assert main(["campaign", "no-such-campaign"]) == 2
    assert "unknown campaign" in capsys.readouterr().err


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert capsys.readouterr().out.startswith("specdec ")
