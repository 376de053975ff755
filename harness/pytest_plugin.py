"""pytest plugin (entry point `pytest11: specdec`): light on import — no torch until a check runs."""

from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line("markers", "specdec: a losslessness check written with the specdec pytest plugin")
