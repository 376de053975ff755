"""Exact (non-sampling) checks of the tree references: enumerate every draft configuration of small trees
(V ≤ 4, depth ≤ 2, branching ≤ 3) and every branch of the acceptance tests, and compare the law emitted
after every node with the target's; plus the input validator's one-line refusals."""

import re

import pytest
import torch

from harness.check.tree import caterpillar, full_tree
from harness.mutants.tree import TREE_RULES, enumerate_drafts, exact_node_laws
from specdec_ref.adapters import tree_verify_specinfer, tree_verify_topk
from specdec_ref.errors import SpecDecInputError
from specdec_ref.tree import SCHEMES, SPECINFER, TOPK, TreeStep, sibling_laws, tree_shape, validate_tree

TREES = [full_tree([1]), full_tree([3]), full_tree([2, 2]), full_tree([3, 1]), caterpillar(2, 1), (-1, 0, -1, 1)]


def _laws(shape, V, seed, sharp=1.0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(shape.n_nodes + 1, V, generator=g, dtype=torch.float64) * sharp
    q = torch.softmax(torch.randn(shape.n_nodes + 1, V, generator=g, dtype=torch.float64) * sharp, -1)
    return torch.softmax(z, -1), q


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("parents", TREES, ids=str)
@pytest.mark.parametrize("rule", [SPECINFER, TOPK], ids=["specinfer", "topk"])
def test_every_node_law_is_exactly_p(rule, parents, scheme):
    shape = tree_shape(parents)
    for seed, V, sharp in [(0, 2, 1.0), (1, 3, 2.0), (2, 4, 0.7)]:
        if scheme != "iid" and max(len(c) for c in shape.children) > V:
            continue
        p, q = _laws(shape, V, seed, sharp)
        laws, reach = exact_node_laws(rule, shape, p, q, scheme)
        assert reach[0] == pytest.approx(1.0, abs=1e-12)  # every row emits a first token ...
        for t in range(shape.n_nodes + 1):
            if reach[t] > 1e-12:  # ... distributed as p_root, and after every reached node as p_t
                torch.testing.assert_close(laws[t], p[t], atol=1e-12, rtol=0)


def test_exact_integration_can_fail_and_matches_known_acceptance():
    """The integrator is not vacuous: a lossy rule is far from p, and with point-mass siblings the reach
    of the i-th sibling is p(x_i) exactly (accept p′(x_i) after the earlier ones were removed)."""
    shape = tree_shape(full_tree([3]))
    p, q = _laws(shape, 4, 5)
    laws, _ = exact_node_laws(TREE_RULES["rejected_sibling_not_zeroed"], shape, p, q, "topk")
    assert 0.5 * float((laws[0] - p[0]).abs().sum()) > 0.05
    _, reach = exact_node_laws(TOPK, shape, p, q, "topk")
    top3 = torch.argsort(-q[0], stable=True)[:3]
    torch.testing.assert_close(reach[1:], p[0, top3], atol=1e-14, rtol=0)
    # i.i.d. SpecInfer: the first child is accepted with probability α = Σ min(p, q)
    _, reach = exact_node_laws(SPECINFER, shape, p, q, "iid")
    assert float(reach[1]) == pytest.approx(float(torch.minimum(p[0], q[0]).sum()), abs=1e-14)


def test_exact_laws_agree_with_sampling_the_adapters():
    """The exact integrator and the adapters' own random draws agree on P(reach node) (within 5 σ)."""
    shape = tree_shape(full_tree([2, 2]))
    p, q = _laws(shape, 4, 3)
    B = 40_000
    for scheme, adapter, rule in [("iid", tree_verify_specinfer, SPECINFER), ("without_replacement",
                                  tree_verify_specinfer, SPECINFER), ("topk", tree_verify_topk, TOPK)]:
        from harness.check.tree import draw_tree, read_paths

        g = torch.Generator().manual_seed(11)
        tokens, probs = draw_tree(shape, q, scheme, B, g)
        out = adapter(p.expand(B, -1, -1), probs, tokens, torch.tensor(shape.parents), g)
        measured = torch.from_numpy(read_paths(out.numpy(), tokens.numpy(), shape)[0].mean(0))
        _, exact = exact_node_laws(rule, shape, p, q, scheme)
        sigma = (exact * (1 - exact) / B).clamp_min(0).sqrt().clamp_min(1e-4)
        assert ((measured - exact).abs() <= 5 * sigma).all(), (scheme, measured, exact)


def test_enumerated_draft_weights_sum_to_one():
    shape = tree_shape(full_tree([2, 2]))
    _, q = _laws(shape, 4, 0)
    for scheme in SCHEMES:
        tokens, probs, weight = enumerate_drafts(shape, q, scheme)
        assert float(weight.sum()) == pytest.approx(1.0, abs=1e-12)
        validate_tree(shape.parents, tokens, probs, torch.ones(len(weight), 7, 4) / 4, scheme)


def test_sibling_laws_per_scheme():
    q = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    x = torch.tensor([[0, 2]])
    torch.testing.assert_close(sibling_laws(q, x, "iid")[0, 1], q[0])
    torch.testing.assert_close(sibling_laws(q, x, "without_replacement")[0, 1],
                               torch.tensor([0.0, 0.6, 0.4], dtype=torch.float64))
    torch.testing.assert_close(sibling_laws(q, x, "topk")[0, 1], torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))


