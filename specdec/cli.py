"""The `specdec` console script (pyproject.toml [project.scripts]) and `python -m specdec`: the harness's command
line with the default policy installed (importing this module imports the package `specdec`, whose import installs
it: specdec/_policy.py)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from harness.cli import main as harness_main

    return harness_main(argv)
