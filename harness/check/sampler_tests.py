"""The sampler battery (docs/CONTRACT.md §1a): the tests of one case's rows and the checks the driver runs per cell.

- per tested position j, on the rows that reached it: support, pooled Pearson and G on the ≤ 32-cell coarsening,
  top-1 and outside-the-99%-nucleus binomial tests (`position_tests`);
- step lengths against the universal bound (gating), the token-level and the block-level optimum (reported)
  (`acceptance_tests`, `acceptance_outcome`);
- row independence: the exact runs test on consecutive rows' lengths (`row_independence`);
- the deep-tail probe (harness.check.sampler_tail);
- `--estimate`: TV and KL estimates per law and tested position (`ESTIMATE`, reports only).

`SAMPLER_BATTERY` is the list of checks a sampler cell runs (`ESTIMATE` is added where estimates are asked for);
`count_gating_tests` and `plan_rows` size a fixed-n run of it.
"""

from __future__ import annotations

import math

import numpy as np

from harness.check.config import MIN_REACH
from harness.check.driver import Cell, Check
from harness.check.sampler_cases import (
    MAX_CELLS,
    CasePlan,
    coarsen,
    law_rows,
    subplans,
    tests_per_position,
    tokens_of,
)
from harness.check.sampler_tail import TAIL_PROBE, tail_positions
from harness.check.streams import numpy_rng
from harness.stats import (
    TestResult,
    binomial_event_test,
    nucleus_mask_top_p,
    pooled_gtest,
    pooled_pearson,
    runs_test,
    samples_needed,
    support_check,
)
from harness.stats.bounds import acceptance_bound, block_acceptance, token_level_optimum

# Cells expecting fewer draws are pooled before Pearson / G. The usual 5 keeps the χ² approximation
# honest at nominal rates, not at the ~1e-6 per-test rates a Holm family reaches: measured, one
# false alarm in 200 seeds of the reference (df 10, n = 389, p = 1.6e-6) with 5; 20 fixes the tail.
GATE_MIN_EXPECTED = 20.0


def count_gating_tests(plans: list[CasePlan]) -> int:
    """Gating tests the fixed-n battery emits for these plans (exactly what `run_sampler_check` reports)."""
    m = 0
    for plan in plans:
        m += 2  # format + row independence
        m += sum(tests_per_position(plan.p[j]) for j in plan.tested)
        m += sum(1 for j in range(plan.case.gamma) if plan.reach[j] >= MIN_REACH)  # acceptance tests
        m += len(tail_positions(plan))  # deep-tail tests
    return m


def plan_rows(plans: list[CasePlan], *, tv: float, false_alarm_rate: float, power: float, max_rows: int,
              extra_tests: int = 0) -> int:
    """Set each plan's row count; returns the number of gating tests m used for the plan.

    `extra_tests`: gating tests another stage adds to the same Holm family (the sequential mode's
    e-processes); the plan is then made at the per-test rate false_alarm_rate / (m + extra_tests)."""
    m = count_gating_tests(plans)
    rate = false_alarm_rate / (m + extra_tests)
    for plan in plans:
        eps = plan.case.tv or tv
        # A one-token law (e.g. top-p 0.5 on V = 2) has df 0: nothing to test but its support; plan it as df 1.
        need = [samples_needed(eps, max(1, min(MAX_CELLS, int((plan.p[j] > 0).sum())) - 1), rate, power)
                / plan.reach[j] for j in plan.tested]
        # 5 % headroom: the number of rows that reach a position fluctuates around rows · P(reach)
        plan.rows = int(min(max_rows, math.ceil(1.05 * max(need))))
    return m


def position_tests(tokens: np.ndarray, plan: CasePlan, rate: float, power: float, prefix: str) -> list[TestResult]:
    """Per tested position: the emitted token's law among the rows that reached it."""
    V = plan.case.vocab
    n_emitted = (tokens >= 0).sum(1)
    out = []
    for j in plan.tested:
        col = tokens[n_emitted >= j + 1, j]
        col = col[(col >= 0) & (col < V)]  # out-of-range ids already failed the format test
        counts = np.bincount(col, minlength=V)
        pj = plan.p[j]
        name = f"{prefix}/pos{j}"
        out.append(support_check(counts, pj, f"{name}/support", power=power))
        coarse_counts, coarse_p = coarsen(counts, pj)
        plan_kw = {"rate": rate, "power": power}
        pooled_kw = {**plan_kw, "min_expected": GATE_MIN_EXPECTED}
        out.append(pooled_pearson(coarse_counts, coarse_p, f"{name}/pooled_pearson", **pooled_kw))
        out.append(pooled_gtest(coarse_counts, coarse_p, f"{name}/pooled_g", **pooled_kw))
        top = int(np.argmax(pj))
        out.append(binomial_event_test(int(counts[top]), len(col), float(pj[top]), f"{name}/top1", **plan_kw))
        outside = ~nucleus_mask_top_p(pj)
        if np.any(pj[outside] > 0):
            out.append(binomial_event_test(int(counts[outside].sum()), len(col), float(pj[outside].sum()),
                                           f"{name}/outside_nucleus", **plan_kw))
    return out


