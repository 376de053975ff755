"""The planted copies of OpenVINO GenAI's speculative-sampling rule (harness.mutants.openvino): contract shape, and
the laws they emit on one tiny case, against the closed forms of the rules as read."""

from __future__ import annotations

import torch

from harness.mutants.openvino import as_read_verify, patched_4190_verify, uniform101_verify

P = torch.tensor([0.5, 0.3, 0.2])  # q = p: a draft identical to the target


def _rows(fn, p0, q0, p1, n=200_000, seed=0):
    g = torch.Generator().manual_seed(seed)
    target = torch.stack([p0, p1]).expand(n, 2, 3).contiguous()
    draft = q0.expand(n, 1, 3).contiguous()
    tokens = torch.multinomial(q0, n, replacement=True, generator=g).view(n, 1)
    return fn(target, draft, tokens, g), tokens


def _first_law(out):
    return torch.bincount(out[:, 0], minlength=3).double() / out.shape[0]


def test_contract_shape_and_padding():
    out, tokens = _rows(as_read_verify, P, P, P, n=1000)
    assert out.shape == (1000, 2) and out.dtype == torch.long
    kept = out[:, 1] >= 0
    assert torch.equal(out[kept, 0], tokens[kept, 0])  # two tokens emitted: the first is the accepted draft
    assert ((out >= 0).sum(1) >= 1).all()


def _accept(a, b):
    """P(r <= a / b), r = k / 100 with k uniform on 0..100."""
    return min(101, int(torch.floor(torch.tensor(100 * a / b)).item()) + 1) / 101


def test_as_read_rule_moves_the_law_with_an_identical_draft():
    # As read: accept d iff r <= q(d) / p(x), x a fresh sample; on a rejection the token comes from position 1.
    # With position 1's law a point mass on token 2, P(first = y) = q(y) a(y) + [y = 2] (1 - sum_d q(d) a(d)).
    p1 = torch.tensor([0.0, 0.0, 1.0])
    out, _ = _rows(as_read_verify, P, P, p1)
    a = [sum(float(P[x]) * _accept(float(P[d]), float(P[x])) for x in range(3)) for d in range(3)]
    want = torch.tensor([float(P[y]) * a[y] for y in range(3)], dtype=torch.float64)
    want[2] += 1 - want.sum()
    assert torch.allclose(_first_law(out), want, atol=0.005)
    assert 0.5 * (want - P.double()).abs().sum() > 0.05  # far from p (TV 0.059)


def test_patched_rule_still_moves_the_law():
    # Patched (#4190 / PR #4490): the fresh x is emitted at a rejection; the acceptance test is unchanged.
    out, _ = _rows(patched_4190_verify, P, P, P)
    want = []
    for y in range(3):
        kept = float(P[y]) * sum(float(P[x]) * _accept(float(P[y]), float(P[x])) for x in range(3))
        replaced = float(P[y]) * sum(float(P[d]) * (1 - _accept(float(P[d]), float(P[y]))) for d in range(3))
        want.append(kept + replaced)
    want = torch.tensor(want, dtype=torch.float64)
    assert torch.allclose(_first_law(out), want, atol=0.005)
    assert 0.5 * (want - P.double()).abs().sum() > 0.05


def test_uniform101_alone_accepts_an_impossible_draft():
    # The 101-level uniform: a draft with p = 0 is accepted when r = 0, with probability 1/101.
    p0 = torch.tensor([0.0, 0.5, 0.5])
    q0 = torch.tensor([1.0, 0.0, 0.0])
    out, _ = _rows(uniform101_verify, p0, q0, P)
    assert abs(_first_law(out)[0].item() - 1 / 101) < 0.002
