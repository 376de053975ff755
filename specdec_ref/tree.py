"""Tree verification: one speculative step over a token tree of N drafted nodes, batched over B rows.

Contract (docs/CONTRACT-tree.md). Nodes are numbered 0..N−1; `parents[n]` is node n's parent (−1: the
root, i.e. the prompt) and every child is listed after its parent, so node order is a topological
order. Laws are indexed by *position after*: target index 0 is the root (the target's law after the
prompt), target index n + 1 is the law after node n. Per row b:

    draft_probs[b, n]   the law node n's token was drawn from, given its ancestors and its *earlier*
                        siblings (lower index, same parent). This single rule declares the scheme:
                        i.i.d. siblings all carry the parent's draft law q_u; without-replacement
                        siblings carry q_u with the earlier siblings' tokens removed, renormalised;
                        deterministic (top-k / beam) siblings carry a point mass on their own token.
    target_probs[b, t]  the target's law at target index t (root, then after each node).

Output [B, D + 1] int64, D = tree depth: the tokens of the accepted root-to-node path, then one
token drawn after its last node, then −1. The step is lossless at node v when, among rows whose
path reaches v, the next emitted token has law p_v = target_probs[:, v + 1].

References (one walk, `walk`, parameterised by a `SiblingRule`):

- **SpecInfer multi-step speculative sampling** (Miao et al. 2023, arXiv 2305.09781): at the current
  node with working law p′ (initially its target law), test its children in index order: accept child
  c with probability min(1, p′(x_c) / d_c(x_c)), d_c its declared law; on rejection replace p′ by
  norm((p′ − d_c)₊). If every child is rejected (or the node is a leaf), emit a token from p′.
  With i.i.d. children d_c = q_u for all; without replacement d_c is the conditional law of the k-th
  draw, which is the correct residual update for that scheme (Jeon et al. 2024, arXiv 2402.14160:
  recursive rejection sampling). Lossless whenever each token really was drawn from its d_c.
- **Deterministic top-k children** (EAGLE-2/3, SGLang): siblings are point masses, so the same rule
  reads: accept c with probability p′(x_c); on rejection zero p′(x_c) and renormalise. It never reads
  draft_probs and is lossless for any way the tokens were chosen (acceptance is lower than SpecInfer's
  when the children were in fact sampled).

Each step of a rule is exact: the emitted token at node u is min(p′, d)(y) + (1 − α)·norm((p′ − d)₊)(y)
= p′(y) in law, and the recursion over siblings turns p′ = p_u into p_u.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

from specdec_ref.errors import SpecDecInputError
from specdec_ref.sampling import sample_from_uniform
from specdec_ref.verify import check_probs

SCHEMES = ("iid", "without_replacement", "topk")
_LAW_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-5}  # sibling laws compared to what the scheme implies

Tensor = torch.Tensor


# ---------------------------------------------------------------- the step and its shape

@dataclasses.dataclass(frozen=True)
class TreeShape:
    """The tree structure derived once from `parents` (plain Python lists, small)."""

    parents: tuple[int, ...]  # [N] parent node index, −1 = root
    depth: tuple[int, ...]  # [N + 1] by target index: 0 for the root, depth(node n) at n + 1
    children: tuple[tuple[int, ...], ...]  # [N + 1] by target index: child node indices, in order

    @property
    def n_nodes(self) -> int:
        return len(self.parents)

    @property
    def max_depth(self) -> int:
        return max(self.depth)

    def siblings(self, n: int) -> tuple[int, ...]:
        """Node n's sibling group (itself included), in index order."""
        return self.children[self.parents[n] + 1]

    def path(self, t: int) -> list[int]:
        """Node indices from the root's child down to target index t (empty for the root)."""
        out = []
        n = t - 1
        while n >= 0:
            out.append(n)
            n = self.parents[n]
        return out[::-1]


@dataclasses.dataclass(frozen=True)
class TreeStep:
    """The inputs of one tree verification step (docs/CONTRACT-tree.md).

    `scheme` is the harness's declaration of how siblings were drawn ("iid", "without_replacement",
    "topk"); implementations are not given it, because `draft_probs` already carries each node's
    conditional law. `validate` checks the laws against it.
    """

    target_probs: Tensor  # [B, N+1, V] float; target law at the root (0) and after every node (n + 1)
    draft_probs: Tensor  # [B, N, V] float; the law node n's token was drawn from (given earlier siblings)
    draft_tokens: Tensor  # [B, N] int64; node tokens
    parents: Tensor  # [N] int64; parent node index, −1 = root; children listed after their parent
    generator: torch.Generator | None = None
    scheme: str | None = None  # None: not declared (only the shapes and laws are checked)

    def validate(self) -> TreeShape:
        return validate_tree(self.parents, self.draft_tokens, self.draft_probs, self.target_probs, self.scheme)


