"""Logits processing: temperature → top-k → top-p → softmax, matching transformers' warpers."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_ref.processing import logits_to_probs


def test_greedy_is_exact_one_hot_first_index_on_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0, -2.0]])
    probs = logits_to_probs(logits, 0.0)
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0]]


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), temperature=st.floats(0.3, 2.0), top_k=st.one_of(st.none(), st.integers(1, 20)),
       top_p=st.one_of(st.none(), st.floats(0.05, 1.0)))
def test_matches_transformers_warpers(seed, temperature, top_k, top_p):
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k is not None:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    expected = warpers(None, logits.clone()).softmax(-1)
    ours = logits_to_probs(logits, temperature, top_k, top_p)
    assert torch.allclose(ours, expected, atol=1e-12)


def test_top_p_keeps_the_crossing_token_and_top_k_keeps_ties():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)
    out = logits_to_probs(probs.log(), 1.0, top_p=0.79)
    assert (out > 0).tolist() == [[True, True, False, False]]
    out = logits_to_probs(probs.log(), 1.0, top_p=0.81)
    assert (out > 0).tolist() == [[True, True, True, False]]
    tied = torch.tensor([[2.0, 1.0, 1.0, 0.0]])
    assert (logits_to_probs(tied, 1.0, top_k=2) > 0).tolist() == [[True, True, True, False]]


@pytest.mark.parametrize("kwargs,needle", [
    (dict(temperature=-0.5), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=1.0, top_k=0), "top_k"),
    (dict(temperature=1.0, top_p=0.0), "top_p"),
    (dict(temperature=1.0, top_p=1.5), "top_p"),
])
def test_bad_sampling_params_name_the_argument(kwargs, needle):
    from specdec_ref import SpecDecInputError

    with pytest.raises(SpecDecInputError, match=needle):
        logits_to_probs(torch.zeros(1, 4), **kwargs)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_and_inf_logits_are_refused(bad):
    from specdec_ref import SpecDecInputError

    logits = torch.zeros(2, 4)
    logits[1, 2] = bad
    with pytest.raises(SpecDecInputError, match=r"NaN or \+inf"):
        logits_to_probs(logits, 1.0)


@pytest.mark.end_to_end
def test_wide_top_p_takes_the_candidates_path_and_matches_the_exact_nucleus():
    """V > 1024: the nucleus is found among torch.topk candidates (a sort only for rows whose nucleus is
    wider); the kept set equals the float64 full-sort nucleus, peaked and flat rows alike."""
    import math

    from specdec_ref.processing import _top_p, _top_p_sorted

    V = 49_152
    g = torch.Generator().manual_seed(1)
    zipf = -1.1 * torch.log(torch.arange(1, V + 1, dtype=torch.float64)).float()
    peaked = (zipf[torch.randperm(V, generator=g)] + torch.randn(64, V, generator=g)) / 0.7
    flat = torch.randn(16, V, generator=g) * 0.5  # nucleus of thousands of tokens: the sorted fallback
    x = torch.cat([peaked, flat])
    x[3, 10:] = -math.inf  # a row with few finite scores
    for top_p in (0.5, 0.9, 0.99):
        got = torch.isinf(_top_p(x, top_p))
        exact = torch.isinf(_top_p_sorted(x.double(), top_p))
        assert torch.equal(got, exact), (top_p, (got != exact).sum())
    assert _top_p(x.view(8, 10, V), 0.9).shape == (8, 10, V)
