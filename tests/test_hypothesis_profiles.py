"""The hypothesis profiles of tests/conftest.py: registered, and the one $HYPOTHESIS_PROFILE names is loaded."""

import os

from hypothesis import settings


def test_profiles_are_registered_and_the_named_one_is_loaded():
    ci, thorough = settings.get_profile("ci"), settings.get_profile("thorough")
    assert ci.deadline is None and thorough.max_examples == 200
    loaded = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    assert (settings.default.max_examples, settings.default.deadline) == (loaded.max_examples, loaded.deadline)