def tree_shape(parents: Tensor | Sequence[int]) -> TreeShape:
    """Check `parents` alone (range, cycles, order) and return the derived structure."""
    if isinstance(parents, torch.Tensor):
        if parents.dim() != 1 or parents.is_floating_point() or parents.dtype == torch.bool:
            raise SpecDecInputError(f"parents must be a 1-D int64 tensor [N], got {parents.dtype} of shape "
                                    f"{tuple(parents.shape)}")
        parents = parents.tolist()
    parents = [int(v) for v in parents]
    N = len(parents)
    if N == 0:
        raise SpecDecInputError("parents is empty: a tree step needs at least one drafted node")
    for n, par in enumerate(parents):
        if not -1 <= par < N:
            raise SpecDecInputError(f"parents[{n}] = {par} is out of range: use -1 (the root) or a node index in [0, {N})")
    for n in range(N):  # follow parent links; N + 1 steps without reaching the root means a cycle
        seen, v = [], n
        while v != -1:
            if v in seen:
                cycle = seen[seen.index(v):] + [v]
                raise SpecDecInputError(f"parents form a cycle: {' -> '.join(map(str, cycle))} (a tree has none)")
            seen.append(v)
            v = parents[v]
    for n, par in enumerate(parents):
        if par >= n:
            raise SpecDecInputError(f"node {n} is listed before its parent {par}: list every child after its parent")
    depth = [0] * (N + 1)
    children: list[list[int]] = [[] for _ in range(N + 1)]
    for n, par in enumerate(parents):
        depth[n + 1] = depth[par + 1] + 1
        children[par + 1].append(n)
    return TreeShape(tuple(parents), tuple(depth), tuple(tuple(c) for c in children))


def validate_tree(
    parents: Tensor | Sequence[int],  # [N]
    draft_tokens: Tensor,  # [B, N]
    draft_probs: Tensor,  # [B, N, V]
    target_probs: Tensor,  # [B, N+1, V]
    scheme: str | None = None,
) -> TreeShape:
    """Refuse malformed steps with one clear line (SpecDecInputError); return the tree structure."""
    shape = tree_shape(parents)
    N = shape.n_nodes
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.dim() != 2:
        raise SpecDecInputError("draft_tokens must be an int64 tensor of shape [B, N]")
    if draft_tokens.is_floating_point() or draft_tokens.dtype == torch.bool:
        raise SpecDecInputError(f"draft_tokens must be an integer tensor, got {draft_tokens.dtype}")
    check_probs(target_probs, "target_probs")
    check_probs(draft_probs, "draft_probs")
    B, n_tokens = draft_tokens.shape
    if n_tokens != N:
        raise SpecDecInputError(f"node count mismatch: parents has {N} nodes, draft_tokens has {n_tokens} columns")
    if draft_probs.shape[:2] != (B, N):
        raise SpecDecInputError(f"node/law count mismatch: draft_probs must be [B, N, V] = [{B}, {N}, V], "
                                f"got {tuple(draft_probs.shape)}")
    if target_probs.shape[:2] != (B, N + 1):
        raise SpecDecInputError(f"node/law count mismatch: target_probs must be [B, N+1, V] = [{B}, {N + 1}, V] "
                                f"(the root, then one law after every node), got {tuple(target_probs.shape)}")
    V = target_probs.shape[-1]
    if draft_probs.shape[-1] != V:
        raise SpecDecInputError(f"shape mismatch: target_probs has V = {V}, draft_probs has V = {draft_probs.shape[-1]}")
    if draft_tokens.numel() and (int(draft_tokens.min()) < 0 or int(draft_tokens.max()) >= V):
        raise SpecDecInputError(f"draft_tokens must be token ids in [0, {V}), got range "
                                f"[{int(draft_tokens.min())}, {int(draft_tokens.max())}]")
    drawn = draft_probs.gather(-1, draft_tokens.long().unsqueeze(-1)).squeeze(-1)  # [B, N]
    if bool((drawn <= 0).any()):
        b, n = (drawn <= 0).nonzero()[0].tolist()
        raise SpecDecInputError(f"draft_tokens[{b}, {n}] = {int(draft_tokens[b, n])} has probability 0 under "
                                "draft_probs[b, n], the law it was drawn from")
    if scheme is not None:
        _check_scheme(shape, draft_tokens, draft_probs, scheme)
    return shape


