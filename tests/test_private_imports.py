"""Library modules do not reach into each other's private names: a helper that two modules share has a public
name in its home module. Scans harness/, suites/, specdec_ref/ and specdec/ (their test files excepted) for
`from X import _name` and `X._name` where X is another module of the project."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "suites", "specdec_ref", "specdec")

# (importing file, module, private name) -> why it is allowed. Keep this empty unless there is a reason.
EXCEPTIONS: dict[tuple[str, str, str], str] = {}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(module: str | None, level: int, here: str, is_package: bool) -> str:
    if level == 0:
        return module or ""
    base = here.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def private_imports(root: Path) -> list[tuple[str, int, str, str]]:
    """(file, line, module, name) for each private name a library module takes from another project module."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path.name.startswith("test_") or path.name == "conftest.py":
                continue
            here = _module_name(path, root)
            tree = ast.parse(path.read_text(), filename=str(path))
            modules: dict[str, str] = {}  # local name -> project module it is bound to
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    source = _absolute(node.module, node.level, here, path.name == "__init__.py")
                    if source.split(".")[0] not in PACKAGES:
                        continue
                    for alias in node.names:
                        if alias.name.startswith("_") and not alias.name.startswith("__") and source != here:
                            found.append((path.relative_to(root).as_posix(), node.lineno, source, alias.name))
                        if _is_module(f"{source}.{alias.name}", root):
                            modules[alias.asname or alias.name] = f"{source}.{alias.name}"
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.split(".")[0] in PACKAGES:
                            local = alias.asname or alias.name.split(".")[0]
                            modules[local] = alias.name if alias.asname else local
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                        and not node.attr.startswith("__")):
                    continue
                chain, value = [], node.value
                while isinstance(value, ast.Attribute):
                    chain.insert(0, value.attr)
                    value = value.value
                if isinstance(value, ast.Name) and value.id in modules:
                    target = ".".join([modules[value.id], *chain])
                    if _is_module(target, root) and target != here:
                        found.append((path.relative_to(root).as_posix(), node.lineno, target, node.attr))
    return found


@pytest.mark.lint
def test_no_library_module_imports_another_modules_private_name():
    found = [f"{file}:{line}: {module}.{name}" for file, line, module, name in private_imports(ROOT)
             if (file, module, name) not in EXCEPTIONS]
    assert found == []  # give the helper a public name in its home module (no leading underscore)


@pytest.mark.lint
def test_the_exceptions_are_still_needed():
    used = {(file, module, name) for file, _, module, name in private_imports(ROOT)}
    assert set(EXCEPTIONS) - used == set()


@pytest.mark.lint
def test_the_scan_finds_each_form_of_private_import(tmp_path):
    pkg = tmp_path / "harness"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "home.py").write_text("def _helper(): ...\ndef helper(): ...\n_CONST = 1\n")
    (pkg / "sub" / "user.py").write_text(
        "from harness.home import _helper, helper\n"
        "from ..home import _CONST\n"
        "import harness.home\n"
        "import harness.home as h\n"
        "from harness import home\n"
        "x = (harness.home._helper, h._CONST, home._helper, home.helper, home.__name__, h.__doc__)\n"
    )
    (pkg / "sub" / "test_user.py").write_text("from harness.home import _helper\n")  # tests may
    (pkg / "home2.py").write_text("from harness.home import helper\n_x = 1\nprint(_x)\n")  # its own names
    found = sorted((file, module, name) for file, _, module, name in private_imports(tmp_path))
    assert found == [("harness/sub/user.py", "harness.home", "_CONST")] * 2 + [
        ("harness/sub/user.py", "harness.home", "_helper")] * 3
