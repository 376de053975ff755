"""Tree-level zoo (docs/CONTRACT-tree.md): mutants from real tree-verification bugs, and correct controls.

Most entries are the reference walk (`specdec_ref.tree.walk`) with one `SiblingRule` part changed, so
their exact per-node laws come from `exact_node_laws`, which integrates a walk exactly: it enumerates
every draft configuration of a small tree (weight: the declared laws) and, for each, every branch of
the acceptance tests (the walk reports the threshold each tested node had; the branch "accept" has
probability threshold, "reject" the rest) — the tree analogue of the chain's exact check.

The single-coin rule (SGLang `TreeSpeculativeSamplingTargetOnly`) draws one uniform per tree level and
accepts the i-th sibling when the coin falls under the cumulated target mass; it is written apart
from the walk (an independent formulation): at thresholds 1 a correct control, below 1 lossy by design.

Importing this module registers its entries under the contract "tree" (registry.CONTRACTS).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from harness.mutants.base import declare, register
from harness.mutants.laws import tv
from specdec_ref.adapters import tree_verify_specinfer, tree_verify_topk
from specdec_ref.processing import logits_to_probs
from specdec_ref.sampling import sample_from_uniform
from specdec_ref.tree import (
    SPECINFER,
    TOPK,
    SiblingRule,
    TreeShape,
    declared_law,
    emitted,
    normalized,
    sibling_laws,
    tree_verify,
    validate_tree,
    walk,
)

Tensor = torch.Tensor
RAW_TEMPERATURE = 0.7  # the request's temperature: p is softmax(z / 0.7), the unprocessed law softmax(z)
SGLANG_THRESHOLD_SINGLE = 0.5  # --speculative-accept-threshold-single of the lossy entry (lossless: 1)
SGLANG_THRESHOLD_ACC = 0.5  # --speculative-accept-threshold-acc of the lossy entry (lossless: 1)


# ---------------------------------------------------------------- exact laws of a walk

def enumerate_drafts(shape: TreeShape, q: Tensor, scheme: str) -> tuple[Tensor, Tensor, Tensor]:
    """Every node-token configuration with positive probability: q [N+1, V] float64 ->
    (tokens [C, N], draft_probs [C, N, V], weight [C]). Small trees only (V^N configurations)."""
    N, V = shape.n_nodes, q.shape[-1]
    per_group = []  # (node indices, list of (tokens [k], laws [k, V], weight))
    for t, group in enumerate(shape.children):
        if not group:
            continue
        k = len(group)
        if scheme == "topk":
            candidates = [tuple(int(v) for v in torch.argsort(-q[t], stable=True)[:k])]
        elif scheme == "iid":
            candidates = list(itertools.product(range(V), repeat=k))
        else:
            candidates = list(itertools.permutations(range(V), k))
        x = torch.tensor(candidates, dtype=torch.long)  # [c, k]
        laws = sibling_laws(q[t].expand(len(candidates), V), x, scheme)  # [c, k, V]
        w = laws.gather(-1, x.unsqueeze(-1)).squeeze(-1).prod(-1)  # [c]
        keep = w > 0
        per_group.append((list(group), x[keep], laws[keep], w[keep]))
    picks = list(itertools.product(*[range(len(g[3])) for g in per_group]))
    C = len(picks)
    tokens = torch.zeros(C, N, dtype=torch.long)
    probs = torch.zeros(C, N, V, dtype=torch.float64)
    weight = torch.ones(C, dtype=torch.float64)
    idx = torch.tensor(picks, dtype=torch.long).view(C, len(per_group))
    for g, (nodes, x, laws, w) in enumerate(per_group):
        tokens[:, nodes] = x[idx[:, g]]
        probs[:, nodes] = laws[idx[:, g]]
        weight *= w[idx[:, g]]
    return tokens, probs, weight


def exact_node_laws(rule: SiblingRule, shape: TreeShape, p: Tensor, q: Tensor, scheme: str) -> tuple[Tensor, Tensor]:
    """p, q [N+1, V] float64 -> (law of the token emitted after t given t is reached [N+1, V], P(reach t) [N+1])."""
    tokens, probs, weight = enumerate_drafts(shape, q, scheme)
    N, V = shape.n_nodes, p.shape[-1]
    laws, reach = torch.zeros(N + 1, V, dtype=torch.float64), torch.zeros(N + 1, dtype=torch.float64)
    cfg = torch.arange(len(weight))
    u = torch.full((len(weight), N), float("nan"), dtype=torch.float64)  # nan: not decided yet (reads as reject)
    while cfg.numel():
        w = walk(p.expand(len(cfg), -1, -1), probs[cfg], tokens[cfg], shape, u, rule)
        undecided = ~torch.isnan(w.threshold) & torch.isnan(u)  # [F, N]
        done = ~undecided.any(1)
        _accumulate(laws, reach, shape, w, tokens[cfg], weight, done)
        open_ = (~done).nonzero().squeeze(1)
        n_star = undecided[open_].double().argmax(1)  # first tested node without a decision
        a = w.threshold[open_, n_star]
        u_open = u[open_]
        branches = []
        for value, prob in (((a / 2), a), (((1 + a) / 2), 1 - a)):  # accept: u < a; reject: u ≥ a
            keep = prob > 0
            u_new = u_open[keep].clone()
            u_new[torch.arange(int(keep.sum())), n_star[keep]] = value[keep]
            branches.append((cfg[open_][keep], u_new, weight[open_][keep] * prob[keep]))
        cfg = torch.cat([b[0] for b in branches])
        u = torch.cat([b[1] for b in branches])
        weight = torch.cat([b[2] for b in branches])
    return laws / reach.clamp_min(1e-300).unsqueeze(1), reach


def _accumulate(laws, reach, shape: TreeShape, w, tokens: Tensor, weight: Tensor, done: Tensor) -> None:
    """Add the finished branches: each target index on the path emits the next path token, the last the final law."""
    for last in w.node[done].unique().tolist():
        rows = done & (w.node == last)
        wt = weight[rows]
        path = [0] + [n + 1 for n in shape.path(last)]
        for here, nxt in zip(path[:-1], path[1:], strict=True):
            reach[here] += wt.sum()
            laws[here].index_add_(0, tokens[rows, nxt - 1], wt)
        reach[last] += wt.sum()
        laws[last] += (wt.unsqueeze(1) * w.final_law[rows]).sum(0)


def exact_tree_tvs(rule: SiblingRule, shape: TreeShape, p: Tensor, q: Tensor, scheme: str) -> list[float]:
    """[N+1] TV(law after t | t reached, p_t), 0 where t is unreachable."""
    laws, reach = exact_node_laws(rule, shape, p, q, scheme)
    return [tv(laws[t], p[t]) if reach[t] > 0 else 0.0 for t in range(shape.n_nodes + 1)]


# ---------------------------------------------------------------- rule parts of the mutants

def first_sibling_law(draft_probs, draft_tokens, rows, n, shape):
    """The law of the first sibling (the parent's q): what a verifier that assumes i.i.d. siblings uses."""
    return declared_law(draft_probs, draft_tokens, rows, shape.siblings(n)[0], shape)


def next_sibling_law(draft_probs, draft_tokens, rows, n, shape):
    """The declared law of the sibling after n (n's own for the last one): an index slip in the residual."""
    group = shape.siblings(n)
    i = group.index(n)
    return declared_law(draft_probs, draft_tokens, rows, group[min(i + 1, len(group) - 1)], shape)


def keep_rejected(p: Tensor, d: Tensor, x: Tensor) -> Tensor:
    """The working law left as it was after a rejection (the rejected sibling is not zeroed)."""
    return p


def unprocessed(p: Tensor) -> Tensor:
    """The law the same logits give without the temperature: norm(p^T) for p = softmax(z / T)."""
    return logits_to_probs(p.clamp_min(1e-300).log() * RAW_TEMPERATURE, 1.0, validate=False) * (p > 0)


TREE_RULES: dict[str, SiblingRule] = {}  # name -> rule, for exact laws


def _walk_entry(rule: SiblingRule, *, kind: str, models: str):
    """Register a tree verify whose body is the reference walk with `rule` (docstring: the description)."""
    def deco(fn):
        def verify(target_probs, draft_probs, draft_tokens, parents, generator):
            return tree_verify(target_probs, draft_probs, draft_tokens, parents, generator, rule)

        verify.__name__, verify.__qualname__, verify.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        verify.rule = rule
        TREE_RULES[fn.__name__] = rule
        return register(contract="tree", kind=kind, models=models)(verify)
    return deco


# ================================================================ mutants (lossy)

@_walk_entry(SPECINFER._replace(test_law=first_sibling_law, residual_law=first_sibling_law), kind="mutant",
             models="apple/ml-recurrent-drafter #6: beam / top-k candidates verified with q(x) as if sampled")
def specinfer_q_for_unsampled_candidates(target_probs, draft_probs, draft_tokens, parents, generator):
    """SpecInfer that tests every sibling against the parent's q, as if the siblings were i.i.d. draws from
    it, while they were drawn without replacement (distinct, like beam or top-k candidates): min(1, p′/q)
    and norm((p′ − q)₊) with the wrong q for every sibling after the first (exact on i.i.d. cases)."""


@_walk_entry(SPECINFER._replace(final=unprocessed), kind="mutant",
             models="EAGLE (older evaluate_posterior): fallback / bonus token from unprocessed logits at T ≠ 1")
def fallback_unprocessed_logits(target_probs, draft_probs, draft_tokens, parents, generator):
    """The token after the accepted path (fallback after all children are rejected, or bonus at a leaf) is
    drawn from the law without the request's temperature 0.7: norm(p′^0.7) instead of p′ (the target laws
    given are the processed ones; tempering commutes with zeroing rejected tokens)."""


@_walk_entry(TOPK._replace(reject=keep_rejected), kind="mutant",
             models="failure mode (EAGLE/SGLang top-k trees): a rejected sibling not zeroed in the working law")
def rejected_sibling_not_zeroed(target_probs, draft_probs, draft_tokens, parents, generator):
    """Top-k rule that forgets to zero the rejected sibling: later siblings are tested with p′ = p, and the
    fallback draws from p, so rejected tokens come back out of the fallback (over-emitted)."""


@_walk_entry(SPECINFER._replace(residual_law=next_sibling_law), kind="mutant",
             models="failure mode (TRT-LLM #15098 class, an index slip): residual subtracts the wrong sibling's law")
def residual_wrong_sibling(target_probs, draft_probs, draft_tokens, parents, generator):
    """After rejecting sibling i, p′ becomes norm((p′ − d_(i+1))₊), the next sibling's law, instead of d_i
    (equivalent on i.i.d. siblings, whose laws are equal; lossy without replacement and for top-k)."""


# ================================================================ correct controls

TREE_REFERENCE_SPECINFER = declare(
    tree_verify_specinfer, "tree_reference_specinfer", contract="tree", kind="control",
    models="control: the reference (specdec_ref.adapters:tree_verify_specinfer)",
    description="SpecInfer multi-step speculative sampling against the declared sibling laws")
TREE_REFERENCE_TOPK = declare(
    tree_verify_topk, "tree_reference_topk", contract="tree", kind="control",
    models="control: the reference (specdec_ref.adapters:tree_verify_topk)",
    description="deterministic top-k rule: siblings as point masses, rejected ones zeroed")
TREE_RULES["tree_reference_specinfer"] = SPECINFER
TREE_RULES["tree_reference_topk"] = TOPK


def single_coin(threshold_single: float, threshold_acc: float) -> Callable:
    """SGLang's target-only tree rule: one coin per level; sibling i is accepted when the coin is ≤ the
    target mass of the siblings tried so far (i included) / threshold_acc, or when its own mass ≥
    threshold_single; the fallback draws from the target with the tried siblings removed.

    Tried tokens are removed from the mass that is cumulated, so an equal sibling adds nothing (the
    kernel assumes distinct top-k siblings). At thresholds 1 this is lossless: sibling i is accepted
    with probability p(x_i), exactly as the point-mass rule.
    """
    def verify(target_probs, draft_probs, draft_tokens, parents, generator):
        shape = validate_tree(parents, draft_tokens, draft_probs, target_probs)
        B, N = draft_tokens.shape
        gen_device = generator.device if generator is not None else torch.device("cpu")
        u = torch.rand(B, N + 2, generator=generator, device=gen_device, dtype=torch.float64).to(target_probs.device)
        node = torch.zeros(B, dtype=torch.long, device=target_probs.device)
        coin = u[:, N]  # the root's coin; a node's own coin is u[:, n] (used once the row moves there)
        left = normalized(target_probs[:, 0].double())  # target mass not tried yet at the current node
        tokens = torch.full((B, shape.max_depth), -1, dtype=torch.long, device=target_probs.device)
        for n in range(N):
            rows = (node == shape.parents[n] + 1).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            x = draft_tokens[rows, n].long()
            mass = left[rows].gather(1, x.unsqueeze(1)).squeeze(1)  # 0 if an equal sibling was tried
            tried = 1 - left[rows].sum(1)
            ok = (coin[rows] <= (tried + mass) / threshold_acc) | (mass >= threshold_single)
            acc, rej = rows[ok], rows[~ok]
            left[rej, x[~ok]] = 0.0
            node[acc] = n + 1
            left[acc] = normalized(target_probs[acc, n + 1].double())
            coin[acc] = u[acc, n]
            tokens[acc, shape.depth[n + 1] - 1] = x[ok]
        final = sample_from_uniform(normalized(left), u[:, N + 1])
        return emitted(tokens, node, shape, final)
    return verify


def single_coin_rule(threshold_single: float, threshold_acc: float) -> SiblingRule:
    """The law of `single_coin` as a walk (for exact laws): one coin per level, conditioned on the earlier
    siblings' rejections, accepts sibling i with probability min(1, (m_i / t_acc) / (1 − T / t_acc)), T the
    target mass tried so far and m_i the sibling's untried mass (1 when m_i ≥ t_single). The working law
    is the target with tried tokens zeroed, kept unnormalised so that T = 1 − its sum."""
    def threshold(left: Tensor, d: Tensor, x: Tensor) -> Tensor:
        mass = left.gather(1, x.unsqueeze(1)).squeeze(1)
        room = (1 - (1 - left.sum(1)) / threshold_acc).clamp_min(1e-300)  # P(coin above the tried mass)
        a = (mass / threshold_acc / room).clamp(0, 1)
        return torch.where(mass >= threshold_single, torch.ones_like(a), a)

    def zero_tried(left: Tensor, d: Tensor, x: Tensor) -> Tensor:
        return left.scatter(1, x.unsqueeze(1), 0.0)

    return TOPK._replace(threshold=threshold, reject=zero_tried, final=normalized)


_single_coin_exact = single_coin(1.0, 1.0)
_single_coin_relaxed = single_coin(SGLANG_THRESHOLD_SINGLE, SGLANG_THRESHOLD_ACC)


@register(contract="tree", kind="control", models="control: SGLang TreeSpeculativeSamplingTargetOnly at thresholds 1, "
          "an independent formulation (one coin per level)")
def tree_single_coin(target_probs, draft_probs, draft_tokens, parents, generator):
    """SGLang-style one coin per level with threshold_single = threshold_acc = 1: lossless (sibling i is
    accepted with probability p(x_i) of the tokens not tried yet; fallback from the rest)."""
    return _single_coin_exact(target_probs, draft_probs, draft_tokens, parents, generator)


@register(contract="tree", kind="control", models="control: SpecInfer multi-step speculative sampling (arXiv 2305.09781), "
          "an independent formulation (exponential clocks, unnormalised residuals)")
def tree_exponential_race(target_probs, draft_probs, draft_tokens, parents, generator):
    """SpecInfer against the declared laws with exponential clocks for every random choice: accept child c
    iff E_c > log d_c(x) − log p′(x) (probability min(1, p′/d_c)); the residual (p′ − m·d_c)₊ is kept
    unnormalised with its mass m; the last token is argmin_y E_y / r(y) over the working law r."""
    shape = validate_tree(parents, draft_tokens, draft_probs, target_probs)
    B, N = draft_tokens.shape
    V = target_probs.shape[-1]
    gen_device = generator.device if generator is not None else torch.device("cpu")
    clocks = torch.empty(B, N + V, dtype=torch.float64, device=gen_device).exponential_(generator=generator)
    clocks = clocks.to(target_probs.device)
    node = torch.zeros(B, dtype=torch.long, device=target_probs.device)
    r = target_probs[:, 0].to(torch.float64, copy=True)  # working law (own copy), unnormalised: mass r.sum()
    tokens = torch.full((B, shape.max_depth), -1, dtype=torch.long, device=target_probs.device)
    for n in range(N):
        rows = (node == shape.parents[n] + 1).nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        x = draft_tokens[rows, n].long()
        mass = r[rows].sum(1)
        d = draft_probs[rows, n].double()
        d = d / d.sum(1, keepdim=True)
        r_x, d_x = r[rows].gather(1, x.unsqueeze(1)).squeeze(1), d.gather(1, x.unsqueeze(1)).squeeze(1)
        ok = clocks[rows, n] > d_x.log() - (r_x / mass).log()  # −inf (d_x = 0) accepts, +inf (r_x = 0) rejects
        rej = rows[~ok]
        r[rej] = (r[rej] - mass[~ok].unsqueeze(1) * d[~ok]).clamp_min(0)
        acc = rows[ok]
        node[acc] = n + 1
        r[acc] = target_probs[acc, n + 1].double()
        tokens[acc, shape.depth[n + 1] - 1] = x[ok]
    final = (r.log() - clocks[:, N:].log()).argmax(1)  # r(y) = 0 never wins
    return emitted(tokens, node, shape, final)


@register(contract="tree", kind="mutant",
          models="lossy by design: SGLang --speculative-accept-threshold-single/-acc < 1 (relaxed acceptance)")
def sglang_relaxed_thresholds(target_probs, draft_probs, draft_tokens, parents, generator):
    """SGLang-style one coin per level with threshold_single = threshold_acc = 0.5: a sibling is accepted
    when the coin is under twice the cumulated mass, or when its own target mass is ≥ 0.5 (lossy by
    design: must fail, never be reported lossless)."""
    return _single_coin_relaxed(target_probs, draft_probs, draft_tokens, parents, generator)


TREE_RULES["tree_single_coin"] = single_coin_rule(1.0, 1.0)
TREE_RULES["sglang_relaxed_thresholds"] = single_coin_rule(SGLANG_THRESHOLD_SINGLE, SGLANG_THRESHOLD_ACC)

def exact_tree_tv_table(names: list[str], cases: dict[str, tuple[tuple[int, ...], str]], V: int = 4,
                        seed: int = 0) -> dict[str, dict[str, float]]:
    """{name: {case: worst node TV}} on `cases` ({case: (parents, scheme)}, trees small enough to enumerate)
    with laws softmax(N(0, 1.5²)) and a noisy draft."""
    from specdec_ref.tree import tree_shape

    out: dict[str, dict[str, float]] = {name: {} for name in names}
    g = torch.Generator().manual_seed(seed)
    for case, (parents, scheme) in cases.items():
        shape = tree_shape(parents)
        z = 1.5 * torch.randn(shape.n_nodes + 1, V, generator=g, dtype=torch.float64)
        p, q = torch.softmax(z, -1), torch.softmax(z + torch.randn(z.shape, generator=g, dtype=torch.float64), -1)
        for name in names:
            out[name][case] = max(exact_tree_tvs(TREE_RULES[name], shape, p, q, scheme))
    return out


def tree_case_tensors(name: str) -> tuple[TreeShape, Tensor, Tensor, str]:
    """(shape, p, q, scheme) of a registered tree case, as float64 tensors (for exact laws)."""
    from harness.check.tree import plan_case, select_cases

    plan = plan_case(select_cases([name])[0])
    return plan.shape, torch.from_numpy(plan.p), torch.from_numpy(plan.q), plan.case.scheme


__all__ = ["TREE_RULES", "enumerate_drafts", "exact_tree_tv_table", "single_coin_rule", "exact_node_laws", "exact_tree_tvs", "single_coin",
           "tree_case_tensors"]
