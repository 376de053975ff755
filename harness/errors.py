"""Errors the harness reports to users (the CLI turns these into exit code 2 and a one-line message)."""

from __future__ import annotations

import difflib


class HarnessError(Exception):
    """Bad usage or input detected by the harness: the message says what to do."""


class UnknownNameError(HarnessError, KeyError):
    """A registry lookup failed; the message lists close matches ("Did you mean ...?")."""

    def __init__(self, kind: str, name: str, known: list[str]):
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        super().__init__(f"unknown {kind} {name!r}.{hint} Known: {', '.join(sorted(known))}")

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0])


class MissingOptionalPackage(HarnessError):
    """An optional dependency is needed for the requested feature."""

    def __init__(self, package: str, feature: str, install: str):
        super().__init__(f"{feature} needs the optional package {package!r}: install it with `{install}`")
