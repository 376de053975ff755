import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# the layer markers (stochastic, end_to_end, lint): registered, checked at collection, a stochastic failure's seed
# and false-alarm rate added to its report
from tests.layers import pytest_collection_modifyitems, pytest_configure, pytest_runtest_makereport  # noqa: F401

# Hypothesis profiles, chosen with $HYPOTHESIS_PROFILE. "ci" (the default, what `nox -s tests` runs): each
# property's own example count (tests/check/test_invariance.py keeps its few, derandomized). "thorough": many
# random examples of every property whose count is not fixed by its test (the invariance properties included).
settings.register_profile("ci", deadline=None)
settings.register_profile("thorough", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def toy64():
    """The default toy pair in float64 (exact comparisons)."""
    from harness.models.toy_pairs import toy_models

    return toy_models("0.7", torch.float64)


# The toy models are tiny: OpenMP threads only add contention (measured 1.8 ms vs 14-37 ms per
# forward on a loaded 2-core machine).
torch.set_num_threads(1)
