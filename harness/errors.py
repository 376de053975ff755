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


def fault_component(exc: BaseException) -> str:
    """The component an unexpected exception came from, named by the innermost frame of its traceback that lies in
    a known package: 'harness.contexts', 'specdec_ref.runners', 'transformers.models.jamba.modeling_jamba (model or
    kernel)', 'torch.nn.functional (kernel)', ... (the file of the last frame when none does)."""
    import traceback
    from pathlib import Path

    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        parts = Path(frame.filename).with_suffix("").parts
        for root, label in (("transformers", " (model or kernel)"), ("torch", " (kernel)"), ("harness", ""),
                            ("specdec_ref", ""), ("suites", "")):
            if root in parts:
                tail = parts[len(parts) - 1 - parts[::-1].index(root):]  # the last occurrence: the package itself
                name = ".".join(tail[:4]).removesuffix(".__init__")
                return name + label
    return Path(frames[-1].filename).name if frames else "unknown"


def describe_fault(exc: BaseException) -> str:
    """One line for a fault of the run itself (not of the implementation under test): what, where, which component."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {_file_name(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    text = " ".join(str(exc).split())[:300] or "(no message)"
    return (f"the run could not be done: {fault_component(exc)} raised {type(exc).__name__}: {text}{where}; "
            "this is a fault of the harness or its environment, not a verdict on the implementation")


def _file_name(filename: str) -> str:
    from pathlib import Path

    return Path(filename).name