def sibling_laws(q: Tensor, tokens: Tensor, scheme: str) -> Tensor:
    """The declared law of each sibling: q [B, V] the parent's draft law, tokens [B, k] -> [B, k, V].

    iid: q for every sibling; without_replacement: q with the earlier siblings' tokens removed,
    renormalised; topk: a point mass on each sibling's own token.
    """
    if scheme not in SCHEMES:
        raise SpecDecInputError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    B, k = tokens.shape
    V = q.shape[-1]
    onehot = torch.nn.functional.one_hot(tokens.long(), V).to(q.dtype)  # [B, k, V]
    if scheme == "topk":
        return onehot
    if scheme == "iid":
        return q.unsqueeze(1).expand(B, k, V)
    removed = torch.cumsum(onehot, dim=1) - onehot  # [B, k, V]: tokens of earlier siblings
    kept = q.unsqueeze(1) * (removed == 0)
    return kept / kept.sum(-1, keepdim=True).clamp_min(torch.finfo(q.dtype).tiny)


def _check_scheme(shape: TreeShape, draft_tokens: Tensor, draft_probs: Tensor, scheme: str) -> None:
    tol = _LAW_TOLERANCE.get(draft_probs.dtype, 1e-3)
    for group in shape.children:
        if not group:
            continue
        idx = list(group)
        tokens = draft_tokens[:, idx]  # [B, k]
        if scheme != "iid" and len(idx) > 1:
            dup = (tokens.unsqueeze(1) == tokens.unsqueeze(2)).sum((1, 2)) > len(idx)
            if bool(dup.any()):
                raise SpecDecInputError(f"scheme {scheme!r}: sibling nodes {idx} repeat a token in row "
                                        f"{int(dup.nonzero()[0])}; this scheme gives distinct siblings")
        first = draft_probs[:, idx[0]].double()
        expected = sibling_laws(first, tokens, scheme)  # [B, k, V]
        worst = float((draft_probs[:, idx].double() - expected).abs().max())
        if worst > tol:
            raise SpecDecInputError(f"scheme {scheme!r}: draft_probs of sibling nodes {idx} are not what the scheme "
                                    f"implies from the first sibling's law (off by {worst:.3g})")


# ---------------------------------------------------------------- the walk

class SiblingRule(NamedTuple):
    """How one sibling is tested and what a rejection leaves; `walk` does the rest.

    test_law(draft_probs, draft_tokens, rows, n, shape) -> [R, V]: the law the token is tested against;
    threshold(p′ [R, V], d [R, V], x [R]) -> [R]: P(accept) (the test is u < threshold);
    residual_law(...) -> [R, V]: the law removed from p′ on rejection (same arguments as test_law);
    reject(p′, d, x) -> [R, V]: the new working law; final(p′ [R, V]) -> [R, V]: law of the last token.
    """

    test_law: Callable
    threshold: Callable[[Tensor, Tensor, Tensor], Tensor]
    residual_law: Callable
    reject: Callable[[Tensor, Tensor, Tensor], Tensor]
    final: Callable[[Tensor], Tensor]


def normalized(t: Tensor) -> Tensor:
    return t / t.sum(dim=-1, keepdim=True)


def declared_law(draft_probs: Tensor, draft_tokens: Tensor, rows: Tensor, n: int, shape: TreeShape) -> Tensor:
    """The law node n was drawn from, as declared ([R, V] float64)."""
    return normalized(draft_probs[rows, n].double())


def point_mass(draft_probs: Tensor, draft_tokens: Tensor, rows: Tensor, n: int, shape: TreeShape) -> Tensor:
    """A point mass on node n's token, whatever was declared (deterministic siblings)."""
    return torch.nn.functional.one_hot(draft_tokens[rows, n].long(), draft_probs.shape[-1]).double()


def ratio_threshold(p: Tensor, d: Tensor, x: Tensor) -> Tensor:
    """min(1, p′(x)/d(x)); d(x) = 0 (x not drawable from d) counts as ratio +inf, accepted iff p′(x) > 0."""
    p_x = p.gather(-1, x.long().unsqueeze(-1)).squeeze(-1)
    d_x = d.gather(-1, x.long().unsqueeze(-1)).squeeze(-1)
    return torch.where(d_x > 0, (p_x / d_x.clamp_min(1e-300)).clamp_max(1.0), (p_x > 0).double())


def residual(p: Tensor, d: Tensor, x: Tensor | None = None) -> Tensor:
    """norm((p′ − d)₊); p′ itself where that has no mass (then p′ ≤ d everywhere and a rejection has probability 0)."""
    r = (p - d).clamp_min(0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / mass.clamp_min(1e-300), p)


def _identity(t: Tensor) -> Tensor:
    return t


SPECINFER = SiblingRule(declared_law, ratio_threshold, declared_law, residual, _identity)
TOPK = SiblingRule(point_mass, ratio_threshold, point_mass, residual, _identity)  # min(1, p′/1) = p′(x)


