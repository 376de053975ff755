"""The `specdec` console script (pyproject.toml [project.scripts]) and `python -m specdec`: the default policy
installed (specdec._policy), then the harness's command line."""

from __future__ import annotations

from specdec import _policy


def main(argv: list[str] | None = None) -> int:
    from harness.cli import main as harness_main

    _policy.install()
    return harness_main(argv)
