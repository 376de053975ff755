"""The test layers' markers and what a failure of a stochastic test reports (docs/RUNNING.md, "Test layers").

Three markers, at most one per test (a test with none is a unit test, `nox -s tests`):

* `stochastic(false_alarm=A, seed=S)`: a red run may be chance. A is the test's false-alarm rate, the probability
  that it fails on correct code over the choice of its seed (an upper bound by the recipe of docs/RUNNING.md, or a
  measured rate where the marker's comment says so); S is the seed it runs at: an int, or a text naming several
  ("100..299"). S may be left out where the test takes a `seed` parameter (its value is reported) or draws its
  seed with Hypothesis (the falsifying example names it). A failure's report carries one more section:
  "seed S, false-alarm rate A: a rerun with another seed says whether this was chance". `nox -s statistical`.
* `end_to_end`: a deterministic whole run (served, campaign, command-line, new-user, or an exact computation at
  production size): the same code gives the same outcome at any seed, so a red run is a defect.
  `nox -s statistical`.
* `lint`: reads the repository's text (an AST or text scan of sources, docs or configuration) without running the
  code it reads, and the scan's own test that it sees what it looks for. `nox -s lint`.

tests/conftest.py imports these hooks; tests/test_layers.py runs them on planted tests (pytester).
"""

from __future__ import annotations

import pytest

LAYERS = ("stochastic", "end_to_end", "lint")
MARKERS = (
    "stochastic(false_alarm, seed): a red run may be chance: states its false-alarm rate (the chance it fails on "
    "correct code, over seeds) and its seed; a failure prints both (tests/layers.py). `nox -s statistical`",
    "end_to_end: a deterministic whole run (served, campaign, command line, new user, an exact computation at "
    "production size): a red run is a defect. `nox -s statistical`",
    "lint: an AST or text scan of the repository's sources, docs or configuration (and the scan's own test). "
    "`nox -s lint`",
)
SECTION = "stochastic test: seed and false-alarm rate"


def pytest_configure(config):
    for line in MARKERS:
        config.addinivalue_line("markers", line)


def _is_hypothesis(item) -> bool:
    return hasattr(getattr(item, "obj", None), "hypothesis")


def seed_of(item) -> str | None:
    """The seed a stochastic test runs at, in words; None if it states none."""
    marker = item.get_closest_marker("stochastic")
    seed = marker.kwargs.get("seed") if marker else None
    params = getattr(getattr(item, "callspec", None), "params", {})
    if seed is None and "seed" in params:
        seed = params["seed"]
    if seed is None and _is_hypothesis(item):
        return "drawn by Hypothesis (the falsifying example above names it)"
    return None if seed is None else str(seed)


def problems(item) -> list[str]:
    """Why `item`'s layer markers break the rules above (empty if they keep them)."""
    layers = [name for name in LAYERS if item.get_closest_marker(name)]
    out = [f"carries {' and '.join(layers)}: one layer marker at most"] if len(layers) > 1 else []
    marker = item.get_closest_marker("stochastic")
    if marker is None:
        return out
    rate = marker.kwargs.get("false_alarm")
    if marker.args or set(marker.kwargs) - {"false_alarm", "seed"}:
        out.append("stochastic takes the keywords false_alarm= and seed= only")
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 < rate < 1:
        out.append(f"stochastic needs false_alarm=A with 0 < A < 1 (its false-alarm rate), not {rate!r}")
    if seed_of(item) is None:
        out.append("stochastic needs seed=S (or a `seed` parameter, or Hypothesis drawing it)")
    return out


def pytest_collection_modifyitems(config, items):
    found = [f"{item.nodeid}: {why}" for item in items for why in problems(item)]
    if found:
        raise pytest.UsageError("layer markers (tests/layers.py):\n  " + "\n  ".join(found))


def failure_line(item) -> str:
    rate = item.get_closest_marker("stochastic").kwargs["false_alarm"]
    return f"seed {seed_of(item)}, false-alarm rate {rate:g}: a rerun with another seed says whether this was chance"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and item.get_closest_marker("stochastic"):
        report.sections.append((SECTION, failure_line(item)))
