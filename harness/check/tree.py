"""Tree-level losslessness check (docs/CONTRACT-tree.md): one verification step over a token tree.

Each case fixes a tree (`parents`), a sibling scheme and laws per target index t (t = 0 the root,
t = n + 1 after node n): the target law p_t and the draft law q_t of t's children. The harness draws
the node tokens itself from the declared laws (i.i.d., without replacement, or the deterministic
top-k of q_t), passes each node's conditional law as draft_probs, calls the implementation and tests
what comes back. Pure test functions, each with a `count_...` companion that says how many gating
tests it emits:

- `tests_for_tree_format`: shape [B, D+1], ids in [0, V), −1 only at the tail, and the emitted path
  follows parent links with the node tokens (a row's path is read as the lowest-index node sequence
  whose tokens match: with equal siblings, a rule that removes rejected tokens from its working law can
  only accept the first of them);
- `tests_for_node_laws`: per node v reached with probability ≥ MIN_NODE_REACH, among the rows whose path
  reached v the next emitted token ~ p_v (the per-position battery of `harness.check.sampler_tests`);
- `tests_for_reach_bounds`: per node v, P(path reaches v) ≤ Σ_x min(Π p, Π m) along v's path, with m
  the marginal law of each path node's token (the universal coupling bound: the emitted prefix has the
  target's law and the drafted one the draft's, and reaching v needs them equal; no lossless rule beats
  it). Gating on "above";
- row independence (the sampler check's runs test on emitted lengths).

In i.i.d. cases, equal siblings are possible, so their laws are kept equal: p and q depend on the
depth only, and reading the path through the first of equal siblings cannot bias a per-node test.
Without replacement and top-k, siblings are distinct and every node has its own laws.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import zlib
from collections.abc import Callable, Sequence

import numpy as np
import torch

from harness.adapters.calling import call_impl
from harness.check.config import DEFAULT_TREE_TV, MIN_NODE_REACH  # noqa: F401 - DEFAULT_TREE_TV: public
from harness.check.driver import (
    Cell,
    Check,
    CheckConfig,
    MalformedTrials,
    TrialSource,
    run_battery,
    select,
)
from harness.check.report import CheckReport, deterministic_result
from harness.check.sampler_cases import MAX_CELLS, tests_per_position
from harness.check.sampler_source import CHUNK_FLOATS, Streams, padded_rows_problems
from harness.check.sampler_tests import position_tests, row_independence
from harness.errors import HarnessError
from harness.policy import catalogue
from harness.stats import TestResult, binomial_event_test, samples_needed
from specdec_ref.errors import SpecDecInputError
from specdec_ref.tree import SCHEMES, TreeShape, sibling_laws, tree_shape, validate_tree

PILOT_ROWS = 20_000  # rows of the reference used to estimate P(reach v) for planning
BOUND_ENUMERATION_MAX = 1 << 22  # joint cells enumerated for one path bound


@dataclasses.dataclass(frozen=True)
class TreeCase:
    name: str
    parents: tuple[int, ...]  # [N]
    scheme: str  # "iid" | "without_replacement" | "topk"
    build: Callable[[np.random.Generator, TreeShape], tuple[np.ndarray, np.ndarray]]  # -> p, q [N+1, V]
    description: str
    tv: float | None = None  # planned detectable TV (None: the suite's)


def full_tree(branching: Sequence[int]) -> tuple[int, ...]:
    """Parents of the complete tree with branching[d] children per node at depth d (breadth-first order)."""
    parents: list[int] = []
    depth = [-1]
    for k in branching:
        nxt = []
        for par in depth:
            for _ in range(k):
                parents.append(par)
                nxt.append(len(parents) - 1)
        depth = nxt
    return tuple(parents)


def caterpillar(depth: int, extra: int) -> tuple[int, ...]:
    """A chain of `depth` nodes with `extra` leaf siblings beside each chain node (first child continues)."""
    parents: list[int] = []
    spine = -1
    for _ in range(depth):
        parents.append(spine)
        nxt = len(parents) - 1
        parents += [spine] * extra
        spine = nxt
    return tuple(parents)


def default_cases() -> list[TreeCase]:
    """The policy's tree catalogue (suites/catalogues/tree.py), in its run order."""
    return list(catalogue("tree").CASES)


