"""Sequential sampler check: early verdicts on planted bugs, reference passes, the family is counted exactly."""

import numpy as np
import pytest

from harness.check.sequential import _schedule, family_size, mass_above, run_sampler_check_sequential
from harness.mutants import get
from harness.stats import mass_above_descending
from specdec_ref.adapters import verify
from tests.impls import broken

FAST = ["anti-logits", "binary-gamma8", "q-zero-where-p-positive"]


def _run(impl, cases=FAST, **kw):
    return run_sampler_check_sequential(impl, cases=cases, seed=0, tv=kw.pop("tv", 0.05), **kw)


def test_reference_reaches_the_plan_and_passes_with_every_test_of_the_family():
    report = _run(verify)
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]
    assert all(c["rows"] == c["planned_rows"] for c in report.cases)
    assert report.samples == sum(c["planned_rows"] for c in report.cases)
    assert len(report.tests) == family_size(FAST, 0)  # the counters match what the run emits
    assert any(t.details.get("anytime_valid") for t in report.tests)
    assert any(t.name.endswith("pooled_pearson") for t in report.tests)  # the fixed-n battery decided too


@pytest.mark.parametrize("mutant", [broken.always_accept, broken.residual_from_p])
def test_planted_bugs_are_decided_early(mutant):
    report = _run(mutant, tv=0.02)
    planned = sum(c["planned_rows"] for c in report.cases)
    assert report.verdict == "fail"
    assert report.samples <= 0.02 * planned, (report.samples, planned)
    rejected = [t for t in report.tests if t.reject]
    assert rejected and all(t.details.get("anytime_valid") or t.p_value == 0.0 for t in rejected)
    assert any("stopped in case" in n for n in report.notes)


def test_shared_randomness_across_rows_is_caught_by_the_serial_process():
    """Planted bug for the rows_independent e-process: neighbouring rows share their uniforms."""
    report = _run(broken.shared_uniforms_across_rows, cases=["anti-logits"])
    assert [t.name for t in report.tests if t.reject] == ["anti-logits/seq_rows_independent"]
    assert report.samples < report.cases[0]["planned_rows"]


def test_excess_acceptance_is_caught_by_the_bernoulli_process():
    """Planted bug for the accept e-processes: one acceptance uniform for all positions of a row (acceptance of
    later drafts rises above Σ min(p, q) — and here only the one-sided acceptance process sees it first)."""
    report = _run(get("same_uniform_all_positions").fn, cases=["binary-gamma8"], tv=0.02)
    rejected = [t.name for t in report.tests if t.reject]
    assert rejected and all("seq_above_optimal" in name for name in rejected), rejected


def test_format_problems_stop_at_once():
    report = _run(broken.wrong_shape)
    assert report.verdict == "fail" and report.samples < 100
    assert any(t.reject and t.name.endswith("/format") for t in report.tests)


def test_wasteful_variant_passes():
    """Acceptance below the optimum is lossless: the one-sided processes must not grow (composite null)."""
    report = _run(get("always_reject").fn)
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]


def test_schedule_and_surprisal_order():
    looks = _schedule(60_000, 1e-3, 1.15)
    assert looks[0] == 60 and looks[-1] == 60_000 and np.all(np.diff(looks) > 0)
    assert max(b / a for a, b in zip(looks, looks[1:], strict=False)) <= 1.15 + 1 / 60
    p = np.array([0.2, 0.4, 0.2, 0.2])
    tokens = np.arange(4)
    assert np.allclose(mass_above(p), mass_above_descending(np.tile(p, (4, 1)), tokens))
