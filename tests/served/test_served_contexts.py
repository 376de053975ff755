"""Contexts cells at the engine level: the generation level's pooled PIT over many contexts, the continuations
drawn over HTTP from `specdec serve` (a small catalogue: CI-fast; the full plan: suites.campaigns.contexts)."""

from __future__ import annotations

import pytest

from harness.check.settings import Setting
from harness.contexts import BLOCK_SIZES, CONTINUATION, random_contexts
from harness.errors import HarnessError
from harness.mutants.registry import get
from harness.pairs import get_pair
from harness.served import context_cells
from harness.served.check import run_engine_check
from harness.served.config import EngineConfig
from harness.served.serve import serving
from specdec_ref.adapters import generate


@pytest.fixture
def small_catalogue(monkeypatch):
    """Two prompt lengths, 40-token continuations crossing the 16-, 32- and 48-token block boundaries."""
    plan = {"contexts": random_contexts(16, lengths=(14, 30), pairs=4), "block_sizes": BLOCK_SIZES,
            "length": CONTINUATION}
    monkeypatch.setattr(context_cells, "contexts_plan", lambda run: plan)
    return plan


def _config(url, **kw):
    return EngineConfig(endpoint=url + "/v1", pair="toy", contexts="catalogue", samples=300, prompts=1,
                        chunk=300, settings=(Setting(1.0),), seed=2, stop_on_fail=False, **kw)


@pytest.mark.stochastic(false_alarm=0.011, seed=2)  # PASS 0.001 + FAIL 0.01
def test_the_reference_passes_and_the_block_boundary_mutant_fails_over_http(small_catalogue):
    pair = get_pair("toy")
    with serving(generate, pair) as good:
        ok = run_engine_check(_config(good.url))
    names = [t.name for t in ok.tests]
    assert ok.verdict == "pass", [t.name for t in ok.tests if t.reject]
    assert any(n.endswith("/contexts/pit_uniform") for n in names)
    assert any("abs_mod16_eq0" in n for n in names) and ok.declared_tests == len(ok.tests)
    pooled = next(t for t in ok.tests if t.name.endswith("/contexts/pit_uniform"))
    assert pooled.details["scope"] == "pooled"  # the pooled PIT states its own guarantee, never the headline's
    assert ok.headline["scope"] == "one law" and "/prompt0/" in ok.headline["test"]
    cell = next(c for c in ok.cases if c["name"].endswith("/contexts"))
    assert cell["contexts"] == 16 and cell["samples"] == 300
    with serving(get("stale_page_at_block_boundary_sampling").fn, pair) as bad_server:
        bad = run_engine_check(_config(bad_server.url))
    rejected = [t.name for t in bad.tests if t.reject]
    assert bad.verdict == "fail" and any("/contexts/" in n for n in rejected), rejected
    assert any("abs_mod16_eq0" in n for n in rejected), rejected


def test_contexts_need_the_local_target():
    with pytest.raises(HarnessError, match="contexts catalogue needs the target"):
        EngineConfig(endpoint="http://127.0.0.1:1/v1", contexts="catalogue").validate()
    with pytest.raises(HarnessError, match="--contexts must be"):
        EngineConfig(endpoint="http://127.0.0.1:1/v1", pair="toy-low", contexts="all").validate()
