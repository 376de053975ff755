"""Statistical pieces of the engine level, as pure functions `tests_for_X` / `count_tests_for_X`.

(a) a local copy of the target: `tests_for_local_target` teacher-forces the returned continuations
    and reuses the generation level's randomized PIT (harness.check.pit `pit_values`,
    `pit_tests`) and, for tiny vocabularies, its exact joint law.
(b) a non-speculative endpoint that scores: `coarse_pit` builds the randomized PIT of the
    *coarsened* variable — the k tokens the scorer lists (top k by rank, chosen without looking at
    the token) individually, everything else as one "rest" cell — which is exactly U(0, 1) under H0
    whatever k is. What the coarsening costs: for the true law p and the engine's law p′ at a
    position, TV(p, p′) ≤ TV_coarse(p, p′) + p(rest), so a pass rules out TV ≥ ε_coarse + mean rest
    mass (`hidden_mass` is reported next to the detectable TV).
(c) two samples, no logprobs: `tests_for_two_sample` compares the token laws of a speculative and a
    non-speculative endpoint position by position and as whole continuations (chi-square
    homogeneity on a 2 × K table, rare columns pooled). Its power is that of a one-sample test with
    n_eff = n_a·n_b / (n_a + n_b) draws: twice the samples per side for the same detectable TV.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import chi2_contingency

from harness.check.report import deterministic_result
from harness.stats import TestResult, detectable_tv
from harness.stats.pit import pit_from_masses
from harness.stats.pooling import DEFAULT_MIN_EXPECTED

END = -1  # the "continuation already ended" category at a position (EOS came earlier)
SUPPORT_EPS = 1e-9  # rest mass below this: the scorer listed the whole support


# ---------------------------------------------------------------------------------------- (a) and (b)

def count_tests_for_pit(length: int) -> int:
    """support + pooled uniformity + one per position + serial (harness.check.pit.pit_tests)."""
    return 3 + length


def tests_for_pit(u, positions, seq_ids, off_support: int, *, length: int, rate: float, power: float,
                  prefix: str) -> list[TestResult]:
    """`pit_tests` with every position 0..length−1 present (a position no row reached: no data, p = 1)."""
    from harness.check.pit import pit_tests

    out = pit_tests(u, positions, seq_ids, off_support, rate, power, prefix)
    seen = {int(j) for j in np.unique(positions)}
    out += [TestResult(f"{prefix}/pit_uniform/pos{j}", 0.0, 1.0, n=0, detectable_tv=math.inf,
                       details={"message": "no continuation reached this position"})
            for j in range(length) if j not in seen]
    return out


def count_tests_for_local_target(length: int, enumerate_law: bool) -> int:
    return 3 * enumerate_law + count_tests_for_pit(length)


def tests_for_local_target(rows: list[list[int]], prompt: list[int], *, model, setting, vocab: int, eos: set[int],
                           length: int, enumerate_law: bool, rng, rate: float, power: float,
                           prefix: str, order: str = "standard", classes=None) -> list[TestResult]:
    """Ground truth (a): the returned continuations against a local float64 copy of the target, processed
    under the declared convention `order` (specdec_ref.processing.ORDERS). `classes`: the engine reports
    tokens only up to these classes (harness.served.pieces): the laws are coarsened to them, each row cut at its
    first shared class (`coarsen_law`, `pit_values(classes=)`)."""
    import torch

    from harness.check.exact_laws import coarsen_law, continuation_law, joint_law_tests
    from harness.check.pit import pit_values

    out: list[TestResult] = []
    if enumerate_law:
        law = coarsen_law(continuation_law(model, prompt, length, setting, vocab, eos, order), classes)
        out += joint_law_tests([tuple(r) for r in rows], law, rate, power, prefix)
    width = max(1, max(map(len, rows), default=1))
    tokens = torch.tensor([r + [-1] * (width - len(r)) for r in rows], dtype=torch.long)
    u, pos, seq, off = pit_values(model, prompt, tokens, setting, vocab, rng, order=order, classes=classes)
    return out + tests_for_pit(u, pos, seq, off, length=length, rate=rate, power=power, prefix=prefix)


def coarse_masses(cells: dict[int, float], y: int) -> tuple[float, float, float]:
    """One scored position of the coarsened law: (mass before the emitted token y, its mass, the rest mass).

    cells: {token id: probability} of the scorer's top k (chosen by rank, so the cells do not depend on y).
    Order: listed tokens by descending probability (ties: lower id first), then the rest as one cell."""
    ordered = sorted(cells.items(), key=lambda kv: (-kv[1], kv[0]))
    mass = np.array([m for _, m in ordered], dtype=float)
    rest = max(0.0, 1.0 - float(mass.sum()))
    if y in cells:
        j = [t for t, _ in ordered].index(y)
        return float(mass[:j].sum()), float(mass[j]), rest
    return 1.0 - rest, rest, rest


def pit_from_coarse_masses(masses: np.ndarray, rng) -> tuple[np.ndarray, int, float]:
    """Randomized PIT of the coarsened law from `coarse_masses` rows [n, 3] -> (u, off-support count, mean rest
    mass)."""
    masses = np.asarray(masses, dtype=float).reshape(-1, 3)
    above, p_y, rest = masses.T
    return pit_from_masses(above, p_y, rng), int((p_y <= SUPPORT_EPS).sum()), float(rest.mean()) if len(rest) else 0.0


def coarse_pit(listed: list[dict[int, float]], tokens: list[int], rng) -> tuple[np.ndarray, int, float]:
    """Randomized PIT of the coarsened law at each scored position (listed[i]: the scorer's top k at position i,
    tokens[i]: the emitted token). Returns (u, off-support count, mean rest mass)."""
    masses = [coarse_masses(cells, y) for cells, y in zip(listed, tokens, strict=True)]
    return pit_from_coarse_masses(np.array(masses, dtype=float), rng)


def charge_hidden_mass(tests: list[TestResult], rest: np.ndarray, positions: np.ndarray) -> list[TestResult]:
    """TV(p, p′) ≤ TV_coarse(p, p′) + p(rest): each test's detectable TV becomes the TV its pass rules out on the
    *full* law, its coarse detectable TV plus the mean rest mass of the positions it saw (a per-position test:
    that position's; the others: all of them). A scorer that lists little of the law thus cannot make a weak plan
    look strong: the run is INCONCLUSIVE where that sum is above its ceiling."""
    overall = float(rest.mean()) if len(rest) else 0.0
    for t in tests:
        if t.detectable_tv is None or not math.isfinite(t.detectable_tv):
            continue
        at = rest[positions == t.details["position"]] if "position" in t.details else rest
        hidden = float(at.mean()) if len(at) else overall
        t.details.update(coarse_detectable_tv=t.detectable_tv, hidden_mass=hidden)
        t.detectable_tv = t.detectable_tv + hidden
    return tests


# ---------------------------------------------------------------------------------------- (c)

def count_tests_for_two_sample(length: int) -> int:
    return length + 1  # one per position + whole continuations


def homogeneity_test(a: list, b: list, name: str, *, rate: float, power: float,
                     min_expected: float = DEFAULT_MIN_EXPECTED) -> TestResult:
    """Chi-square homogeneity of two samples of hashable outcomes; columns with expected < min_expected pooled."""
    cats = sorted(set(a) | set(b), key=repr)
    index = {c: i for i, c in enumerate(cats)}
    table = np.zeros((2, len(cats)))
    for row, sample in enumerate((a, b)):
        np.add.at(table[row], [index[x] for x in sample], 1)
    n_a, n_b = len(a), len(b)
    n_eff = n_a * n_b / max(1, n_a + n_b)
    share = min(n_a, n_b) / max(1, n_a + n_b)
    rare = table.sum(0) * share < min_expected  # expected count of the smaller sample in that column
    if rare.any():
        table = np.column_stack([table[:, ~rare], table[:, rare].sum(1)])
        if table[:, -1].sum() * share < min_expected and table.shape[1] > 2:  # a thin rest: merge with the last
            table = np.column_stack([table[:, :-2], table[:, -2:].sum(1)])
    details = {"n_a": n_a, "n_b": n_b, "columns": int(table.shape[1]),
               "detectable_metric": "TV between the two pooled laws (two-sample, n_eff = n_a n_b / (n_a + n_b))"}
    if min(n_a, n_b) == 0:
        return TestResult(name, 0.0, 1.0, n=n_a + n_b, df=0, detectable_tv=math.inf, details=details)
    if len(cats) == 1:
        # Both samples are one and the same outcome: a law putting mass ε elsewhere shows another outcome in the
        # smaller sample with probability 1 − (1 − ε)^n; at `power` that rules out ε ≥ 1 − (1 − power)^(1/n).
        tv = 1.0 - (1.0 - power) ** (1.0 / min(n_a, n_b))
        return TestResult(name, 0.0, 1.0, n=n_a + n_b, df=0, detectable_tv=tv, details=details)
    if table.shape[1] < 2:  # several outcomes, but too few draws to fill two columns: no promise
        return TestResult(name, 0.0, 1.0, n=n_a + n_b, df=0, detectable_tv=math.inf, details=details)
    result = chi2_contingency(table, correction=False)
    df = int(result.dof)
    return TestResult(name, float(result.statistic), float(result.pvalue), n=n_a + n_b, df=df,
                      detectable_tv=detectable_tv(max(1, int(n_eff)), df, rate, power), details=details)


def tests_for_two_sample(rows_a: list[list[int]], rows_b: list[list[int]], *, length: int, rate: float,
                         power: float, prefix: str) -> list[TestResult]:
    """Ground truth (c): per-position token laws and whole-continuation laws, engine a vs engine b."""
    def at(rows, j):
        return [r[j] if j < len(r) else END for r in rows]

    out = [homogeneity_test(at(rows_a, j), at(rows_b, j), f"{prefix}/two_sample/pos{j}", rate=rate, power=power)
           for j in range(length)]
    out.append(homogeneity_test([tuple(r) for r in rows_a], [tuple(r) for r in rows_b],
                                f"{prefix}/two_sample/joint", rate=rate, power=power))
    return out


# ---------------------------------------------------------------------------------------- greedy

def greedy_result(name: str, want: list[int], got: list[int], divergence: dict | None) -> TestResult:
    """Exact equality; `divergence` (from harness.check.greedy.classify_divergence) classifies a mismatch."""
    if divergence is None:
        return deterministic_result(name, want == got, n=len(want),
                                    message="" if want == got else f"differs from the reference: {got} vs {want}")
    return deterministic_result(name, False, n=len(want), **divergence)
