"""The tree check (harness/check/tree.py) end to end: references and controls pass, every tree mutant is
failed, declared test counts match what is emitted, a single chain gets the chain check's verdicts,
malformed trees are refused with one line."""

import json

import numpy as np
import pytest
import torch

import harness.check.tree as tree_check  # its tests_for_* functions would be collected if imported by name
import harness.mutants.tree as tree_zoo
from harness.adapters.calling import ImplementationError
from harness.adapters.loading import check_signature, load_callable
from harness.check.sampler import custom_case, run_sampler_check
from harness.check.tree import (
    chain_as_tree,
    count_tests_for_case,
    count_tests_for_node_laws,
    count_tests_for_reach_bounds,
    custom_tree_case,
    format_problems,
    full_tree,
    load_tree_case,
    node_marginals,
    path_bound,
    plan_case,
    read_paths,
    run_tree_check,
    validate_tree_inputs,
)
from harness.errors import HarnessError, UnknownNameError
from harness.mutants.registry import get, implementations
from harness.mutants.sampler import always_accept
from specdec_ref.adapters import tree_verify_specinfer, tree_verify_topk
from specdec_ref.adapters import verify as chain_reference
from specdec_ref.tree import SPECINFER, tree_shape, tree_verify
from suites.catalogues.tree import CASES

FAST = ["iid-b2-d2-duplicates", "wr-b3-d2", "topk-b2-d4"]
TREE = implementations(contract="tree")


def _check(impl, **kw):
    return run_tree_check(impl, cases=kw.pop("cases", FAST), samples=kw.pop("samples", 20_000), **kw)


@pytest.mark.parametrize("impl", [i for i in TREE if i.must_pass], ids=lambda i: i.name)
@pytest.mark.stochastic(false_alarm=0.001, seed=1)  # PASS 0.001
def test_references_and_controls_pass(impl):
    report = _check(impl.fn, seed=1)
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]
    assert report.level == "tree" and len(report.cases) == len(FAST)


@pytest.mark.parametrize("impl", [i for i in TREE if not i.must_pass], ids=lambda i: i.name)
def test_every_tree_mutant_fails(impl):
    report = _check(impl.fn, seed=2, stop_on_fail=True)
    assert report.verdict == "fail", impl.name


def test_zoo_models_the_bugs_of_the_brief():
    names = {i.name for i in TREE}
    assert {"specinfer_q_for_unsampled_candidates", "fallback_unprocessed_logits", "sglang_relaxed_thresholds",
            "rejected_sibling_not_zeroed", "residual_wrong_sibling"} <= names
    assert {"tree_reference_specinfer", "tree_reference_topk", "tree_single_coin", "tree_exponential_race"} <= {
        i.name for i in TREE if i.kind == "control"}
    assert "lossy by design" in get("sglang_relaxed_thresholds").models
    for impl in TREE:
        assert load_callable(impl.spec) is impl.fn
        check_signature(impl.fn, "tree", impl.spec)


@pytest.mark.end_to_end
def test_declared_test_counts_match_what_is_emitted():
    report = run_tree_check(tree_verify_specinfer, samples=3_000, seed=0)
    for case in CASES:
        plan = plan_case(case)
        emitted = [t for t in report.tests if t.name.startswith(case.name + "/")]
        assert len(emitted) == count_tests_for_case(plan), case.name
        assert sum("reach_above_bound" in t.name for t in emitted) == count_tests_for_reach_bounds(plan)
    assert "gating tests" in report.notes[-1]
    # the pure functions on their own
    plan = plan_case(CASES[0])
    out = np.zeros((10, plan.shape.max_depth + 1), dtype=np.int64)
    reached = np.ones((10, plan.shape.n_nodes + 1), dtype=bool)
    assert len(tree_check.tests_for_node_laws(out, reached, plan, 1e-4, 0.9, "x")) == count_tests_for_node_laws(plan)
    assert len(tree_check.tests_for_reach_bounds(reached, plan, 1e-4, 0.9, "x")) == count_tests_for_reach_bounds(plan)


def _chain_laws(gamma, V, seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1.5, size=(gamma + 1, V))
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    w = np.exp(z[:gamma] + rng.normal(0, 0.7, size=(gamma, V)))
    return p, w / w.sum(-1, keepdims=True)


