"""Exact (non-sampling) check of the verification step: integrate over the drafted tokens (weight q)
and over an exact partition of each acceptance uniform, and compare the emitted law with p."""

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_ref.sampling import sample_from_uniform
from specdec_ref.verify import accept_and_final_law, greedy_verify, verify_from_uniforms, verify_step


def exact_emitted_laws(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """p [γ+1, V], q [γ, V] -> (law of the emitted token at each position given it is reached [γ+1, V],
    P(reach position j) [γ+1]), computed by running `accept_and_final_law` on every (draft, outcome) case."""
    gamma, V = q.shape
    qd = q.double() / q.double().sum(-1, keepdim=True)
    pd = p.double() / p.double().sum(-1, keepdim=True)
    cases, weights, ks, xs = [], [], [], []
    for x in itertools.product(range(V), repeat=gamma):
        w_x = math.prod(float(qd[i, x[i]]) for i in range(gamma))
        if w_x == 0:
            continue
        # ratio r_i = min(1, p/q): the accept branch is u in [0, r_i), the reject branch [r_i, 1).
        r = [min(1.0, float(pd[i, x[i]]) / float(qd[i, x[i]])) for i in range(gamma)]
        # a ratio within rounding of 1 is 1: its reject branch would have u on a rounding edge
        r = [1.0 if ri > 1 - 1e-12 else ri for ri in r]
        for k in range(gamma + 1):  # k = number of leading acceptances
            w = w_x * math.prod(r[:k]) * (1 - r[k] if k < gamma else 1.0)
            if w <= 0:
                continue
            u = [r[i] / 2 for i in range(k)] + ([(1 + r[k]) / 2] if k < gamma else []) + [0.5] * (gamma - k - 1)
            cases.append(u[:gamma])
            weights.append(w)
            ks.append(k)
            xs.append(x)
    n = len(cases)
    tokens = torch.tensor(xs, dtype=torch.long)
    n_acc, final = accept_and_final_law(p.expand(n, -1, -1), q.expand(n, -1, -1), tokens,
                                        torch.tensor(cases, dtype=torch.float64))
    assert n_acc.tolist() == ks, "the acceptance rule disagrees with min(1, p/q)"
    final = final.double() / final.double().sum(-1, keepdim=True)  # the sampler normalises
    w = torch.tensor(weights, dtype=torch.float64)
    laws = torch.zeros(gamma + 1, V, dtype=torch.float64)
    reach = torch.zeros(gamma + 1, dtype=torch.float64)
    for j in range(gamma + 1):
        reached = n_acc >= j
        reach[j] = w[reached].sum()
        here = n_acc == j
        laws[j] += (w[here].unsqueeze(1) * final[here]).sum(0)
        later = n_acc > j
        if j < gamma:
            laws[j].index_add_(0, tokens[later, j], w[later])
    return laws / reach.clamp_min(1e-300).unsqueeze(1), reach


def assert_lossless_exact(p, q, tol=1e-9):
    laws, reach = exact_emitted_laws(p, q)
    target = p.double() / p.double().sum(-1, keepdim=True)
    for j in range(q.shape[0] + 1):
        if reach[j] > 0:
            assert torch.allclose(laws[j], target[j], atol=tol, rtol=0), (j, laws[j], target[j])
    # and the acceptance rate is the optimal one: P(reach j+1 | reach j) = Σ min(p_j, q_j)
    for j in range(q.shape[0]):
        if reach[j] > 0:
            alpha = torch.minimum(target[j], q[j].double() / q[j].double().sum()).sum()
            assert abs(float(reach[j + 1] / reach[j]) - float(alpha)) < tol * 10


def _norm(x):
    x = torch.as_tensor(x, dtype=torch.float64)
    return x / x.sum(-1, keepdim=True)


def test_exact_law_matches_p_random_pairs():
    g = torch.Generator().manual_seed(0)
    for gamma, V in [(1, 2), (2, 4), (3, 3), (2, 6)]:
        p = _norm(torch.rand(gamma + 1, V, generator=g, dtype=torch.float64) ** 3)
        q = _norm(torch.rand(gamma, V, generator=g, dtype=torch.float64) ** 3)
        assert_lossless_exact(p, q)


def test_exact_check_catches_a_planted_bug():
    """The exact check is not vacuous: replacing the residual by p (a real bug, vllm-ascend #7807) fails it."""
    import specdec_ref.verify as verify_module

    p = _norm([[0.7, 0.2, 0.1], [0.3, 0.3, 0.4]])
    q = _norm([[0.1, 0.2, 0.7]])
    original = verify_module.accept_and_final_law

    def residual_from_p(p_, q_, tokens, u):
        n_acc, _ = original(p_, q_, tokens, u)
        return n_acc, p_.to(torch.float64).gather(1, n_acc.view(-1, 1, 1).expand(-1, 1, p_.shape[-1])).squeeze(1)

    globals()["accept_and_final_law"] = residual_from_p
    try:
        with pytest.raises(AssertionError):
            assert_lossless_exact(p, q)
    finally:
        globals()["accept_and_final_law"] = original


@pytest.mark.parametrize("case", ["q_zero_on_drafted", "p_equals_q", "disjoint", "onehot_p", "onehot_q", "tiny_probs"])
def test_exact_law_edge_cases(case):
    if case == "q_zero_on_drafted":  # q(x) = 0 where p > 0: only the residual can produce x
        p, q = _norm([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]), _norm([[0.0, 0.4, 0.6]])
    elif case == "p_equals_q":  # zero residual everywhere: must not produce NaN
        p = _norm([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8]])
        q = _norm([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5]])
    elif case == "disjoint":
        p, q = _norm([[0.5, 0.5, 0, 0], [0.25] * 4]), _norm([[0, 0, 0.5, 0.5]])
    elif case == "onehot_p":
        p, q = _norm([[0, 1, 0], [1, 0, 0], [0, 0, 1]]), _norm([[0.3, 0.3, 0.4], [0.5, 0.25, 0.25]])
    elif case == "onehot_q":
        p, q = _norm([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]]), _norm([[0, 0, 1]])
    else:  # probabilities down to 1e-30
        p = _norm([[1e-30, 0.5, 0.5 - 1e-30], [1e-30, 1e-30, 1.0]])
        q = _norm([[0.5, 1e-30, 0.5]])
    assert_lossless_exact(p, q)


