"""The engines' own tests beside specdec and beside the Neyman–Pearson limit, on the mutant zoo (issue 58).

    specdec campaign peers --out results/peers

For every zoo entry at the level a peer test applies to (sampler level: the chain-rule §1a entries; generation
level: the §1b entries on toy pairs — the architectures entries run in their own campaign), each peer test of
harness.peers over seeds: at its own sample size, and (sampler level) at specdec's default-plan sample size
(equal n). specdec's own verdict on the same entries: the sampler level on the sequential path (default plan,
TV 0.02; the correct controls on the calibration battery at TV 0.1, as `specdec campaign sequential` calibrates
it), the generation level at the default plan (with the contexts catalogue, as `specdec mutants` runs it). For
each chain-rule mutant with an exact law, its oracle bound (harness.peers.oracle) at the same seed, α and power.

A campaign of the runner (harness.runner): every run is a cell journaled in OUT/journal.jsonl (a rerun resumes);
the report is OUT/README.md and OUT/campaign.json. Exit 0 when no correct control failed specdec's check, 1
otherwise (the peers' false alarms are reported, not judged: they are what is measured).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import time

import numpy as np
import torch

from harness.configs import option
from harness.defaults import DEFAULT_FALSE_ALARM_RATE, DEFAULT_POWER
from harness.errors import HarnessError

GATE = DEFAULT_FALSE_ALARM_RATE
TARGET_TV = 0.02  # the sampler plan's default detectable TV
CALIBRATION_TV = 0.1
LOCAL_WORKERS = 2
ROUND = 5  # seeds per round of the cell order
ORDER = (0, 2, 3, 1, 4, 5)  # within a round: mutants' cheap runs, correct entries', greedy tests, MRV2, the rest
ORACLE_CHECK = ("residual_from_p", "anti-logits", 0, 100_000, 20_000)  # entry, case, seed, rows drawn, NP replicates
NO_ORACLE = ()  # entries whose exact law the oracle cannot use


def names(text: str) -> list[str]:
    """A comma-separated option's names."""
    return [t for t in text.split(",") if t]


@dataclasses.dataclass
class Config:
    """`specdec campaign peers`: seeds per kind of run (the full campaign's defaults), entries to skip."""

    seeds: int = option(20, "--seeds", "seeds of every cheap peer test and of specdec's sampler check", int, "N")
    mrv2_seeds: int = option(20, "--mrv2-seeds", "seeds of vLLM MRV2's χ² test (V = 4,096: the costly one)", int,
                             "N")
    equal_n_seeds: int = option(20, "--equal-n-seeds", "seeds of the sampler peer tests at specdec's sample size",
                                int, "N")
    equal_n_tests: str = option("vllm_v1_histogram,vllm_mrv2_chisq,trtllm_kl", "--equal-n-tests", "the sampler "
                                "peer tests to run at equal n (comma-separated)", str, "NAMES")
    mrv2_equal_n: bool = option(True, "--no-mrv2-equal-n", "skip vLLM MRV2's χ² test at equal n (~5× its own "
                                "cost)", action="store_false")
    greedy_seeds: int = option(20, "--greedy-seeds", "seeds of the one-prompt greedy tests", int, "N")
    vllm_greedy_seeds: int = option(20, "--vllm-greedy-seeds", "seeds of vLLM's 100-prompt greedy test", int, "N")
    control_seeds: int = option(20, "--control-seeds", "seeds of every test on every correct control", int, "N")
    generation_seeds: int = option(20, "--generation-seeds", "seeds of specdec's generation-level check", int, "N")
    below_resolution_seeds: int = option(2, "--below-resolution-seeds", "seeds of specdec's sequential check on a "
                                         "mutant below its resolution (it draws the whole plan)", int, "N")
    only: str = option("", "--only", "only these zoo entries (comma-separated)", str, "NAMES")
    skip: str = option("", "--skip", "zoo entries to leave out (comma-separated)", str, "NAMES")
    levels: str = option("sampler,generation", "--levels", "levels to run (comma-separated)", str, "LEVELS")


def validate(config: Config) -> None:
    from harness.mutants.registry import get

    for name in [*names(config.only), *names(config.skip)]:
        get(name)
    bad = [lv for lv in names(config.levels) if lv not in ("sampler", "generation")]
    if bad:
        raise HarnessError(f"--levels takes sampler and/or generation, got {', '.join(bad)}")
    if min(config.seeds, config.mrv2_seeds, config.equal_n_seeds, config.greedy_seeds, config.vllm_greedy_seeds,
           config.control_seeds, config.generation_seeds) < 0:
        raise HarnessError("seed counts must be >= 0")


