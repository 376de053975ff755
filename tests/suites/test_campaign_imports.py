"""No campaign imports another (issue 56): what two campaigns share lives in a helper module of suites/campaigns
(`_name.py`), and no helper leads one campaign to another either. An AST scan of every import, at any depth of the
module (the campaigns import lazily, inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CAMPAIGNS = Path(__file__).resolve().parents[2] / "suites" / "campaigns"


def _imports(path: Path) -> set[str]:
    """The suites.campaigns modules `path` imports (their short names)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("suites.campaigns."):
                out.add(node.module.split(".")[2])
            elif node.module == "suites.campaigns":
                out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[2] for a in node.names if a.name.startswith("suites.campaigns."))
    return out


def _graph() -> dict[str, set[str]]:
    return {p.stem: _imports(p) for p in CAMPAIGNS.glob("*.py") if p.stem != "__init__"}


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """The campaigns `start` reaches through its imports and the helpers' imports (not through other campaigns)."""
    seen, todo, campaigns = set(), list(graph.get(start, ())), set()
    while todo:
        name = todo.pop()
        if name in seen or name == start:
            continue
        seen.add(name)
        if name.startswith("_"):
            todo.extend(graph.get(name, ()))
        else:
            campaigns.add(name)
    return campaigns


@pytest.mark.lint
def test_no_campaign_imports_another():
    graph = _graph()
    assert len([name for name in graph if not name.startswith("_")]) >= 20  # the scan sees the campaigns
    crossings = {name: sorted(reached(graph, name)) for name in graph if not name.startswith("_")}
    assert {name: found for name, found in crossings.items() if found} == {}


@pytest.mark.lint
def test_the_scan_sees_a_crossing_at_any_depth():
    graph = {"a": {"_shared"}, "_shared": {"b"}, "b": set(), "c": {"_c_report"}, "_c_report": {"c"}}
    assert reached(graph, "a") == {"b"}
    assert reached(graph, "c") == set()  # a campaign's own helper may import the campaign back
    source = "def f():\n    from suites.campaigns.zoo import run_task\n"
    path = CAMPAIGNS.parent.parent / "tests" / "suites" / "_scan_probe.py"
    try:
        path.write_text(source, encoding="utf-8")
        assert _imports(path) == {"zoo"}
    finally:
        path.unlink()