# ---------------------------------------------------------------- validator

def _step(parents, B=2, V=4, N=None):
    N = len(parents) if N is None else N
    target = torch.full((B, N + 1, V), 1.0 / V)
    draft = torch.full((B, N, V), 1.0 / V)
    return dict(parents=torch.tensor(parents), draft_tokens=torch.zeros(B, N, dtype=torch.long),
                draft_probs=draft, target_probs=target)


@pytest.mark.parametrize("parents, needle", [
    ([-1, 2, 1], "cycle: 1 -> 2 -> 1"),
    ([-1, 0, 2], "cycle: 2 -> 2"),
    ([-1, 5], "parents[1] = 5 is out of range"),
    ([-1, -2], "parents[1] = -2 is out of range"),
    ([1, -1], "node 0 is listed before its parent 1"),
    ([], "parents is empty"),
])
def test_malformed_parents_are_refused_in_one_line(parents, needle):
    kwargs = _step(parents, N=max(1, len(parents)))
    kwargs["parents"] = torch.tensor(parents, dtype=torch.long)
    with pytest.raises(SpecDecInputError, match=re.escape(needle)) as info:
        validate_tree(**kwargs)
    assert "\n" not in str(info.value)


def test_count_shape_and_law_mismatches_are_refused():
    ok = _step([-1, 0, 0])
    validate_tree(**ok)
    cases = [
        (dict(draft_tokens=torch.zeros(2, 2, dtype=torch.long)), "node count mismatch"),
        (dict(draft_probs=torch.full((2, 4, 4), 0.25)), "node/law count mismatch: draft_probs"),
        (dict(target_probs=torch.full((2, 3, 4), 0.25)), "node/law count mismatch: target_probs"),
        (dict(target_probs=torch.full((3, 4, 4), 0.25)), "node/law count mismatch: target_probs"),
        (dict(draft_probs=torch.full((2, 3, 5), 0.2)), "shape mismatch: target_probs has V = 4"),
        (dict(target_probs=torch.full((2, 4, 4), 0.3)), "rows must sum to 1"),
        (dict(draft_probs=torch.full((2, 3, 4), -0.25)), "must hold probabilities"),
        (dict(draft_tokens=torch.full((2, 3), 4, dtype=torch.long)), "token ids in \\[0, 4\\)"),
        (dict(parents=torch.tensor([-1.0, 0.0, 0.0])), "parents must be a 1-D int64 tensor"),
    ]
    for change, needle in cases:
        with pytest.raises(SpecDecInputError, match=needle) as info:
            validate_tree(**{**ok, **change})
        assert "\n" not in str(info.value)


def test_scheme_declarations_are_checked():
    parents = torch.tensor([-1, -1])
    q = torch.tensor([0.5, 0.3, 0.2, 0.0])
    target = torch.full((1, 3, 4), 0.25)
    wr_tokens = torch.tensor([[0, 1]])
    wr_probs = sibling_laws(q.unsqueeze(0), wr_tokens, "without_replacement")
    validate_tree(parents, wr_tokens, wr_probs, target, "without_replacement")
    with pytest.raises(SpecDecInputError, match="not what the scheme implies"):
        validate_tree(parents, wr_tokens, q.expand(1, 2, 4), target, "without_replacement")  # i.i.d. laws declared
    with pytest.raises(SpecDecInputError, match="repeat a token"):
        validate_tree(parents, torch.tensor([[0, 0]]), torch.nn.functional.one_hot(torch.tensor([[0, 0]]), 4).float(),
                      target, "topk")
    with pytest.raises(SpecDecInputError, match="has probability 0"):
        validate_tree(parents, torch.tensor([[3, 0]]), q.expand(1, 2, 4), target, "iid")
    step = TreeStep(target, q.expand(1, 2, 4), torch.tensor([[0, 0]]), parents, scheme="iid")
    assert step.validate().children[0] == (0, 1)