def _acceptance_tests(tokens: np.ndarray, plan: CasePlan, rate: float, power: float, prefix: str):
    """Gating: P(first k drafts accepted) above the universal bound (impossible for any lossless rule, any
    family). Advisory: below the token-level optimum (wasteful); `rates` places the measured acceptance
    against the token-level and the block-level optimum (see `acceptance_outcome`)."""
    n_emitted = (tokens >= 0).sum(1)  # [rows]
    return acceptance_tests(n_emitted, plan.p, plan.q, acceptance_drafts(plan), rate, power, prefix)


def acceptance_drafts(plan: CasePlan) -> list[int]:
    """The k (number of leading drafts) tested for a plan: k = j + 1 for every position j < γ that the
    token-level rule reaches with probability ≥ MIN_REACH (the set `plan_rows` counts)."""
    return [j + 1 for j in range(plan.case.gamma) if plan.reach[j] >= MIN_REACH]


def count_acceptance_tests(plan: CasePlan) -> int:
    """Number of gating tests `acceptance_tests` emits for `plan`."""
    return len(acceptance_drafts(plan))


def acceptance_tests(
    n_emitted: np.ndarray,  # [rows] tokens emitted per row (accepted drafts + 1)
    p: np.ndarray,  # [γ+1, V]
    q: np.ndarray,  # [γ, V]
    drafts: list[int],  # the k to test
    rate: float,
    power: float,
    prefix: str,
) -> tuple[list[TestResult], list[TestResult], list[dict]]:
    """(gating, advisory, rates) for the acceptance of one case; rows are independent trials.

    Gating, one per k: one-sided binomial test that P(first k drafts accepted), over all rows, is not
    above the universal bound U_k = Σ min(Πp, Πq) (exact, or its upper confidence bound at δ = 1e-9).
    Advisory, one per k: one-sided test that it is not below the token-level optimum T_k."""
    universal = acceptance_bound(p, q)
    token = token_level_optimum(p, q)
    block = block_acceptance(p, q)
    rows = len(n_emitted)
    gating, advisory, rates = [], [], []
    for k in drafts:
        j = k - 1
        hits = int((n_emitted >= k + 1).sum())
        name = f"{prefix}/accept{j}"
        gating.append(_one_sided(hits, rows, float(universal.value[j]), f"{name}/above_universal_bound",
                                 "greater", rate, power))
        below_token = _one_sided(hits, rows, float(token[j]), f"{name}/below_token_optimal", "less", rate, power)
        advisory.append(below_token)
        reached = int((n_emitted >= k).sum())
        rates.append({
            "position": j, "drafts": k, "reached": reached,
            "measured": (hits / reached) if reached else math.nan,  # P(accept draft j | j reached)
            "optimal": float(min(1.0, np.minimum(p[j], q[j]).sum())),  # token-level α_j, same condition
            "accepted_first_k": hits / rows if rows else math.nan,
            "token_level_optimum": float(token[j]), "block_optimum": float(block[j]),
            "universal_bound": float(universal.estimate[j]), "universal_bound_gate": float(universal.value[j]),
            "universal_bound_exact": bool(universal.exact[j]),
            "outcome": acceptance_outcome(hits, rows, float(token[j]), float(block[j]), rate, power),
        })
    return gating, advisory, rates


