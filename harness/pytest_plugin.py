"""pytest plugin (entry point `pytest11: specdec`). Light on import: torch loads only when a check runs.

Options (group "specdec"), built from `CheckConfig` fields: --specdec-false-alarm-rate, --specdec-tv,
--specdec-power, --specdec-seed, --specdec-samples.
Fixtures, one per verifier family and level — the functions of harness.testing with those options as
defaults: `assert_lossless` (chain), `assert_lossless_block`, `assert_lossless_tree`,
`assert_lossless_generation`. Marker: `specdec`. The report header shows the seed and levels.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest

from harness.check.config import PYTEST_OPTION_FIELDS as OPTION_FIELDS
from harness.check.config import CheckConfig


def _fields():
    return [f for f in dataclasses.fields(CheckConfig) if f.name in OPTION_FIELDS]


def pytest_addoption(parser):
    group = parser.getgroup("specdec", "speculative decoding losslessness checks")
    for field in _fields():
        meta = field.metadata
        default = "" if field.default is None else f" (default {field.default})"  # None: the help says what applies
        group.addoption("--specdec-" + meta["flag"].removeprefix("--"), dest=f"specdec_{field.name}",
                        type=meta["parse"], default=field.default, help=f"{meta['help']}{default}")


def pytest_configure(config):
    config.addinivalue_line("markers", "specdec: a losslessness check written with the specdec pytest plugin")


def _options(config) -> dict:
    return {name: config.getoption(f"specdec_{name}") for name in OPTION_FIELDS}


def planned_tv(tv: float | None) -> str:
    """What the sampler-level fixtures plan to detect: --specdec-tv, else each family's default (never "None")."""
    from harness.check.config import DEFAULT_TREE_TV, DEFAULT_TV

    if tv is None:
        planned = f"{DEFAULT_TV:g} per tested position ({DEFAULT_TREE_TV:g} per tested node of a tree)"
    else:
        planned = f"{tv:g} per tested position or node"
    return f"{planned}, at the sampler level; a case planned wider keeps its own (each report's notes list them)"


def pytest_report_header(config):
    o = _options(config)
    return (f"specdec: seed={o['seed']}, false-alarm rate={o['false_alarm_rate']}, power={o['power']}, "
            f"detectable TV planned: {planned_tv(o['tv'])}")


def _fixture(request, name: str, **fixed):
    from harness import testing

    options = _options(request.config)
    if name == "assert_lossless_generation":
        options.pop("tv")
    return functools.partial(getattr(testing, name), **options, **fixed)


@pytest.fixture
def assert_lossless(request):
    """assert_lossless(verify, **overrides): sampler-level check of a chain verifier (contract §1a)."""
    return _fixture(request, "assert_lossless")


@pytest.fixture
def assert_lossless_block(request):
    """assert_lossless_block(verify, **overrides): sampler-level check of a block verifier (§1a signature)."""
    return _fixture(request, "assert_lossless_block")


@pytest.fixture
def assert_lossless_tree(request):
    """assert_lossless_tree(tree_verify, **overrides): sampler-level check of a tree verifier (§1c)."""
    return _fixture(request, "assert_lossless_tree")


@pytest.fixture
def assert_lossless_generation(request):
    """assert_lossless_generation(generate, pair="toy", **overrides): generation-level check."""
    return _fixture(request, "assert_lossless_generation")