class Walk(NamedTuple):
    node: Tensor  # [B] target index of the last accepted node (0 = root)
    tokens: Tensor  # [B, D] accepted path tokens, −1 padded
    final_law: Tensor  # [B, V] float64 law of the token emitted after `node`
    threshold: Tensor  # [B, N] float64 acceptance probability each tested node had (nan: not tested)


def walk(
    target_probs: Tensor,  # [B, N+1, V]
    draft_probs: Tensor,  # [B, N, V]
    draft_tokens: Tensor,  # [B, N]
    shape: TreeShape,
    u_accept: Tensor,  # [B, N] uniforms, one per node's acceptance test
    rule: SiblingRule = SPECINFER,
) -> Walk:
    """Deterministic core: every row descends from the root, testing the children of its current node.

    Nodes are visited in index order; because children follow their parents, a row that moves to node
    c meets all of c's children later in the loop, and a row at node u sees u's children in order.
    """
    B, _, V = target_probs.shape
    node = torch.zeros(B, dtype=torch.long, device=target_probs.device)
    p_cur = normalized(target_probs[:, 0].double())  # [B, V] working law at the current node
    tokens = torch.full((B, shape.max_depth), -1, dtype=torch.long, device=target_probs.device)
    threshold = torch.full((B, shape.n_nodes), float("nan"), dtype=torch.float64, device=target_probs.device)
    for n in range(shape.n_nodes):
        rows = (node == shape.parents[n] + 1).nonzero().squeeze(1)  # rows deciding among n's siblings
        if rows.numel() == 0:
            continue
        x = draft_tokens[rows, n].long()
        a = rule.threshold(p_cur[rows], rule.test_law(draft_probs, draft_tokens, rows, n, shape), x)  # [R]
        threshold[rows, n] = a
        accepted = u_accept[rows, n].to(a.dtype) < a
        rejected = rows[~accepted]
        if rejected.numel():
            removed = rule.residual_law(draft_probs, draft_tokens, rejected, n, shape)
            p_cur[rejected] = rule.reject(p_cur[rejected], removed, x[~accepted])
        moved = rows[accepted]
        node[moved] = n + 1
        p_cur[moved] = normalized(target_probs[moved, n + 1].double())
        tokens[moved, shape.depth[n + 1] - 1] = x[accepted]
    return Walk(node, tokens, rule.final(p_cur), threshold)


def emitted(path: Tensor, node: Tensor, shape: TreeShape, final_token: Tensor) -> Tensor:
    """path [B, D] accepted tokens, node [B] last target index, final_token [B] -> [B, D + 1]: the path,
    the final token at column depth(node), then −1."""
    depth = torch.tensor(shape.depth, device=node.device)[node]  # [B]
    out = torch.cat([path, path.new_full((path.shape[0], 1), -1)], dim=1)
    out[torch.arange(out.shape[0], device=out.device), depth] = final_token
    return out


def tree_verify_from_uniforms(
    target_probs: Tensor,  # [B, N+1, V]
    draft_probs: Tensor,  # [B, N, V]
    draft_tokens: Tensor,  # [B, N]
    parents: Tensor,  # [N]
    u_accept: Tensor,  # [B, N]
    u_final: Tensor,  # [B]
    rule: SiblingRule = SPECINFER,
    shape: TreeShape | None = None,
) -> Tensor:  # [B, D+1] int64
    """`rule` on given uniforms (validated unless `shape` is passed in)."""
    shape = shape or validate_tree(parents, draft_tokens, draft_probs, target_probs)
    w = walk(target_probs, draft_probs, draft_tokens, shape, u_accept, rule)
    return emitted(w.tokens, w.node, shape, sample_from_uniform(w.final_law, u_final))


def tree_verify(
    target_probs: Tensor,  # [B, N+1, V]
    draft_probs: Tensor,  # [B, N, V]
    draft_tokens: Tensor,  # [B, N]
    parents: Tensor,  # [N]
    generator: torch.Generator | None = None,
    rule: SiblingRule = SPECINFER,
) -> Tensor:  # [B, D+1] int64
    """`rule` drawing N + 1 uniforms per row from `generator` (N acceptance tests, then the final draw)."""
    shape = validate_tree(parents, draft_tokens, draft_probs, target_probs)
    B = draft_tokens.shape[0]
    gen_device = generator.device if generator is not None else torch.device("cpu")
    u = torch.rand(B, shape.n_nodes + 1, generator=generator, device=gen_device, dtype=torch.float64)
    u = u.to(target_probs.device)
    return tree_verify_from_uniforms(target_probs, draft_probs, draft_tokens, parents, u[:, :-1], u[:, -1],
                                     rule, shape)