@pytest.mark.parametrize("gamma", [1, 3])
def test_a_single_chain_gets_the_chain_checks_verdicts(gamma):
    """depth γ, branching 1: the tree inputs are the chain's; the reference passes and always-accept fails
    through both checks, on the same laws."""
    p, q = _chain_laws(gamma, 8, gamma)
    chain_case = custom_case(f"chain-{gamma}", p, q)
    q_tree = np.vstack([q, np.full((1, 8), 1 / 8)])  # the last node has no children: its row is unused
    tree_case = custom_tree_case(f"chain-{gamma}", range(-1, gamma - 1), p, q_tree, "iid")
    verdicts = {}
    for name, verify in [("reference", chain_reference), ("always_accept", always_accept)]:
        chain = run_sampler_check(verify, cases=[chain_case], samples=20_000, seed=4).verdict
        tree = run_tree_check(chain_as_tree(verify), cases=[tree_case], samples=20_000, seed=4).verdict
        verdicts[name] = (chain, tree)
    assert verdicts == {"reference": ("pass", "pass"), "always_accept": ("fail", "fail")}
    # and the tree reference agrees with the chain reference on a chain
    assert run_tree_check(tree_verify_specinfer, cases=[tree_case], samples=20_000, seed=4).verdict == "pass"


def _accept_first_child(target_probs, draft_probs, draft_tokens, parents, generator):
    """Planted: the first child of every node is accepted with probability 1, the rest as SpecInfer."""
    def threshold(p, d, x):
        return torch.ones(len(x), dtype=torch.float64)
    rule = SPECINFER._replace(threshold=threshold)
    return tree_verify(target_probs, draft_probs, draft_tokens, parents, generator, rule)


def test_reach_above_the_universal_bound_is_failed():
    report = _check(_accept_first_child, cases=["wr-b3-d2"], samples=5_000)
    assert report.verdict == "fail"
    above = [t for t in report.tests if t.name.endswith("node0/reach_above_bound")]
    assert above and above[0].reject


def test_wasteful_but_lossless_reach_is_not_failed():
    """The point-mass rule on i.i.d. children reaches nodes less often than SpecInfer: not a failure."""
    report = _check(tree_verify_topk, cases=["iid-b8-d1-low", "iid-caterpillar-d5"], samples=20_000)
    assert report.verdict == "pass"
    reach = report.cases[1]["reach"][0]
    assert reach["measured"] < reach["reference"]


def test_format_catches_paths_off_the_tree_and_bad_shapes():
    def off_tree(target_probs, draft_probs, draft_tokens, parents, generator):
        out = tree_verify_specinfer(target_probs, draft_probs, draft_tokens, parents, generator)
        out[:, 0] = torch.where(out[:, 1] >= 0, (out[:, 0] + 1) % target_probs.shape[-1], out[:, 0])
        return out

    def too_wide(target_probs, draft_probs, draft_tokens, parents, generator):
        out = tree_verify_specinfer(target_probs, draft_probs, draft_tokens, parents, generator)
        return torch.cat([out, torch.full_like(out[:, :1], -1)], 1)

    for impl, needle in [(off_tree, "does not follow the tree"), (too_wide, "returned shape")]:
        report = _check(impl, cases=["topk-b2-d4"], samples=2_000)
        assert report.verdict == "fail"
        assert needle in report.tests[0].details["message"]


def test_read_paths_with_equal_siblings():
    shape = tree_shape([-1, -1, 0, 1])  # two root children, each with one child
    tokens = np.array([[5, 5, 1, 2]] * 3)
    out = np.array([[5, 2, 0], [5, 1, 0], [5, 3, -1]])  # via node 1 (backtracking), via node 0, stops at depth 1
    reached, on_tree = read_paths(out, tokens, shape)
    assert on_tree.tolist() == [True, True, True]
    assert reached[0].tolist() == [True, False, True, False, True]
    assert reached[1].tolist() == [True, True, False, True, False]
    assert reached[2].tolist() == [True, True, False, False, False]  # equal siblings: the first is read
    assert format_problems(torch.tensor([[5, 4, 0]] * 3), tokens, shape, 8)[0]  # token 4 is no child


