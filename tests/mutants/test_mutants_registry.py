"""The mutant zoo's registry: coverage of the issue's list, names, lookups, importable specs."""

import pytest

from harness.adapters.loading import check_signature, load_callable
from harness.errors import HarnessError, UnknownNameError
from harness.mutants import get, implementations, register
from harness.mutants import registry as registry_module

# The issue's list of bug classes, each with the zoo entries that model it.
ISSUE_BUG_CLASSES = {
    "always accept": ["always_accept"],
    "residual from p": ["residual_from_p"],
    "residual from q": ["residual_from_q"],
    "inverted ratio": ["inverted_ratio"],
    "greedy draft with softmax q": ["greedy_draft_softmax_q", "draft_greedy_softmax_q"],
    "q for the ratio ≠ q the tokens came from": ["ratio_q_unprocessed", "draft_q_unprocessed"],
    "temperature / top-k / top-p on one side only": ["target_ignores_temperature", "top_k_draft_only",
                                                     "top_p_draft_only", "target_ignores_sampling_params",
                                                     "processing_first_position_only", "residual_temperature"],
    "bonus token from the wrong position": ["bonus_wrong_position"],
    "residual at the wrong position": ["residual_next_position", "residual_previous_position"],
    "q rounded to bf16 on one side": ["q_bf16_one_side"],
    "stale KV cache after a rejection": ["stale_target_cache"],
    "EOS inside a draft block mishandled": ["eos_continues_in_block", "eos_dropped_in_block"],
    "random numbers reused": ["reused_uniform_residual", "same_uniform_all_positions"],
    "out-of-range recovered id": ["out_of_range_recovered"],
    "silently greedy at temperature > 0": ["greedy_at_temperature", "greedy_verify_when_sampling"],
}


def test_zoo_covers_every_bug_class_of_the_issue():
    mutants = {impl.name for impl in implementations(kind="mutant")}
    for bug, names in ISSUE_BUG_CLASSES.items():
        assert set(names) <= mutants, (bug, set(names) - mutants)
    assert len(mutants) >= 15


def test_zoo_has_controls_equivalents_and_wasteful_variants():
    sampler_controls = {impl.name for impl in implementations(kind="control", contract="sampler")}
    assert {"reference_verify", "exponential_race", "per_row_loop"} <= sampler_controls
    generation_controls = {impl.spec for impl in implementations(kind="control", contract="generation")}
    assert {"specdec_ref.adapters:generate", "harness.adapters.control:target_only_generate"} <= generation_controls
    assert len(implementations(kind="equivalent")) >= 3
    assert len(implementations(kind="wasteful")) >= 2
    assert all(not impl.spec.startswith("harness.adapters.hf") for impl in implementations())


def test_every_entry_is_documented_and_consistent():
    names = [impl.name for impl in implementations()]
    assert len(names) == len(set(names))
    for impl in implementations():
        assert impl.contract in registry_module.CONTRACTS and impl.kind in registry_module.KINDS
        assert impl.models and impl.description, impl.name
        if impl.fn.__module__.startswith("harness.mutants"):  # the zoo's own entries document the bug
            assert impl.fn.__doc__, impl.name
        assert impl.must_pass == (impl.kind != "mutant")
        if impl.contract == "generation":
            assert impl.exact_law is None and impl.position_laws is None


@pytest.mark.parametrize("impl", implementations(), ids=lambda impl: impl.name)
def test_spec_loads_the_same_callable_with_a_contract_signature(impl):
    fn = load_callable(impl.spec)
    assert fn is impl.fn
    check_signature(fn, impl.contract, impl.spec)


def test_filters_and_lookup():
    assert all(impl.contract == "sampler" for impl in implementations(contract="sampler"))
    assert get("residual_from_p").kind == "mutant"
    with pytest.raises(UnknownNameError, match="Did you mean 'residual_from_p'"):
        get("residual_form_p")
    with pytest.raises(HarnessError, match="kind must be one of"):
        implementations(kind="bug")
    with pytest.raises(HarnessError, match="contract must be one of"):
        implementations(contract="kernel")


def test_catalogue_refuses_duplicates_and_register_bad_fields(monkeypatch):
    import sys
    import types

    from harness.mutants import registry

    fake = types.ModuleType("fake_zoo")
    for attr in ("a", "b"):
        fn = register("residual_from_p", contract="sampler", kind="mutant", models="x")(lambda *a: None)
        fn.__module__ = "fake_zoo"
        setattr(fake, attr, fn)
    monkeypatch.setitem(sys.modules, "fake_zoo", fake)
    monkeypatch.setattr(registry, "CATALOGUE", ("fake_zoo",))
    registry._catalogue.cache_clear()
    with pytest.raises(ValueError, match="declared twice"):
        registry.implementations()
    registry._catalogue.cache_clear()
    with pytest.raises(ValueError, match="kind must be one of"):
        register("new", contract="sampler", kind="bug", models="x")
    with pytest.raises(ValueError, match="contract must be one of"):
        register("new", contract="kernel", kind="mutant", models="x")