def provenance_fields(config: Config) -> dict:
    return {"seed": list(range(config.seeds)), "dtype": "float32"}


# ------------------------------------------------------------------------------------------------ the entries


def chain_entry(impl) -> bool:
    """A §1a entry of the chain rule (the block family's law per position is not p: the peers' tests do not apply)."""
    return impl.contract == "sampler" and not impl.spec.startswith("harness.mutants.families:") \
        and not impl.name.startswith("block_")  # the block family's controls are declared around specdec_ref


def generation_entry(impl) -> bool:
    return impl.contract == "generation" and not impl.spec.startswith("harness.mutants.architectures:") \
        and not (impl.pair or "").startswith("arch-")


@functools.lru_cache(maxsize=1)
def exact_tv_rows() -> dict[str, float | None]:
    """Sampler entries: the worst-position exact TV over the two standard configurations (None: no exact law)."""
    from harness.check.sampler import default_cases
    from harness.mutants.laws import exact_tvs
    from harness.mutants.registry import implementations

    cases = [c for c in default_cases() if c.name in ("zipf1000-high-alpha", "anti-logits")]
    out = {}
    for impl in implementations(contract="sampler"):
        if impl.exact_law is None:
            out[impl.name] = None
            continue
        tvs = []
        for case in cases:
            p, q = case.build(np.random.default_rng(0))
            with contextlib.suppress(Exception):  # a law that does not apply to this shape is left out
                tvs.append(max(exact_tvs(impl, torch.from_numpy(p), torch.from_numpy(q))))
        out[impl.name] = max(tvs) if tvs else None
    return out


def below_resolution(name: str) -> bool:
    tv = exact_tv_rows().get(name)
    return tv is not None and tv < TARGET_TV


def entries(config: Config) -> list:
    from harness.mutants.registry import implementations

    only, skip, levels = names(config.only), names(config.skip), names(config.levels)
    return [i for i in implementations() if i.name not in skip and (not only or i.name in only)
            and ((chain_entry(i) and "sampler" in levels) or (generation_entry(i) and "generation" in levels))]


def default_plan_rows(seed: int) -> int:
    """The rows of the fixed-n default plan (what `specdec verify` draws) for this seed."""
    from harness.check.config import DEFAULT_MAX_ROWS
    from harness.check.sampler import default_cases, plan_cases, plan_rows

    plans = plan_cases(default_cases(), seed)
    plan_rows(plans, tv=TARGET_TV, false_alarm_rate=GATE, power=DEFAULT_POWER, max_rows=DEFAULT_MAX_ROWS)
    return sum(p.rows for p in plans)