def acceptance_outcome(hits: int, rows: int, token: float, block: float, rate: float, power: float) -> str:
    """Readable verdict on a measured P(first k accepted) = hits / rows against the token-level optimum
    T_k and block verification's B_k (T_k ≤ B_k): "wasteful" (significantly below T_k), "token-level
    optimal" (consistent with T_k, below B_k), "block optimal" (consistent with B_k), "optimal" where
    T_k = B_k (k = 1), "above block level" (significantly above B_k, yet within the universal bound)."""
    def below(p0):
        return _one_sided(hits, rows, p0, "", "less", rate, power).p_value < rate

    if below(token):
        return "wasteful"
    if block - token < 1e-9:
        return "optimal"
    if _one_sided(hits, rows, block, "", "greater", rate, power).p_value < rate:
        return "above block level"
    return "token-level optimal" if below(block) else "block optimal"


def _one_sided(hits: int, n: int, p0: float, name: str, alternative: str, rate: float, power: float) -> TestResult:
    """Binomial test of hits/n against p0; a bound that cannot be crossed in the tested direction
    (p0 ≥ 1 for "greater", p0 ≤ 0 for "less") passes with p = 1 (the plain test treats p0 ∈ {0, 1} as a
    point null and would reject any deviation, in either direction)."""
    p0 = min(1.0, max(0.0, p0))
    if (alternative == "greater" and p0 >= 1.0) or (alternative == "less" and p0 <= 0.0):
        return TestResult(name, float(hits), 1.0, n=n, details={"p_event": p0, "alternative": alternative})
    return binomial_event_test(hits, n, p0, name, alternative, rate=rate, power=power)


def row_independence(tokens: np.ndarray, rate: float, power: float, prefix: str):
    """Exact runs test on consecutive rows' emitted lengths: random numbers shared across rows make their
    accept/reject patterns, hence their lengths, move together (planted bug in tests/check/test_check.py).
    Lengths are heavily tied (γ + 1 values, often one dominant), where a rank correlation's normal
    approximation is not valid in the far tail; the runs test is exact at any sparsity."""
    lengths = (tokens >= 0).sum(1)
    return runs_test(lengths, f"{prefix}/rows_independent", rate=rate, power=power)


def _reached(tokens: np.ndarray, j: int) -> int:
    return int(((tokens >= 0).sum(1) >= j + 1).sum())


def _position_need(plan: CasePlan, j: int, tv: float, rate: float, power: float) -> int:
    """Rows that must reach position j to detect `tv` there (df on the ≤ MAX_CELLS coarsening)."""
    return samples_needed(tv, max(1, min(MAX_CELLS, int((plan.p[j] > 0).sum())) - 1), rate, power)


def _observed_ok(tokens: np.ndarray, j: int) -> bool:
    """Position j is tested only if this implementation reaches it often enough (MIN_REACH of the rows)."""
    return j == 0 or _reached(tokens, j) >= MIN_REACH * len(tokens)


def _flag_rarely_reached(results: list[TestResult], tokens: np.ndarray) -> list[TestResult]:
    """Mark the position tests of positions this implementation reaches rarely: reported, not the headline TV."""
    for t in results:
        j = int(t.name.split("/pos")[1].split("/")[0])
        if not _observed_ok(tokens, j):
            t.details["rarely_reached"] = _reached(tokens, j) / max(1, len(tokens))
    return results


def _positions_tests(cell: Cell) -> int:
    return sum(tests_per_position(plan.p[j]) for plan in subplans(cell) for j in plan.tested)


def _positions_samples(cell: Cell, tv: float, rate: float, power: float) -> int:
    plans = subplans(cell)
    need = [_position_need(plan, j, tv, rate, power) / plan.reach[j] for plan in plans for j in plan.tested]
    # 5 % headroom: the number of rows that reach a position fluctuates around rows · P(reach)
    return int(math.ceil(1.05 * max(need) * len(plans)))


def _positions_shortfall(cell: Cell, tokens: np.ndarray, tv: float, rate: float, power: float) -> int:
    """More rows for positions this implementation reaches less often than the optimal rule (wasteful rules):
    they keep sampling until they have their planned rows (or the run's cap)."""
    trials, more = tokens, 0
    for _, plan, rows in law_rows(cell, trials):
        sub = tokens_of(trials)[rows]
        if not len(sub):
            continue
        for j in plan.tested:
            reached = _reached(sub, j)
            if not _observed_ok(sub, j):
                continue
            need = _position_need(plan, j, tv, rate, power)
            if reached < need:
                more = max(more, math.ceil(1.05 * (need - reached) * len(sub) / reached) * len(subplans(cell)))
    return more


