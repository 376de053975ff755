"""pytest plugin (entry point `pytest11: specdec`). Light on import: torch loads only when a check runs.

Options (group "specdec"): --specdec-seed, --specdec-alpha, --specdec-tv, --specdec-samples.
Fixtures: `assert_lossless` and `assert_lossless_generation` — the functions of harness.testing
with those options as defaults. Marker: `specdec`. The report header shows the seed and levels.
"""

from __future__ import annotations

import functools

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("specdec", "speculative decoding losslessness checks")
    group.addoption("--specdec-seed", type=int, default=0, help="seed of every specdec check (default 0)")
    group.addoption("--specdec-alpha", type=float, default=1e-3,
                    help="family-wise false-alarm rate of each check (default 1e-3)")
    group.addoption("--specdec-tv", type=float, default=0.02,
                    help="sampler level: total variation each tested position detects at power 0.99")
    group.addoption("--specdec-samples", type=int, default=None, help="override the planned sample sizes")


def pytest_configure(config):
    config.addinivalue_line("markers", "specdec: a losslessness check written with the specdec pytest plugin")


def pytest_report_header(config):
    return (f"specdec: seed={config.getoption('specdec_seed')}, false-alarm rate={config.getoption('specdec_alpha')}, "
            f"detectable TV={config.getoption('specdec_tv')}")


def _options(config) -> dict:
    return {"seed": config.getoption("specdec_seed"), "alpha": config.getoption("specdec_alpha"),
            "samples": config.getoption("specdec_samples")}


@pytest.fixture
def assert_lossless(request):
    """assert_lossless(verify, **overrides): sampler-level check with the session's --specdec-* options."""
    from harness import testing

    return functools.partial(testing.assert_lossless, tv=request.config.getoption("specdec_tv"),
                             **_options(request.config))


@pytest.fixture
def assert_lossless_generation(request):
    """assert_lossless_generation(generate, pair="toy", **overrides): generation-level check."""
    from harness import testing

    return functools.partial(testing.assert_lossless_generation, **_options(request.config))
