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