def test_marginals_and_path_bound_are_exact():
    q = np.array([0.5, 0.3, 0.2])
    shape = tree_shape([-1, -1, -1])
    m = node_marginals(shape, np.vstack([q] * 4), "without_replacement")
    second = sum(q[a] * q[b] / (1 - q[a]) for a in range(3) for b in range(3) if a != b and b == 1)
    assert m[1, 1] == pytest.approx(second)
    assert m.sum(1) == pytest.approx(np.ones(3))
    p2, m2 = np.array([[0.6, 0.4], [0.1, 0.9]]), np.array([[0.5, 0.5], [0.3, 0.7]])
    brute = sum(min(p2[0, a] * p2[1, b], m2[0, a] * m2[1, b]) for a in range(2) for b in range(2))
    assert path_bound(p2, m2) == pytest.approx(brute)


@pytest.mark.parametrize("parents, needle", [
    ([-1, 2, 1], "parents form a cycle"),
    ([-1, 7], "out of range"),
    ([1, -1], "listed before its parent"),
])
def test_malformed_custom_trees_raise_one_line_harness_errors(parents, needle, tmp_path):
    laws = np.full((len(parents) + 1, 4), 0.25)
    with pytest.raises(HarnessError, match=needle) as info:
        custom_tree_case("bad", parents, laws, laws, "iid")
    assert "\n" not in str(info.value)
    path = tmp_path / "tree.json"
    path.write_text(json.dumps({"parents": parents, "p": laws.tolist(), "q": laws.tolist(), "scheme": "iid"}))
    with pytest.raises(HarnessError, match=needle):
        load_tree_case(str(path))


def test_other_bad_inputs_raise_harness_errors(tmp_path):
    laws = np.full((3, 4), 0.25)
    with pytest.raises(HarnessError, match="node/law count mismatch"):
        custom_tree_case("bad", [-1, 0, 0], laws, laws, "iid")
    with pytest.raises(HarnessError, match="scheme must be one of"):
        custom_tree_case("bad", [-1, 0], laws, laws, "beam")
    with pytest.raises(HarnessError, match="probability law"):
        custom_tree_case("bad", [-1, 0], laws * 2, laws, "iid")
    with pytest.raises(HarnessError, match="cannot read tree case"):
        load_tree_case(str(tmp_path / "missing.json"))
    with pytest.raises(UnknownNameError, match="Did you mean 'wr-b3-d2'"):
        run_tree_check(tree_verify_specinfer, cases=["wr-b3-d3"])
    with pytest.raises(HarnessError, match="malformed tree step: parents form a cycle"):
        validate_tree_inputs(torch.tensor([1, 0]), torch.zeros(1, 2, dtype=torch.long), torch.full((1, 2, 2), 0.5),
                             torch.full((1, 3, 2), 0.5))


def test_cases_span_the_brief():
    shapes = [tree_shape(c.parents) for c in CASES]
    assert {s.max_depth for s in shapes} >= {1, 2, 3, 4, 5}
    branching = {len(ch) for s in shapes for ch in s.children if ch}
    assert 1 in branching and 8 in branching
    assert {c.scheme for c in CASES} == {"iid", "without_replacement", "topk"}
    assert full_tree([2, 2]) == (-1, -1, 0, 0, 1, 1)


def test_implementation_errors_are_reported():
    def raises(*args):
        raise RuntimeError("boom")

    with pytest.raises(ImplementationError, match="raised RuntimeError during tree case"):  # a FAIL (exit 1)
        _check(raises, cases=["topk-b2-d4"], samples=100)
    assert tree_zoo.TREE_RULES["tree_reference_specinfer"] is SPECINFER


def _pairs_share_uniforms(target_probs, draft_probs, draft_tokens, parents, generator):
    """Planted: rows 2k and 2k + 1 use the same uniforms (each row's own law is still exact)."""
    from specdec_ref.tree import tree_verify_from_uniforms

    B, N = draft_tokens.shape
    u = torch.rand((B + 1) // 2, N + 1, generator=generator, dtype=torch.float64).repeat_interleave(2, 0)[:B]
    return tree_verify_from_uniforms(target_probs, draft_probs, draft_tokens, parents, u[:, :N], u[:, N])


def test_row_independence_catches_uniforms_shared_across_rows():
    report = _check(_pairs_share_uniforms, cases=["topk-b2-d4"], samples=20_000)
    assert report.verdict == "fail"
    rejected = {t.name for t in report.tests if t.reject}
    assert rejected == {"topk-b2-d4/rows_independent"}  # every per-node law is right: only this test sees it
