"""The fused kernel: validation's row sums are reused by the rule, and the fast validation path
refuses exactly what the full check refuses."""

import pytest
import torch

from specdec_ref.errors import SpecDecInputError
from specdec_ref.verify import check_probs, verify_from_uniforms, verify_step


def _inputs(B=32, gamma=3, V=500, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, gamma + 1, V, generator=g, dtype=torch.float64) * 2
    p = z.softmax(-1)
    q = (z[:, :gamma] + torch.randn(B, gamma, V, generator=g, dtype=torch.float64)).softmax(-1)
    q[:4] = p[:4, :gamma]  # p = q rows: zero residual mass
    x = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, gamma)
    u = torch.rand(B, gamma + 1, generator=g, dtype=torch.float64)
    return p.to(dtype), q.to(dtype), x, u


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_validated_and_unvalidated_paths_emit_the_same_tokens(dtype):
    p, q, x, u = _inputs(dtype=dtype)
    a = verify_from_uniforms(p, q, x, u[:, :3], u[:, 3], validate=True)
    b = verify_from_uniforms(p, q, x, u[:, :3], u[:, 3], validate=False)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.n_accepted, b.n_accepted)
    assert (a.n_accepted < 3).any() and (a.n_accepted == 3).any()  # both the residual and the bonus path ran


def test_non_contiguous_inputs_give_the_contiguous_answer():
    p, q, x, u = _inputs()
    wide_p = torch.cat([p, p], dim=-1)[..., : p.shape[-1]]  # same values, row stride 2V
    assert not wide_p.is_contiguous()
    a = verify_step(p, q, x, torch.Generator().manual_seed(5))
    b = verify_step(wide_p, q, x, torch.Generator().manual_seed(5))
    assert torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize("value,ok", [(-1e-12, False), (-0.0, True), (float("nan"), False), (1.5, False)])
def test_fast_validation_refuses_what_the_full_check_refuses(value, ok):
    p = torch.full((2, 3, 4), 0.25)
    p[1, 2, 0] = value
    if value == -0.0:
        p[1, 2, 1] = 0.5  # the row still sums to 1
    if ok:
        assert torch.allclose(check_probs(p, "p"), torch.ones(2, 3))
    else:
        with pytest.raises(SpecDecInputError):
            check_probs(p, "p")


# --- the chunked validation (one read of p and q on CPU) -------------------------------------------

@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("value", [-1e-12, float("nan"), float("inf")])
def test_chunked_validation_finds_a_bad_entry_in_any_chunk(where, value):
    V = 32_000  # wide enough that p is taken in several cache-sized chunks
    p = torch.full((6, 8, V), 1.0 / V)
    row = {"first": (0, 0), "middle": (3, 4), "last": (5, 7)}[where]
    p[row][V - 1] = value
    if value < 0:
        p[row][0] += 1e-12  # the row still sums to 1 (within float32)
    with pytest.raises(SpecDecInputError):
        check_probs(p, "p")


def test_chunked_validation_returns_the_row_sums_of_the_plain_reduction():
    g = torch.Generator().manual_seed(3)
    p = torch.rand(5, 9, 32_000, generator=g).softmax(-1)
    assert torch.equal(check_probs(p, "p"), p.sum(-1, dtype=torch.float32))


# --- the two-level inverse-CDF sampler (wide vocabularies) -----------------------------------------

def _flat_inverse_cdf(probs, u):  # the definition: one float64 cumulative sum over the row
    cdf = probs.double().cumsum(-1)
    return torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)


@pytest.mark.parametrize("V", [4096, 32_000, 32_000 + 77, 151_936])  # with and without a short last block
def test_two_level_sampler_agrees_with_one_cumulative_sum(V):
    from specdec_ref.sampling import sample_from_uniform
    g = torch.Generator().manual_seed(V)
    probs = (torch.randn(64, V, generator=g) * 3).softmax(-1)
    probs[:, ::7] = 0  # zero-mass tokens inside blocks
    probs[:8, : V // 2] = 0  # zero-mass blocks
    u = torch.rand(64, generator=g, dtype=torch.float64)
    u[0], u[1] = 0.0, 1 - 1e-16  # both ends
    got = sample_from_uniform(probs, u)
    want = _flat_inverse_cdf(probs, u)
    assert (probs.gather(1, got.unsqueeze(1)) > 0).all()  # never a zero-mass token
    # Only rows whose u lands within float32 rounding of a cell boundary could differ.
    assert (got == want).float().mean() >= 62 / 64


@pytest.mark.end_to_end
def test_two_level_sampler_law_is_the_row_law():
    from specdec_ref.sampling import sample_from_uniform
    V = 8192
    probs = torch.zeros(1, V)
    probs[0, [3, 300, 4000, V - 1]] = torch.tensor([0.1, 0.2, 0.3, 0.4])
    u = (torch.arange(100_000, dtype=torch.float64) + 0.5) / 100_000  # a fine grid of u
    tokens = sample_from_uniform(probs.expand(100_000, V), u)
    freq = torch.bincount(tokens, minlength=V)[[3, 300, 4000, V - 1]].double() / 100_000
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64), atol=2e-5)


def test_sampler_gives_minus_one_for_a_row_without_mass():
    from specdec_ref.sampling import sample_from_uniform
    for V in (10, 8192):
        probs = torch.zeros(2, V)
        probs[1, 5] = 1.0
        assert sample_from_uniform(probs, torch.tensor([0.3, 0.3], dtype=torch.float64)).tolist() == [-1, 5]


def test_a_rejection_with_no_residual_mass_emits_p():
    """u = 1 rejects even where p = q (the residual is then all zero, as float rounding can make it):
    the token must come from p_n, in the fast path and in the exact law alike."""
    from specdec_ref.sampling import sample_from_uniform
    from specdec_ref.verify import accept_and_final_law
    V = 32_000
    p, q, x, u = _inputs(B=16, gamma=2, V=V, seed=4)
    u[:4, :2] = 1.0  # rows 0-3 have p = q
    out = verify_from_uniforms(p, q, x, u[:, :2], u[:, 2])
    assert (out.n_accepted[:4] == 0).all()
    assert torch.equal(out.tokens[:4, 0], sample_from_uniform(p[:4, 0], u[:4, 2]))
    n, law = accept_and_final_law(p, q, x, u[:, :2])
    assert torch.allclose(law[:4], p[:4, 0] / p[:4, 0].sum(-1, keepdim=True))
    assert torch.allclose(law.sum(-1), torch.ones(16))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_two_level_sampler_in_other_precisions(dtype):
    from specdec_ref.sampling import sample_from_uniform
    g = torch.Generator().manual_seed(1)
    probs = torch.randn(16, 8192, generator=g).softmax(-1)
    u = torch.rand(16, generator=g, dtype=torch.float64)
    low = probs.to(dtype)
    got = sample_from_uniform(low, u)
    assert (low.gather(1, got.unsqueeze(1)) > 0).all()
    assert (got == _flat_inverse_cdf(low.double(), u)).float().mean() >= 14 / 16