@settings(max_examples=60, deadline=None)
@given(gamma=st.integers(1, 3), V=st.integers(2, 4), data=st.data())
def test_exact_law_property(gamma, V, data):
    prob = st.one_of(st.just(0.0), st.floats(1e-30, 1.0), st.floats(0.01, 1.0))

    def rows(n):
        out = []
        for _ in range(n):
            row = data.draw(st.lists(prob, min_size=V, max_size=V).filter(lambda r: sum(r) > 0))
            out.append(row)
        return _norm(out)

    assert_lossless_exact(rows(gamma + 1), rows(gamma))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_exact_law_half_precision_inputs(dtype):
    g = torch.Generator().manual_seed(1)
    p = _norm(torch.rand(3, 4, generator=g, dtype=torch.float64)).to(dtype)
    q = _norm(torch.rand(2, 4, generator=g, dtype=torch.float64)).to(dtype)
    # computed in float32 internally: the law is that of the (rounded) inputs to float32 accuracy
    assert_lossless_exact(p, q, tol=1e-6)
    out = verify_step(p.unsqueeze(0), q.unsqueeze(0), torch.tensor([[0, 1]]), torch.Generator().manual_seed(0))
    assert out.tokens.dtype == torch.int64


def test_sample_from_uniform_is_exact_inverse_cdf():
    probs = _norm([[0.0, 0.25, 0.0, 0.75, 0.0]])
    # exact partition of [0, 1): token 1 on [0, .25), token 3 on [.25, 1); zero-mass tokens never
    for u, want in [(0.0, 1), (0.2499, 1), (0.25, 3), (0.999999999, 3), (1 - 1e-17, 3)]:
        assert int(sample_from_uniform(probs, torch.tensor([u], dtype=torch.float64))) == want


def test_verify_output_format_and_reproducibility():
    g = torch.Generator().manual_seed(3)
    B, gamma, V = 64, 4, 50
    p = torch.rand(B, gamma + 1, V, generator=g).softmax(-1)
    q = torch.rand(B, gamma, V, generator=g).softmax(-1)
    x = torch.multinomial(q.view(-1, V), 1, generator=g).view(B, gamma)
    a = verify_step(p, q, x, torch.Generator().manual_seed(7))
    b = verify_step(p, q, x, torch.Generator().manual_seed(7))
    assert torch.equal(a.tokens, b.tokens)
    n = (a.tokens >= 0).sum(1)
    assert torch.equal(n, a.n_accepted + 1)
    assert bool(((a.tokens >= -1) & (a.tokens < V)).all())
    # the emitted prefix is the accepted drafts
    for row in range(B):
        k = int(a.n_accepted[row])
        assert torch.equal(a.tokens[row, :k], x[row, :k])
        assert bool((a.tokens[row, k + 1:] == -1).all())


def test_greedy_rule():
    V = 5
    target = torch.full((2, 4, V), 0.0)
    argmax = torch.tensor([[1, 2, 3, 4], [0, 0, 0, 0]])
    target.scatter_(-1, argmax.unsqueeze(-1), 1.0)
    drafts = torch.tensor([[1, 2, 0], [0, 0, 0]])
    out = greedy_verify(target, drafts)
    assert out.tokens.tolist() == [[1, 2, 3, -1], [0, 0, 0, 0]]
    # one-hot p and q through Algorithm 1 give the same answer as the greedy rule
    q = torch.nn.functional.one_hot(drafts, V).double()
    alg1 = verify_from_uniforms(target.double(), q, drafts, torch.full((2, 3), 0.5), torch.full((2,), 0.5))
    assert torch.equal(alg1.tokens, out.tokens)
