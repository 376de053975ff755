"""The tree-level case catalogue: tree shapes, sampling schemes and laws `specdec verify --family tree`
runs when no `--cases` are named (harness.check.tree loads `CASES` through harness.policy)."""

from __future__ import annotations

import numpy as np

from harness.check.tree import TreeCase, caterpillar, full_tree
from specdec_ref.tree import TreeShape
from suites.catalogues.sampler import softmax


def _depth_laws(V: int, sigma: float, noise: float, anti: bool):
    """i.i.d. cases: p and q depend on the depth only (equal siblings stay indistinguishable)."""
    def build(rng: np.random.Generator, shape: TreeShape):
        z = rng.normal(0, sigma, size=(shape.max_depth + 1, V))
        p = softmax(z)
        q = softmax(-z if anti else z + rng.normal(0, noise, size=z.shape))
        idx = list(shape.depth)
        return p[idx], q[idx]
    return build


def _node_laws(V: int, sigma: float, noise: float, anti: bool):
    """Distinct siblings: every target index has its own p and q."""
    def build(rng: np.random.Generator, shape: TreeShape):
        z = rng.normal(0, sigma, size=(shape.n_nodes + 1, V))
        q = softmax(-z if anti else z + rng.normal(0, noise, size=z.shape))
        return softmax(z), q
    return build


CASES: list[TreeCase] = [
    TreeCase("iid-b2-d2-duplicates", full_tree([2, 2]), "iid", _depth_laws(4, 1.0, 0.5, False),
             "i.i.d. children, V = 4: equal siblings in most rows"),
    TreeCase("iid-b8-d1-low", full_tree([8]), "iid", _depth_laws(16, 2.0, 0.0, True),
             "8 i.i.d. children of the root, q = softmax(−logits): low acceptance, 8 residual updates"),
    TreeCase("iid-caterpillar-d5", caterpillar(5, 1), "iid", _depth_laws(8, 1.5, 0.3, False),
             "depth 5, two i.i.d. children per level, q ≈ p: deep nodes reached"),
    TreeCase("wr-b3-d2", full_tree([3, 3]), "without_replacement", _node_laws(8, 1.5, 0.8, False),
             "3 × 3 children drawn without replacement, own laws per node"),
    TreeCase("wr-b8-d1-low", full_tree([8]), "without_replacement", _node_laws(16, 2.0, 0.0, True),
             "8 children without replacement, q = softmax(−logits): low acceptance"),
    TreeCase("topk-4-2-1", full_tree([4, 2, 1]), "topk", _node_laws(16, 2.5, 0.5, False),
             "EAGLE-style deterministic top-k tree 4-2-1 (depth 3, 20 nodes), own laws per node"),
    TreeCase("topk-b2-d4", full_tree([2, 1, 1, 1]), "topk", _node_laws(8, 3.0, 0.3, False),
             "two top-2 branches of depth 4, peaked laws (high acceptance)"),
]

# Trees small enough to enumerate (V = 4), one per scheme: where the exact TVs of the tree zoo are computed
# ({case: (parents, scheme)}; harness.mutants.tree.exact_tree_tv_table).
EXACT_CASES = {"iid": ((-1, -1, 0, 0, 1, 1), "iid"), "without_replacement": ((-1, -1, -1, 0, 1, 2), "without_replacement"),
               "topk": ((-1, -1, 0, 0, 1, 1), "topk")}
