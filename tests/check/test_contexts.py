"""The context catalogue (coverage of cache-block residues and boundaries), the contexts cells of the
generation level (pooled PIT over contexts, band and family slices, declared = emitted), and the position /
context mutants (each edits exactly what it claims, and the contexts cells catch what the prompt cells miss)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.check.context_cells import (
    ContextTrials,
    contexts_pit_tests,
    contexts_pit_values,
    count_contexts_pit_tests,
)
from harness.check.generation import run_generation_check
from harness.check.settings import Setting
from harness.contexts import (
    BLOCK_SIZES,
    CONTINUATION,
    LENGTHS,
    SHARED_PREFIX,
    Context,
    catalogue,
    coverage,
    plan,
    random_contexts,
)
from harness.models.toy_pairs import toy_models
from harness.mutants import get
from harness.mutants.generation import PAGE, BoundaryStaleRunner, PrefixKeyedRunner
from harness.pairs import get_pair
from specdec_ref import toy
from specdec_ref.adapters import cache_strategy
from specdec_ref.adapters import generate as reference_generate
from specdec_ref.generate import autoregressive_generate


@pytest.fixture(scope="module")
def pair():
    return get_pair("toy")


def test_the_catalogue_reaches_every_residue_and_passes_two_boundaries(pair):
    contexts = catalogue(pair)
    cov = coverage(contexts)
    for size in BLOCK_SIZES:
        assert cov[size]["missing_residues"] == [], size
        assert cov[size]["contexts_straddling"] > 0, size  # some continuation crosses a boundary of every size
    assert cov[16]["min_boundaries_passed"] >= 2  # every continuation passes two 16-token boundaries
    families = {c.family for c in contexts}
    assert families == {"prompts", "random", "resampled"}
    first_block_starts = {len(c.tokens) % 16 for c in contexts}
    assert len(first_block_starts) == len(LENGTHS) == 8  # the first speculative block starts at 8 residues
    assert {len(c.tokens) for c in contexts} == set(LENGTHS)  # every family shares the lengths: 8 calls a setting
    assert max(len(c.tokens) for c in contexts) + CONTINUATION > 256  # a 256-boundary is crossed
    assert max(len(c.tokens) for c in contexts) + CONTINUATION <= pair.target.config.max_position_embeddings


def test_random_pairs_share_one_block_and_differ_after_it():
    contexts = random_contexts(16, lengths=(40,), pairs=4)
    for a, b in zip(contexts[::2], contexts[1::2], strict=True):
        assert a.tokens[:SHARED_PREFIX] == b.tokens[:SHARED_PREFIX] and a.tokens != b.tokens


def test_resampled_contexts_are_prefixes_of_the_targets_own_samples(pair):
    chains = {}
    for c in (c for c in catalogue(pair) if c.family == "resampled"):
        chains.setdefault(c.name.split("/")[1], []).append(c.tokens)
    for prefixes in chains.values():
        longest = max(prefixes, key=len)
        assert all(longest[: len(p)] == p for p in prefixes)


def test_widening_the_toy_context_leaves_the_first_64_positions_unchanged():
    target, _ = toy_models("0.7", torch.float64)
    fresh = toy.toy_pair(0.7, vocab_size=16, dtype=torch.float64)[0]  # the 64-position model
    x = torch.randint(0, 16, (4, 64), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        assert torch.equal(target(input_ids=x).logits, fresh(input_ids=x).logits)


def _small_plan(pair, lengths=(14, 30)):
    """A small catalogue (two lengths, continuations of 40 crossing 16, 32 and 48)."""
    contexts = random_contexts(16, lengths=lengths, pairs=4)
    return {"contexts": contexts, "block_sizes": BLOCK_SIZES, "length": CONTINUATION}


@pytest.mark.stochastic(false_alarm=0.0022, seed='0 (numpy), 14 and 30 (draws)')  # 22 p-values, each > 1e-4
def test_pooled_pit_over_contexts_is_uniform_for_the_target_and_slices_are_declared(pair):
    """Target samples (ground truth) at 16 contexts: every slice's p-value is unremarkable and the test count is
    what the cell declares (the Holm plan)."""
    target = pair.target
    contexts = random_contexts(16, lengths=(14, 30), pairs=4)
    rows, rng = [], np.random.default_rng(0)
    tokens = []
    for length in (14, 30):
        idx = [i for i, c in enumerate(contexts) if len(c.tokens) == length]
        ids = torch.tensor([list(contexts[i].tokens) for i in idx for _ in range(100)])
        tokens.append(autoregressive_generate(target, ids, max_new_tokens=40, temperature=1.0, seed=length,
                                              cache=cache_strategy(ids, 40, target)).tokens)
        rows += [i for i in idx for _ in range(100)]
    trials = ContextTrials(torch.cat(tokens), np.array(rows))
    from harness.check.exact_laws import target64

    values = contexts_pit_values(target64(pair), contexts, trials, Setting(1.0), 16, rng)
    assert len(values["u"]) == 1600 * 40 and values["off_support"] == 0
    assert set(np.unique(values["abs"] % 16)) == set(range(16))
    tests = contexts_pit_tests(values, ("random",), BLOCK_SIZES, 1e-4, 0.99, "c")
    assert len(tests) == count_contexts_pit_tests(("random",), BLOCK_SIZES)
    assert min(t.p_value for t in tests) > 1e-4, [(t.name, t.p_value) for t in tests if t.p_value < 1e-3]
    pooled = tests[1]
    assert pooled.details.get("headline", True) and pooled.detectable_tv < 0.03
    assert all(t.details.get("headline") is False for t in tests[2:-1])


def test_boundary_runner_serves_the_previous_positions_logits_exactly_at_multiples_of_16(pair):
    target = pair.target
    seqs = [torch.randint(0, 16, (n,), generator=torch.Generator().manual_seed(n)) for n in (13, 20)]
    runner = BoundaryStaleRunner(target, "t")
    got = runner.logits([0, 1], seqs, 5)  # positions predicting indices 9..13 and 16..20
    with torch.inference_mode():
        for a, seq in enumerate(seqs):
            full = target(input_ids=seq[None]).logits[0]
            for i in range(5):
                index = len(seq) - 5 + i + 1
                want = full[index - 2] if index % PAGE == 0 else full[index - 1]
                assert torch.allclose(got[a, i], want, atol=1e-5), (a, i, index)


def test_prefix_keyed_runner_serves_an_equal_first_block_the_earlier_prompt(pair):
    a, b = random_contexts(16, lengths=(24,), pairs=1)
    runner = PrefixKeyedRunner(pair.target, "t", 2)
    got = runner.logits([0, 1], [torch.tensor(a.tokens), torch.tensor(b.tokens)], 1)
    with torch.inference_mode():
        want_a = pair.target(input_ids=torch.tensor([a.tokens])).logits[0, -1]
    assert torch.allclose(got[1, 0], want_a, atol=1e-5) and torch.allclose(got[0, 0], want_a, atol=1e-5)


@pytest.mark.stochastic(false_alarm=0.012, seed=2)  # PASS 0.001 + FAIL 0.01 + no rejection in the bug's lossless prompt cells 0.001
def test_the_reference_passes_and_the_sampling_path_boundary_mutant_fails_the_contexts_cells(pair):
    """At one small plan: the prompt cells (positions 4–7) cannot see the boundary fault, the contexts cells do."""
    kw = dict(samples=300, settings=(Setting(1.0),), seed=2, stop_on_fail=False, contexts=_small_plan(pair))
    ok = run_generation_check(reference_generate, pair, **kw)
    assert ok.verdict == "pass", [t.name for t in ok.tests if t.reject]
    bad = run_generation_check(get("stale_page_at_block_boundary_sampling").fn, pair, **kw)
    rejected = [t.name for t in bad.tests if t.reject]
    assert bad.verdict == "fail" and all("/contexts/" in n for n in rejected), rejected
    assert any("abs_mod16_eq0" in n for n in rejected), rejected


@pytest.mark.slow  # rollback_wrong_after_step_k needs the default plan (1,100 rows): the zoo campaign runs it there
@pytest.mark.parametrize("name", ["stale_page_at_block_boundary", "prefix_cache_first_block_key",
                                  "penalties_count_rejected_drafts", "min_new_tokens_counted_from_prompt"])
def test_context_mutants_fail_with_contexts(name):
    impl = get(name)
    pair = get_pair(impl.pair or "toy")  # a mutant that names no pair runs on the default toy pair
    report = run_generation_check(impl.fn, pair, samples=600, settings=getattr(impl.fn, "settings", (Setting(1.0),)),
                                  seed=3, contexts=_small_plan(pair), stop_on_fail=True)
    assert report.verdict == "fail", report.failure_summary()


def test_contexts_plan_is_the_generation_default_and_none_turns_it_off(pair):
    """`auto` (the default): the catalogue at the generation level, and at the engine level wherever a local target
    scores the outputs (else the prompts only); `none` gives back the prompt cells alone."""
    from harness.check.api import _generation_source
    from harness.check.config import CheckConfig
    from harness.served.cli import engine_contexts

    assert CheckConfig().contexts == "auto"
    names = {}
    for contexts in ("auto", "catalogue", "none"):
        config = CheckConfig(impl="specdec_ref.adapters:generate", level="generation", pair="toy", contexts=contexts)
        source, config, _ = _generation_source(config, [], None, None)
        names[contexts] = [c.name for c in source.cells(config)]
    assert names["auto"] == names["catalogue"] and "T=1/contexts" in names["auto"]
    assert not any(n.endswith("/contexts") for n in names["none"]) and "T=1/prompt0" in names["none"]
    from types import SimpleNamespace

    local = SimpleNamespace(ground_truth="auto", pair_given=True, target=None)
    remote = SimpleNamespace(ground_truth="two-sample", pair_given=True, target=None)
    no_target = SimpleNamespace(ground_truth="auto", pair_given=False, target=None)
    assert [engine_contexts(c, local) for c in ("auto", "catalogue", "none")] == ["catalogue", "catalogue", "none"]
    assert engine_contexts("auto", remote) == engine_contexts("auto", no_target) == "none"  # no local law to score
    assert list(plan(pair)["contexts"]) == catalogue(pair)  # the same contexts, built once per pair object
    assert isinstance(plan(pair)["contexts"][0], Context)


def test_the_catalogue_is_built_only_when_a_cell_reads_it(pair):
    """The plan is declared from the catalogue's slots (families, names, lengths) without sampling the target; a run
    decided at its first cell never builds the catalogue (so it is no slower than the plan without contexts), and a
    run that reaches the contexts cells builds exactly the declared contexts."""
    from harness.check.generation import run_generation_check
    from harness.contexts import Catalogue, slots

    def greedy_wrong(*args, **kwargs):  # fails the first cell (greedy equality)
        out = reference_generate(*args, **kwargs)
        return torch.where(out >= 0, (out + 1) % 16, out)

    declared = plan(get_pair("toy-low"), seed=11)
    assert isinstance(declared["contexts"], Catalogue) and not declared["contexts"].built
    report = run_generation_check(greedy_wrong, get_pair("toy-low"), seed=11, gamma=3, contexts=declared,
                                  stop_on_fail=True)
    assert report.verdict == "fail" and report.cases[0]["name"] == "greedy"
    assert not declared["contexts"].built  # decided at the greedy cell: no context was ever read
    assert slots(list(declared["contexts"])) == declared["contexts"].slots  # reading builds the declared catalogue
    assert declared["contexts"].built


@pytest.mark.stochastic(false_alarm=0.011, seed=0)  # FAIL 0.01 + PASS of --contexts none, where the bug is lossless, 0.001
def test_the_default_generation_check_fails_the_block_boundary_sampling_bug(capsys):
    """The bug that passed `specdec verify --level generation --pair toy` when the plan had the pair's two 4-token
    prompts only (no sampling cell reached absolute index 16) fails the default plan, with no flag; `--contexts
    none` (the old plan) still misses it: coverage, not power."""
    from harness.cli import main

    args = ["verify", "--impl", "harness.mutants.generation:stale_page_at_block_boundary_sampling", "--level",
            "generation", "--pair", "toy", "--setting", "T=1", "--samples", "300", "--threads", "1"]
    assert main(args) == 1
    assert "T=1/contexts/" in capsys.readouterr().err
    assert main([*args, "--contexts", "none"]) == 0


def test_target_samples_follow_the_targets_own_law_and_repeat_per_seed(pair):
    """The resampled family's sampler (one KV-cached forward per token): the first token's frequencies fit the
    target's T = 1 law (Pearson, exact law known), the second token is in the support of the target's law at the
    sampled prefix (the cache carries the prefix), and a seed gives the same chains."""
    from scipy.stats import chisquare

    from harness.contexts import target_samples

    start = torch.tensor([[3, 1, 4, 1]] * 4000)
    a = target_samples(pair.target, start, 2, 16, seed=5)
    assert torch.equal(a, target_samples(pair.target, start, 2, 16, seed=5)) and a.shape == (4000, 2)
    with torch.inference_mode():
        law = torch.softmax(pair.target(input_ids=start[:1]).logits[0, -1, :16].double(), -1).numpy()
        second = torch.softmax(pair.target(input_ids=torch.cat([start, a[:, :1]], 1)).logits[:, -1, :16].double(), -1)
    counts = np.bincount(a[:, 0].numpy(), minlength=16)
    keep = law * 4000 >= 5
    assert chisquare(counts[keep], law[keep] / law[keep].sum() * counts[keep].sum()).pvalue > 1e-4
    assert bool((second[torch.arange(4000), a[:, 1]] > 1e-12).all())


def test_a_prompt_among_the_contexts_gets_no_prompt_cell_without_the_exact_law(pair):
    """On a pair without the exact joint law, a prompt that is one of the catalogue's contexts is sampled in the
    contexts cell only (its own cell would be a PIT slice of the same test); a toy pair keeps its prompt cells, which
    carry the exact joint law. The planned rows follow the cells."""
    from harness.check.config import CheckConfig
    from harness.check.generation import GenerationSource
    from harness.check.report import CheckReport

    small = _small_plan(pair)
    contexts = [Context(tuple(pair.prompts[0]), "prompts", "prompts/0"), *small["contexts"]]
    config = CheckConfig(level="generation", seed=0)
    names = {}
    for exact in (True, False):
        source = GenerationSource(reference_generate, pair, settings=(Setting(0.0), Setting(1.0)),
                                  contexts={**small, "contexts": contexts})
        source.enumerate = exact
        names[exact] = [c.name for c in source.cells(config)]
        rows = sum(c.summary["default_rows"] for c in source.cells(config) if "default_rows" in c.summary)
        assert source.planned_samples(config) == rows
    assert "T=1/prompt0" in names[True] and "T=1/prompt1" in names[True]
    assert "T=1/prompt0" not in names[False] and "T=1/prompt1" in names[False]  # prompt 1 is not a context
    assert "T=1/contexts" in names[False] and "greedy" in names[False]  # greedy still runs the prompts
    report = CheckReport(impl="x", level="generation", false_alarm_rate=1e-3, target_tv=0.05, power=0.99, seed=0)
    source.finish(report, config)
    assert any(n.startswith("prompt 0: no prompt cell of its own") for n in report.notes), report.notes
