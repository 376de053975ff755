"""The policy layer (suites/) seen from the mechanism: modules loaded by name, never imported statically
(an import-linter contract keeps harness/ free of `import suites`), so the harness runs the policy's
catalogues and campaigns without depending on them."""

from __future__ import annotations

import importlib

from harness.errors import HarnessError


def catalogue(name: str):
    """suites.catalogues.NAME: the cases, settings or prompts a check runs when the user names none."""
    return load(f"catalogues.{name}", "catalogue")


def results_folder(command: str) -> str:
    """The results/ folder `specdec COMMAND` writes to without --out (suites/outputs.py)."""
    return load("outputs", "outputs table").FOLDERS[command]


def load(name: str, what: str = "policy module"):
    """`suites.NAME` (e.g. "campaigns.zoo", "http_bench"); a missing one is a HarnessError (exit 2)."""
    try:
        return importlib.import_module(f"suites.{name}")
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == "suites" or exc.name.startswith(f"suites.{name.split('.')[0]}")):
            raise HarnessError(f"unknown {what} {name!r} (suites/ is not importable here, or it has no such module)") from None
        raise
