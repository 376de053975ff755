"""The engine registry: every engine of the catalogue, its adapter imported, with what `specdec engines` lists."""

from __future__ import annotations

import importlib

from harness.engines.base import Engine, Probe, registered
from harness.engines.catalogue import ADAPTERS
from harness.errors import HarnessError

_DECLARED = "harness.engines.declared"


def load() -> tuple[dict[str, type[Engine]], dict[str, str]]:
    """(name -> adapter class, in the catalogue's order; name -> why its adapter module did not import, where it
    did not). The declared-only registrations come first; a module that exists replaces them with its adapter."""
    importlib.import_module(_DECLARED)
    failed: dict[str, str] = {}
    for name, module in ADAPTERS.items():
        if module == _DECLARED:
            continue
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the module exists but needs something missing: say so
                failed[name] = f"adapter {module} did not import: {exc}"
        except Exception as exc:  # an adapter that is broken must not break the listing of the others
            failed[name] = f"adapter {module} did not import: {type(exc).__name__}: {exc}"
    found = registered()
    missing = [n for n in ADAPTERS if n not in found]
    if missing:
        raise HarnessError(f"catalogue engines with no registration: {', '.join(missing)}")
    extra = {n: c for n, c in found.items() if n not in ADAPTERS}  # e.g. a test's fake adapter
    return {**{n: found[n] for n in ADAPTERS}, **extra}, failed


def get(name: str) -> type[Engine]:
    engines, _ = load()
    if name not in engines:
        raise HarnessError(f"no engine {name!r}; registered: {', '.join(engines)}")
    return engines[name]


def probe(cls: type[Engine]) -> Probe:
    """`cls.installed()`, never raising (a probe that raises is itself reported)."""
    try:
        return cls.installed()
    except Exception as exc:
        return Probe(False, f"installed() raised {type(exc).__name__}: {exc}")


def listing() -> list[dict]:
    """One row per engine: name, kind, version, installed and why, runnable and why, capabilities."""
    import dataclasses

    engines, failed = load()
    rows = []
    for name, cls in engines.items():
        p = probe(cls)
        rows.append({"name": name, "kind": cls.kind, "version": p.version, "installed": p.installed,
                     "reason": p.reason, "runnable": cls.runnable,
                     "not_runnable_why": failed.get(name) or cls.not_runnable_why,
                     "capabilities": dataclasses.asdict(cls.capabilities)})
    return rows
