import pytest
import torch


@pytest.fixture(scope="session")
def toy64():
    """The default toy pair in float64 (exact comparisons)."""
    from harness.models.toy_pairs import _toy_models

    return _toy_models("0.7", torch.float64)


# The toy models are tiny: OpenMP threads only add contention (measured 1.8 ms vs 14-37 ms per
# forward on a loaded 2-core machine).
torch.set_num_threads(1)