def case_names() -> list[str]:
    return [c.name for c in default_cases()]


def custom_tree_case(name: str, parents, p, q, scheme: str, description: str = "", tv: float | None = None) -> TreeCase:
    """A case from explicit laws: parents [N], p [N+1, V] target laws, q [N+1, V] draft law of each index's
    children (rows of leaves are unused). Malformed input raises HarnessError with one line."""
    try:
        shape = tree_shape(list(parents))
    except SpecDecInputError as exc:
        raise HarnessError(f"tree case {name!r}: {exc}") from None
    if scheme not in SCHEMES:
        raise HarnessError(f"tree case {name!r}: scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    N = shape.n_nodes
    if p.ndim != 2 or p.shape[0] != N + 1 or q.shape != p.shape:
        raise HarnessError(f"tree case {name!r}: node/law count mismatch: {N} nodes need p and q of shape "
                           f"[N+1, V] = [{N + 1}, V], got {p.shape} and {q.shape}")
    if (p < 0).any() or (q < 0).any() or not (np.allclose(p.sum(-1), 1, atol=1e-6) and np.allclose(q.sum(-1), 1, atol=1e-6)):
        raise HarnessError(f"tree case {name!r}: every row of p and q must be a probability law (≥ 0, sums to 1)")
    for t, group in enumerate(shape.children):
        if scheme != "iid" and len(group) > int((q[t] > 0).sum()):
            raise HarnessError(f"tree case {name!r}: index {t} has {len(group)} distinct children but q has only "
                               f"{int((q[t] > 0).sum())} tokens with positive probability")
    return TreeCase(name, shape.parents, scheme, lambda rng, s: (p, q), description or name, tv)


def load_tree_case(path: str) -> TreeCase:
    """A custom case from a JSON file {"parents": [...], "p": [[...]], "q": [[...]], "scheme": "..."} (CLI use)."""
    try:
        with open(path) as fh:
            spec = json.load(fh)
        return custom_tree_case(spec.get("name", path), spec["parents"], spec["p"], spec["q"], spec["scheme"],
                                spec.get("description", ""))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HarnessError(f"cannot read tree case {path}: {type(exc).__name__}: {exc}") from None


# ---------------------------------------------------------------- drafting by the harness

def topk_tokens(q: np.ndarray | torch.Tensor, k: int) -> list[int]:
    """The k likeliest tokens of q, ties by lower index (deterministic siblings)."""
    order = np.argsort(-np.asarray(q, dtype=np.float64), kind="stable")
    return [int(v) for v in order[:k]]


def draw_tree(
    shape: TreeShape, q: torch.Tensor, scheme: str, rows: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [N+1, V] float64 -> (draft_tokens [rows, N] int64, draft_probs [rows, N, V] float64) from the scheme."""
    N, V = shape.n_nodes, q.shape[-1]
    tokens = torch.empty(rows, N, dtype=torch.long)
    probs = torch.empty(rows, N, V, dtype=torch.float64)
    for t, group in enumerate(shape.children):
        if not group:
            continue
        idx, k, q_t = list(group), len(group), q[t]
        if scheme == "iid":
            x = torch.multinomial(q_t, rows * k, replacement=True, generator=generator).view(rows, k)
        elif scheme == "without_replacement":  # torch draws sequentially ∝ the remaining weights
            x = torch.multinomial(q_t.expand(rows, V), k, replacement=False, generator=generator)
        else:
            x = torch.tensor(topk_tokens(q_t, k)).expand(rows, k)
        tokens[:, idx] = x
        probs[:, idx] = sibling_laws(q_t.expand(rows, V), x, scheme)
    return tokens, probs


def node_marginals(shape: TreeShape, q: np.ndarray, scheme: str) -> np.ndarray:
    """[N, V]: the marginal law of each node's token (the k-th draw without replacement is not q)."""
    N, V = shape.n_nodes, q.shape[-1]
    out = np.zeros((N, V))
    for t, group in enumerate(shape.children):
        if not group:
            continue
        if scheme == "iid":
            out[list(group)] = q[t]
        elif scheme == "topk":
            for n, x in zip(group, topk_tokens(q[t], len(group)), strict=True):
                out[n, x] = 1.0
        else:
            out[list(group)] = _without_replacement_marginals(q[t], len(group))
    return out


def _without_replacement_marginals(q: np.ndarray, k: int) -> np.ndarray:
    """[k, V] law of the i-th of k sequential draws without replacement from q (dynamic programme over the
    set drawn so far)."""
    laws = np.zeros((k, len(q)))
    states = {frozenset(): 1.0}
    for i in range(k):
        nxt: dict[frozenset, float] = {}
        for drawn, w in states.items():
            rest = q.copy()
            rest[list(drawn)] = 0.0
            rest = rest / rest.sum()
            laws[i] += w * rest
            for y in np.flatnonzero(rest):
                key = drawn | {int(y)}
                nxt[key] = nxt.get(key, 0.0) + w * rest[y]
        states = nxt
    return laws


def path_bound(p_path: np.ndarray, m_path: np.ndarray) -> float:
    """Σ_x min(Π_i p_i(x_i), Π_i m_i(x_i)) over the supports (p_path, m_path [k, V]): the largest
    probability with which any lossless rule emits k given drafted tokens (= 1 − TV of the products)."""
    supports = [np.flatnonzero(m) for m in m_path]
    cells = math.prod(len(s) for s in supports)
    if cells > BOUND_ENUMERATION_MAX:
        raise HarnessError(f"path bound over {cells} joint cells: use a smaller vocabulary or shallower tree")
    joint_p = np.ones(1)
    joint_m = np.ones(1)
    for s, p_i, m_i in zip(supports, p_path, m_path, strict=True):
        joint_p = np.outer(joint_p, p_i[s]).ravel()
        joint_m = np.outer(joint_m, m_i[s]).ravel()
    return float(np.minimum(joint_p, joint_m).sum())


def reach_bounds(shape: TreeShape, p: np.ndarray, marginals: np.ndarray) -> np.ndarray:
    """[N + 1] universal bound on P(reach t) for every target index (1 at the root)."""
    out = np.ones(shape.n_nodes + 1)
    for t in range(1, shape.n_nodes + 1):
        path = shape.path(t)
        out[t] = path_bound(p[[shape.parents[n] + 1 for n in path]], marginals[path])
    return out


# ---------------------------------------------------------------- reading the output

def read_paths(out: np.ndarray, tokens: np.ndarray, shape: TreeShape) -> tuple[np.ndarray, np.ndarray]:
    """out [B, D+1] emitted tokens, tokens [B, N] node drafts -> (reached [B, N+1] bool by target index,
    on_tree [B] bool: the path follows parent links and node tokens).

    A row's path is read as the lowest-index node sequence whose tokens match (equal siblings)."""
    B = out.shape[0]
    length = (out >= 0).sum(1) - 1  # path length L (the last emitted token is not a node)
    N = shape.n_nodes
    # match[:, n]: node n lies on some node path whose tokens equal the emitted ones down to depth(n)
    match = np.zeros((B, N + 1), dtype=bool)
    match[:, 0] = True
    for n in range(N):
        d = shape.depth[n + 1]
        match[:, n + 1] = match[:, shape.parents[n] + 1] & (d <= length) & (out[:, d - 1] == tokens[:, n])
    depth = np.asarray(shape.depth)
    ends = match & (depth[None, :] == length[:, None])  # [B, N+1] candidate last nodes
    on_tree = ends.any(1)
    last = np.where(on_tree, ends.argmax(1), 0)  # lowest index among candidates (root when L = 0)
    reached = np.zeros((B, N + 1), dtype=bool)
    reached[np.arange(B), last] = on_tree
    # a node is reached when a descendant was: sweep children before parents (reverse index order)
    for n in range(N - 1, -1, -1):
        reached[:, shape.parents[n] + 1] |= reached[:, n + 1]
    return reached, on_tree


def format_problems(out, tokens: np.ndarray, shape: TreeShape, V: int) -> tuple[list[str], np.ndarray | None]:
    """Structural checks of one output batch; returns (problems, output as int64 numpy or None)."""
    problems, arr = padded_rows_problems(out, tokens.shape[0], shape.max_depth + 1, V, "[B, D+1]")
    if arr is None:
        return problems, None
    n = (arr >= 0).sum(1)
    _, on_tree = read_paths(arr, tokens, shape)
    if not on_tree[n >= 1].all():
        problems.append(f"{int((~on_tree & (n >= 1)).sum())} rows emit a path that does not follow the tree "
                        "(parent links and node tokens)")
    return problems, arr


# ---------------------------------------------------------------- plan and pure test functions

@dataclasses.dataclass
class TreePlan:
    case: TreeCase
    shape: TreeShape
    p: np.ndarray  # [N+1, V] target law by target index
    q: np.ndarray  # [N+1, V] draft law of each index's children
    reach: np.ndarray  # [N+1] P(reach t) under the reference (pilot estimate, planning only)
    bounds: np.ndarray  # [N+1] universal bound on P(reach t)
    tested: list[int]  # target indices whose next-token law is tested
    rows: int = 0

    @property
    def vocab(self) -> int:
        return self.p.shape[1]


def tests_for_tree_format(problems: list[str], rows: int, prefix: str) -> list[TestResult]:
    return [deterministic_result(f"{prefix}/format", not problems, n=rows, message="; ".join(problems))]


def count_tests_for_tree_format() -> int:
    return 1


def tests_for_node_laws(out: np.ndarray, reached: np.ndarray, plan: TreePlan, rate: float, power: float,
                        prefix: str) -> list[TestResult]:
    """Per tested node t: the token emitted right after t, among the rows whose path reached t, ~ p_t."""
    results = []
    for t in plan.tested:
        col = out[reached[:, t], plan.shape.depth[t]]
        view = _PositionView(plan.p[t][None], plan.vocab)
        for r in position_tests(col[:, None], view, rate, power, f"{prefix}/node{t - 1}" if t else f"{prefix}/root"):
            results.append(dataclasses.replace(r, name=r.name.replace("/pos0/", "/")))
    return results


def count_tests_for_node_laws(plan: TreePlan) -> int:
    return sum(tests_per_position(plan.p[t]) for t in plan.tested)


def _bounded(plan: TreePlan) -> list[int]:
    return [t for t in range(1, plan.shape.n_nodes + 1) if plan.bounds[t] < 1 - 1e-12]


def tests_for_reach_bounds(reached: np.ndarray, plan: TreePlan, rate: float, power: float,
                           prefix: str) -> list[TestResult]:
    """Gating: P(reach node) above the universal coupling bound of its path is impossible for a lossless rule."""
    rows = reached.shape[0]
    return [binomial_event_test(int(reached[:, t].sum()), rows, float(plan.bounds[t]),
                                f"{prefix}/node{t - 1}/reach_above_bound", "greater", rate=rate, power=power)
            for t in _bounded(plan)]


def count_tests_for_reach_bounds(plan: TreePlan) -> int:
    return len(_bounded(plan))


def count_tests_for_case(plan: TreePlan) -> int:
    return count_tests_for_tree_format() + count_tests_for_node_laws(plan) + count_tests_for_reach_bounds(plan) + 1


@dataclasses.dataclass(frozen=True)
class _PositionView:
    """What `sampler.position_tests` reads from a plan, for one column: p [1, V], tested = [0]."""

    p: np.ndarray
    vocab: int
    tested: tuple[int, ...] = (0,)

    @property
    def case(self):
        return self


@functools.lru_cache(maxsize=64)
def plan_case(case: TreeCase) -> TreePlan:
    """Laws are fixed per case (seeded by its name), so the plan is too: the reference's pilot run is cached."""
    from specdec_ref.adapters import tree_verify_specinfer

    shape = tree_shape(case.parents)
    p, q = case.build(np.random.default_rng(zlib.crc32(case.name.encode())), shape)
    bounds = reach_bounds(shape, p, node_marginals(shape, q, case.scheme))
    g = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    tokens, probs = draw_tree(shape, torch.from_numpy(q), case.scheme, PILOT_ROWS, g)
    target = torch.from_numpy(p).expand(PILOT_ROWS, -1, -1)
    out = tree_verify_specinfer(target, probs, tokens, torch.tensor(shape.parents), g).numpy()
    reach = read_paths(out, tokens.numpy(), shape)[0].mean(0)
    tested = [t for t in range(shape.n_nodes + 1) if reach[t] >= MIN_NODE_REACH]
    return TreePlan(case, shape, p, q, reach, bounds, tested)


def run_tree_check(impl: Callable, config: CheckConfig | None = None, *, impl_name: str = "impl",
                   dtype: torch.dtype = torch.float32, progress: Callable[[int], None] | None = None,
                   **fields) -> CheckReport:
    """Run every tree case against `impl` (a tree verify) and decide with Holm at the false-alarm rate
    (the check driver: harness.check.driver.run_battery); `fields` of CheckConfig as in
    `run_sampler_check` (the family is tree)."""
    config = CheckConfig.build(config, **{"family": "tree", **fields})
    report = run_battery(TreeSource(impl, dtype=dtype), config, impl_name=impl_name, progress=progress)
    report.level = "tree"
    return report


# --- the tree family as a trial source of the check driver ------------------------------------------------


def _reached_nodes(trials) -> np.ndarray:
    out, tokens, plan = trials
    return read_paths(out, tokens, plan.shape)[0]  # [rows, N+1] bool


def _node_need(plan: TreePlan, t: int, tv: float, rate: float, power: float) -> int:
    return samples_needed(tv, max(1, min(MAX_CELLS, int((plan.p[t] > 0).sum())) - 1), rate, power)


def _node_laws_samples(cell: Cell, tv: float, rate: float, power: float) -> int:
    plan = cell.data
    need = [_node_need(plan, t, tv, rate, power) / plan.reach[t] for t in plan.tested]
    return int(math.ceil(1.05 * max(need, default=1000)))


def _rarely(reached: np.ndarray, t: int) -> bool:
    """Node t is reached by this implementation too rarely to be in the headline TV (a wasteful rule)."""
    return t > 0 and reached[:, t].mean() < MIN_NODE_REACH


def _node_laws_shortfall(cell: Cell, trials, tv: float, rate: float, power: float) -> int:
    """Nodes this implementation reaches less often than the reference keep sampling to their planned rows."""
    plan, reached = cell.data, _reached_nodes(trials)
    more = 0
    for t in plan.tested:
        got = int(reached[:, t].sum())
        need = _node_need(plan, t, tv, rate, power)
        if not _rarely(reached, t) and got < need:
            more = max(more, math.ceil(1.05 * (need - got) * len(reached) / got))
    return more


def _node_laws_run(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    plan, (out, _, _) = cell.data, trials
    reached = _reached_nodes(trials)
    results = tests_for_node_laws(out, reached, plan, rate, power, cell.name)
    rare = {f"{cell.name}/node{t - 1}/" for t in plan.tested if _rarely(reached, t)}
    for r in results:
        if any(r.name.startswith(prefix) for prefix in rare):
            r.details["rarely_reached"] = True
    cell.summary["reach"] = [{"node": t - 1, "measured": float(reached[:, t].mean()), "bound": float(plan.bounds[t]),
                              "reference": float(plan.reach[t])} for t in range(1, plan.shape.n_nodes + 1)]
    return results


NODE_LAWS = Check("node_laws", lambda cell: count_tests_for_node_laws(cell.data), _node_laws_run,
                  _node_laws_samples, _node_laws_shortfall)
REACH_BOUNDS = Check("reach_bounds", lambda cell: count_tests_for_reach_bounds(cell.data),
                     lambda cell, trials, lv, pw: tests_for_reach_bounds(_reached_nodes(trials), cell.data, lv, pw,
                                                                         cell.name))
TREE_ROWS_INDEPENDENT = Check("rows_independent", lambda cell: 1,
                              lambda cell, trials, lv, pw: [row_independence(trials[0], lv, pw, cell.name)])


class TreeSource(TrialSource):
    """Trials of one tree verification step: the harness draws the node tokens from the declared laws."""

    level = "sampler"

    def __init__(self, impl: Callable, *, dtype: torch.dtype = torch.float32):
        self.impl, self.dtype = impl, dtype

    def cells(self, config: CheckConfig) -> list[Cell]:
        self.streams = Streams.of(config.seed)
        cells = []
        for case in select_cases(config.cases):
            plan = plan_case(case)
            summary = {"description": case.description, "scheme": case.scheme, "nodes": plan.shape.n_nodes,
                       "depth": plan.shape.max_depth, "vocab": plan.vocab, "gamma": plan.shape.max_depth,
                       "tested_nodes": [t - 1 for t in plan.tested]}
            cells.append(Cell(case.name, [NODE_LAWS, REACH_BOUNDS, TREE_ROWS_INDEPENDENT], plan,
                              case.tv or config.tv, summary))
        return cells

    def draw(self, cell: Cell, n: int, progress):
        plan = dataclasses.replace(cell.data, rows=n)
        out, tokens, problems = _run_case(self.impl, plan, self.streams, self.dtype)
        if progress:
            progress(n)
        if problems:
            exc = MalformedTrials("; ".join(problems))
            exc.trials = None if out is None else (out, tokens, cell.data)
            raise exc
        return out, tokens, cell.data

    def extend(self, trials, more):
        return np.concatenate([trials[0], more[0]]), np.concatenate([trials[1], more[1]]), trials[2]

    def count(self, trials) -> int:
        return len(trials[0])

    def finish(self, report: CheckReport, config: CheckConfig) -> None:
        report.notes.append(f"nodes reached with probability < {MIN_NODE_REACH} by the reference (or by this "
                            "implementation) are not in the headline TV; reach tests gate on the universal bound "
                            "Σ min(Π p, Π q) of each node's path")


def select_cases(cases: list[str | TreeCase] | None) -> list[TreeCase]:
    return select(cases, default_cases(), "tree case")


def _run_case(impl, plan: TreePlan, streams, dtype):
    """-> (emitted [rows, D+1] or None, node tokens [rows, N], format problems)."""
    N, V = plan.shape.n_nodes, plan.vocab
    chunk = max(1, min(plan.rows, int(CHUNK_FLOATS // ((2 * N + 1) * V))))
    parents = torch.tensor(plan.shape.parents)
    q = torch.from_numpy(plan.q)
    p = torch.from_numpy(plan.p).to(dtype)
    outs, all_tokens = [], []
    for start in range(0, plan.rows, chunk):
        n = min(chunk, plan.rows - start)
        tokens, probs = draw_tree(plan.shape, q, plan.case.scheme, n, streams.drafts)
        target = p.expand(n, -1, -1).contiguous()
        out = call_impl(impl, target, probs.to(dtype), tokens, parents.clone(), streams.impl,
                        what=f"tree case {plan.case.name}")
        problems, arr = format_problems(out, tokens.numpy(), plan.shape, V)
        if arr is None:
            return None, None, problems
        outs.append(arr)
        all_tokens.append(tokens.numpy())
        if problems:
            return np.concatenate(outs), np.concatenate(all_tokens), problems
    return np.concatenate(outs), np.concatenate(all_tokens), []


def chain_as_tree(verify: Callable) -> Callable:
    """A §1a chain `verify` as a tree verify for single-chain trees (parents 0..γ−1 = [−1, 0, 1, …]):
    the tree inputs of a chain are exactly the chain's."""
    def tree_verify(target_probs, draft_probs, draft_tokens, parents, generator):
        if parents.tolist() != list(range(-1, len(parents) - 1)):
            raise HarnessError("chain_as_tree: the tree is not a single chain")
        return verify(target_probs, draft_probs, draft_tokens, generator)
    tree_verify.__name__ = f"chain_as_tree({getattr(verify, '__name__', 'verify')})"
    return tree_verify


def validate_tree_inputs(parents, draft_tokens, draft_probs, target_probs, scheme: str | None = None) -> TreeShape:
    """For the CLI (`--family tree` inputs from users): SpecDecInputError becomes HarnessError (exit 2, one line)."""
    try:
        return validate_tree(parents, draft_tokens, draft_probs, target_probs, scheme)
    except SpecDecInputError as exc:
        raise HarnessError(f"malformed tree step: {exc}") from None


__all__ = ["TreeCase", "default_cases", "TreePlan", "caterpillar", "chain_as_tree", "count_tests_for_case",
           "count_tests_for_node_laws", "count_tests_for_reach_bounds", "count_tests_for_tree_format",
           "custom_tree_case", "draw_tree", "full_tree", "load_tree_case", "node_marginals",
           "path_bound", "read_paths", "reach_bounds", "run_tree_check", "tests_for_node_laws",
           "tests_for_reach_bounds", "tests_for_tree_format", "validate_tree_inputs"]