def test_output_format_of_the_adapters():
    shape = tree_shape(caterpillar(3, 2))
    p, q = _laws(shape, 4, 0)
    from harness.check.tree import draw_tree, format_problems

    g = torch.Generator().manual_seed(0)
    tokens, probs = draw_tree(shape, q, "iid", 500, g)
    for adapter in (tree_verify_specinfer, tree_verify_topk):
        out = adapter(p.expand(500, -1, -1).float(), probs.float(), tokens, torch.tensor(shape.parents), g)
        assert out.shape == (500, 4) and out.dtype == torch.int64
        assert format_problems(out, tokens.numpy(), shape, 4)[0] == []



@pytest.mark.parametrize("scheme", SCHEMES)
def test_single_coin_law_at_thresholds_one_is_exactly_p(scheme):
    from harness.mutants.tree import single_coin_rule

    shape = tree_shape(full_tree([3, 1]))
    p, q = _laws(shape, 4, 7, 1.5)
    laws, reach = exact_node_laws(single_coin_rule(1.0, 1.0), shape, p, q, scheme)
    for t in range(shape.n_nodes + 1):
        if reach[t] > 1e-12:
            torch.testing.assert_close(laws[t], p[t], atol=1e-12, rtol=0)


@pytest.mark.stochastic(false_alarm=1.2e-05, seed=13)  # 20 node reaches within 5 sigma, two-sided normal tail 5.7e-7 each
def test_exponential_race_control_matches_the_reference_reach():
    """The independent SpecInfer formulation (exponential clocks) reaches every node as often as the exact
    law of the reference walk says (5 σ), on sampled and on distinct siblings."""
    from harness.check.tree import draw_tree, read_paths
    from harness.mutants.tree import tree_exponential_race

    shape = tree_shape(full_tree([3, 2]))
    p, q = _laws(shape, 4, 9, 1.5)
    B = 40_000
    for scheme in ("iid", "without_replacement"):
        g = torch.Generator().manual_seed(13)
        tokens, probs = draw_tree(shape, q, scheme, B, g)
        out = tree_exponential_race(p.expand(B, -1, -1), probs, tokens, torch.tensor(shape.parents), g)
        measured = torch.from_numpy(read_paths(out.numpy(), tokens.numpy(), shape)[0].mean(0))
        _, exact = exact_node_laws(SPECINFER, shape, p, q, scheme)
        sigma = (exact * (1 - exact) / B).clamp_min(0).sqrt().clamp_min(1e-4)
        assert ((measured - exact).abs() <= 5 * sigma).all(), (scheme, measured, exact)


@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (0.5, 0.5)])
@pytest.mark.stochastic(false_alarm=5.8e-06, seed=12)  # 10 node reaches within 5 sigma, two-sided normal tail 5.7e-7 each
def test_single_coin_sampling_matches_its_exact_walk_law(thresholds):
    """The one-coin-per-level code and its conditional-threshold walk have the same P(reach node) (5 σ)."""
    from harness.check.tree import draw_tree, read_paths
    from harness.mutants.tree import single_coin, single_coin_rule

    shape = tree_shape(full_tree([3, 2]))
    p, q = _laws(shape, 4, 8, 1.5)
    B = 40_000
    g = torch.Generator().manual_seed(12)
    tokens, probs = draw_tree(shape, q, "without_replacement", B, g)
    out = single_coin(*thresholds)(p.expand(B, -1, -1), probs, tokens, torch.tensor(shape.parents), g)
    measured = torch.from_numpy(read_paths(out.numpy(), tokens.numpy(), shape)[0].mean(0))
    _, exact = exact_node_laws(single_coin_rule(*thresholds), shape, p, q, "without_replacement")
    sigma = (exact * (1 - exact) / B).clamp_min(0).sqrt().clamp_min(1e-4)
    assert ((measured - exact).abs() <= 5 * sigma).all(), (measured, exact)


@pytest.mark.end_to_end
def test_zoo_exact_tvs():
    """Every walk mutant is far from p on some scheme; the two that only misread sibling laws are exact
    (equivalent) on i.i.d. siblings, whose laws are all equal; controls are exact everywhere."""
    from harness.mutants.registry import get
    from harness.mutants.tree import TREE_RULES, exact_tree_tv_table
    from suites.catalogues.tree import EXACT_CASES

    table = exact_tree_tv_table(list(TREE_RULES), EXACT_CASES)
    for name, row in table.items():
        if get(name).kind == "control":
            assert max(row.values()) < 1e-12, (name, row)
        else:
            assert max(row.values()) > 0.05, (name, row)
    for name in ("specinfer_q_for_unsampled_candidates", "residual_wrong_sibling"):
        assert table[name]["iid"] < 1e-12 and table[name]["without_replacement"] > 0.05