def _positions_run(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    out = []
    for prefix, plan, rows in law_rows(cell, trials):
        sub = tokens_of(trials)[rows]
        out += _flag_rarely_reached(position_tests(sub, plan, rate, power, prefix), sub)
    return out


def acceptance_positions(plan: CasePlan) -> list[int]:
    return [j for j in range(plan.case.gamma) if plan.reach[j] >= MIN_REACH]


def _acceptance_run(cell: Cell, tokens: np.ndarray, rate: float, power: float, *, gating: bool):
    gates, advice, rates = [], [], []
    for prefix, plan, rows in law_rows(cell, tokens):
        g, a, acceptance = _acceptance_tests(tokens_of(tokens)[rows], plan, rate, power, prefix)
        gates, advice, rates = gates + g, advice + a, rates + acceptance
    if gating:
        return gates
    cell.summary["acceptance"] = rates
    cell.summary["wasteful"] = any(a.p_value < rate for a in advice)
    return advice


def _independence_run(cell: Cell, tokens: np.ndarray, rate: float, power: float) -> list[TestResult]:
    """Runs test per law: rows holding the same law are iid trials (rows of different laws differ by design)."""
    return [row_independence(tokens_of(tokens)[rows], rate, power, prefix)
            for prefix, _, rows in law_rows(cell, tokens)]


POSITION_LAWS = Check("position_laws", _positions_tests, _positions_run, _positions_samples, _positions_shortfall)
ACCEPTANCE_BOUND = Check("acceptance_bound",
                         lambda cell: sum(len(acceptance_positions(p)) for p in subplans(cell)),
                         lambda cell, t, lv, pw: _acceptance_run(cell, t, lv, pw, gating=True))
ACCEPTANCE_OPTIMUM = Check("acceptance_vs_optimum", lambda cell: 0,
                           lambda cell, t, lv, pw: _acceptance_run(cell, t, lv, pw, gating=False), gating=False)
ROW_INDEPENDENCE = Check("rows_independent", lambda cell: len(subplans(cell)), _independence_run)
SAMPLER_BATTERY = [POSITION_LAWS, ACCEPTANCE_BOUND, ACCEPTANCE_OPTIMUM, ROW_INDEPENDENCE, TAIL_PROBE]


def _estimate_run(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    """`--estimate`: a bias-corrected TV estimate with a 95 % interval per law and tested position
    (harness.stats.estimate), into the cell's summary ("tv_estimates"); with the exact TV on the same partition
    and on the full vocabulary where the implementation has an exact law (a zoo entry). Reports, never gates."""
    import torch

    from harness.stats.estimate import exact_partition_tv, kl_entry, partition, tv_estimate

    if not cell.summary.get("_estimate_all", True) and not cell.decided(rate):
        return []  # a FAIL report's default: estimates in the failing cells only
    seed, exact_laws = cell.summary.get("_estimate_seed", 0), cell.summary.get("_exact_laws")
    rng = numpy_rng(seed, "estimate", cell.name)
    out = []
    for prefix, plan, rows in law_rows(cell, trials):
        sub = tokens_of(trials)[rows]
        n_emitted = (sub >= 0).sum(1)
        laws = None
        if exact_laws is not None:
            try:
                laws = exact_laws(torch.from_numpy(plan.p), torch.from_numpy(plan.q)).double().numpy()
            except Exception:  # noqa: BLE001 - a law that does not apply to this case: no exact value beside it
                laws = None
        for j in plan.tested:
            col = sub[n_emitted >= j + 1, j]
            inside = col[(col >= 0) & (col < plan.case.vocab)]
            counts = np.bincount(inside, minlength=plan.case.vocab)
            est = tv_estimate(counts, plan.p[j], rng=rng, outside=len(col) - len(inside))
            kl = kl_entry(counts, plan.p[j], outside=len(col) - len(inside), rng=rng,
                          law=None if laws is None else laws[j])  # KL(emitted ‖ p): None where infinite
            entry = {"law": prefix, "position": j, "bonus": j == plan.case.gamma, **est, "kl": kl}
            if laws is not None:
                law = laws[j]
                entry["exact_tv"] = exact_partition_tv(law, plan.p[j], partition(plan.p[j], est["n"]))
                entry["exact_tv_full"] = 0.5 * (float(np.abs(law - plan.p[j]).sum()) + abs(1 - float(law.sum())))
            out.append(entry)
    cell.summary["tv_estimates"] = out
    return []


ESTIMATE = Check("tv_estimate", lambda cell: 0, _estimate_run, gating=False)