def cells(config: Config) -> dict[str, tuple]:
    """Every run, in priority order (a run cut short by --stop-at keeps the most informative): the mutants'
    specdec and cheap peer runs, the correct entries', the greedy tests, the costly sampler runs (MRV2, equal n),
    specdec at the generation level; seeds in rounds across all of them."""
    from harness.peers import peer_tests

    groups: list[list[tuple]] = [[], [], [], [], [], []]  # mutants cheap, MRV2 on mutants, correct entries cheap,
    # greedy tests, the other costly runs, specdec at the generation level (run in the order ORDER)
    equal_n = names(config.equal_n_tests)
    for impl in entries(config):
        mutant = impl.kind == "mutant"
        control_cap = (lambda n: n) if mutant else (lambda n: min(n, config.control_seeds))
        if impl.contract == "sampler":
            cheap = groups[0] if mutant else groups[2]
            below = mutant and below_resolution(impl.name)
            n = config.below_resolution_seeds if below else config.seeds if mutant else config.control_seeds
            cheap += [("specdec", impl.name, s) for s in range(n)]
            for test in peer_tests("sampler"):
                costly = test.name == "vllm_mrv2_chisq"
                own = control_cap(config.mrv2_seeds if costly else config.seeds)
                where = (groups[1] if mutant else groups[4]) if costly else cheap
                where.extend(("peer", test.name, impl.name, s, "own") for s in range(own))
                eq = 0 if test.name not in equal_n or (costly and not config.mrv2_equal_n) else \
                    control_cap(min(config.equal_n_seeds, own))
                groups[4].extend(("peer", test.name, impl.name, s, "equal") for s in range(eq))
        else:
            for test in peer_tests("generation"):
                n = config.vllm_greedy_seeds if test.name == "vllm_greedy_66" else config.greedy_seeds
                groups[3].extend(("peer", test.name, impl.name, s, "own") for s in range(control_cap(n)))
            groups[5].extend(("specdec", impl.name, s) for s in range(control_cap(config.generation_seeds)))
    if "sampler" in names(config.levels) and config.seeds:
        groups[0].insert(0, ("oracle_check", *ORACLE_CHECK))
    # seeds in rounds of ROUND across every group, so a run cut short covers every entry and test at fewer seeds
    order = sorted((_seed(args) // ROUND, ORDER.index(g), g, i)
                   for g, group in enumerate(groups) for i, args in enumerate(group))
    return {json.dumps(groups[g][i]): groups[g][i] for _, _, g, i in order}


def _seed(args: tuple) -> int:
    """The seed of a cell (its round in the cell order); the one-off oracle check runs first."""
    return args[-2] if args[0] == "peer" else args[-1] if args[0] == "specdec" else 0


# ------------------------------------------------------------------------------------------------ one cell


@functools.lru_cache(maxsize=4)
def _pair(name: str):
    from harness.pairs import get_pair

    return get_pair(name)


def _pair_of(impl) -> str:
    return impl.pair or "toy-low"  # the zoo's pair for entries that need none (suites/campaigns/_commands.py)


def run_cell(kind: str, *args) -> dict:
    from harness.mutants.registry import get

    torch.set_num_threads(1)
    started = time.perf_counter()
    if kind == "oracle_check":
        return {"kind": kind, "args": list(args), **oracle_check(*args), "seconds": time.perf_counter() - started,
                "finished_at": time.time()}
    if kind == "peer":
        test_name, name, seed, mode = args
        record = _peer_cell(test_name, get(name), seed, mode)
    else:
        name, seed = args
        impl = get(name)
        record = _sampler_specdec(impl, seed) if impl.contract == "sampler" else _generation_specdec(impl, seed)
    return {"kind": kind, "args": list(args), **record, "seconds": time.perf_counter() - started,
            "finished_at": time.time()}


def _peer_cell(test_name: str, impl, seed: int, mode: str) -> dict:
    from harness.adapters.calling import ImplementationError
    from harness.peers import get_peer_test

    test = get_peer_test(test_name)
    try:
        if test.level == "sampler":
            samples = default_plan_rows(seed) if mode == "equal" else None
            verdict = test.run(impl.fn, seed=seed, samples=samples)
        else:
            verdict = test.run(impl.fn, _pair(_pair_of(impl)), seed=seed)
    except ImplementationError as exc:  # the published test would error: a failing test
        return {"passed": False, "samples": None, "statistic": None, "detail": f"error: {exc}"[:300]}
    return {"passed": verdict.passed, "samples": verdict.samples, "statistic": verdict.statistic,
            "detail": verdict.detail[:300]}


def _sampler_specdec(impl, seed: int) -> dict:
    from harness.check.sequential import run_sampler_check_sequential

    if impl.kind == "mutant":
        report = run_sampler_check_sequential(impl.fn, impl_name=impl.name, false_alarm_rate=GATE, seed=seed,
                                              tv=TARGET_TV, cases=[*impl.cases, "default"] if impl.cases else None)
        oracle = _oracle(impl, seed, report) if impl.position_laws is not None and impl.exact_acceptance is not None \
            and not impl.cases and impl.name not in NO_ORACLE else None
    else:  # the calibration battery: every case at TV 0.1 (V = 32,000 at 0.2), as the sequential campaign
        from harness.check.sampler import default_cases

        cases = [dataclasses.replace(c, tv=0.2) if c.vocab >= 10_000 else c for c in default_cases()]
        report = run_sampler_check_sequential(impl.fn, impl_name=impl.name, false_alarm_rate=GATE, seed=seed,
                                              tv=CALIBRATION_TV, cases=[*impl.cases, *cases] if impl.cases else cases)
        oracle = None
    planned = sum(c.get("planned_rows", 0) for c in report.cases)
    return {"fail": report.verdict == "fail", "verdict": report.verdict, "samples": report.samples,
            "planned": planned, "fixed_plan": default_plan_rows(seed), "oracle": oracle,
            "rejected": [t.name for t in report.tests if t.reject][:4]}


def _oracle(impl, seed: int, report) -> dict:
    """The NP bounds with the rows split over the cases as this run's plan splits them: `rows` against the
    mutant's exact row law with Algorithm 1 as the null (Rule entries), `law_rows` on the emitted tokens alone."""
    from harness.check.sampler import default_cases
    from harness.peers.oracle import (
        DENSE_LIMIT,
        case_moments,
        case_plans,
        law_moments,
        needs_dense,
        oracle_rows,
    )

    planned = {c["name"]: c.get("planned_rows", 0) for c in report.cases}
    total = sum(planned.values())
    rule = getattr(impl.fn, "rule", None)
    parts, law_parts, skipped = [], [], []
    for case in default_cases():
        plans = case_plans(case, seed)
        for plan in plans:
            weight = planned.get(case.name, 0) / total / len(plans)
            if rule is not None and case.vocab > DENSE_LIMIT and needs_dense(rule):  # [V, V] tables: left out
                skipped.append(case.name)
                continue
            if rule is not None and rule.analytic:
                moments = case_moments(rule, plan.p, plan.q)
                if moments is None:
                    skipped.append(case.name)
                else:
                    parts.append((weight, *moments))
            p, q = torch.from_numpy(plan.p), torch.from_numpy(plan.q)
            acceptance = impl.exact_acceptance(p, q).double().numpy()
            reach = np.concatenate([[1.0], np.cumprod(acceptance)])
            law_parts.append((weight, *law_moments(impl.position_laws(p, q).double().numpy(), plan.p, reach)))
    return {"rows": oracle_rows(parts, alpha=GATE, power=DEFAULT_POWER) if parts else None,
            "law_rows": oracle_rows(law_parts, alpha=GATE, power=DEFAULT_POWER), "skipped_cases": sorted(set(skipped))}


def oracle_check(name: str, case_name: str, seed: int, rows: int, reps: int) -> dict:
    """The normal approximation checked by simulation on one case: rows drawn from the mutant and from the reference
    (x ~ q drawn here), their exact LLRs, and the NP test's Monte-Carlo power at the oracle's n."""
    from harness.check.sampler import default_cases
    from harness.mutants.registry import get
    from harness.mutants.rule import Rule
    from harness.peers.oracle import case_moments, case_plans, oracle_rows, row_llr, rule_parts, simulate_np
    from harness.peers.sampler import draw_rows

    impl = get(name)
    plan = case_plans(next(c for c in default_cases() if c.name == case_name), seed)[0]
    alt, null = rule_parts(impl.fn.rule, plan.p, plan.q), rule_parts(Rule(), plan.p, plan.q)
    m0, m1 = case_moments(impl.fn.rule, plan.p, plan.q)
    n = oracle_rows([(1.0, m0, m1)], alpha=GATE, power=DEFAULT_POWER)
    p, q = torch.from_numpy(plan.p).float(), torch.from_numpy(plan.q).float()
    llrs = []
    for fn, key in ((impl.fn, 1), (get("reference_verify").fn, 0)):
        drafts = torch.Generator().manual_seed(seed * 10 + key)
        tokens = draw_rows(fn, p, q, rows, drafts=drafts, generator=torch.Generator().manual_seed(seed * 10 + 5 + key),
                           what="oracle check")
        drafts = torch.Generator().manual_seed(seed * 10 + key)  # the same draws draw_rows made
        x = torch.stack([torch.multinomial(q[j].double(), rows, replacement=True, generator=drafts)
                         for j in range(q.shape[0])], 1).numpy()
        llrs.append(row_llr(alt, null, x, tokens))
    llr1, llr0 = llrs
    finite0 = llr0[np.isfinite(llr0)]
    return {"entry": name, "case": case_name, "oracle_rows": n, "power_target": DEFAULT_POWER,
            "simulated_power": simulate_np(llr0, llr1, int(n), GATE, reps), "rows": rows, "replicates": reps,
            "null_mean": float(finite0.mean()), "null_mean_exact": m0.mean, "null_var": float(finite0.var()),
            "null_var_exact": m0.var, "alt_finite_share": float(np.isfinite(llr1).mean()), "alt_rho_exact": m1.rho}


def _generation_specdec(impl, seed: int) -> dict:
    from harness.check.generation import run_generation_check
    from harness.contexts import plan

    pair = _pair(_pair_of(impl))
    report = run_generation_check(impl.fn, pair, impl_name=impl.name, false_alarm_rate=GATE, seed=2000 + seed,
                                  gamma=3, stop_on_fail=True, contexts=plan(pair, seed=2000 + seed),
                                  settings=getattr(impl.fn, "settings", None))
    return {"fail": report.verdict == "fail", "verdict": report.verdict, "samples": report.samples,
            "rejected": [t.name for t in report.tests if t.reject][:4]}


# ------------------------------------------------------------------------------------------------ the report


def report(run) -> int:
    import sys

    from suites.campaigns._peers_report import write_readme

    result = write_readme(run, sys.modules[__name__])
    print(f"wrote {run.out / 'README.md'}")
    for line in result["summary_lines"]:
        print(f"  {line}")
    return 1 if result["specdec_control_failures"] else 0


def finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
