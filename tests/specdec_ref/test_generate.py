"""Whole-generation reference: greedy equality, cache vs recompute, bookkeeping, EOS, boundaries."""

import copy

import pytest
import torch

from specdec_ref import toy
from specdec_ref.generate import autoregressive_generate, speculative_generate


def _greedy_pairs():
    from harness.models.toy_pairs import toy_models

    target = toy.tiny_llama(32, hidden=48, layers=2, heads=4, seed=5)
    gpt2_target = toy.tiny_gpt2(32, seed=3)
    gpt2_draft = toy.tiny_gpt2(32, seed=4)
    return {
        "toy": toy_models("0.7", torch.float32),
        "toy-anti (useless draft)": toy_models("anti", torch.float32),
        "draft == target": (target, copy.deepcopy(target)),
        "random llama 2-layer vs 1-layer": (target, toy.tiny_llama(32, seed=6)),
        "random gpt2 pair": (gpt2_target, gpt2_draft),
    }


@pytest.fixture(scope="module")
def greedy_pairs():
    return _greedy_pairs()


@pytest.mark.parametrize("name", list(_greedy_pairs()))
@pytest.mark.end_to_end
def test_greedy_equals_target_greedy(greedy_pairs, name):
    target, draft = greedy_pairs[name]
    V = target.config.vocab_size
    prompts = torch.randint(0, V, (3, 5), generator=torch.Generator().manual_seed(0))
    n_new = 20
    # the target's own greedy output, from transformers' generate (attention mask passed explicitly)
    expected = target.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                               max_new_tokens=n_new, min_new_tokens=n_new, pad_token_id=0)[:, prompts.shape[1]:]
    ours = autoregressive_generate(target, prompts, max_new_tokens=n_new, temperature=0).tokens
    assert torch.equal(ours, expected)
    for gamma in range(1, 9):
        out = speculative_generate(target, draft, prompts, max_new_tokens=n_new, gamma=gamma, temperature=0)
        assert out.tokens.shape == expected.shape, gamma
        assert torch.equal(out.tokens, expected), f"gamma={gamma}"


def test_greedy_acceptance_extremes(greedy_pairs):
    target, draft = greedy_pairs["draft == target"]
    prompts = torch.randint(0, 32, (1, 4), generator=torch.Generator().manual_seed(1))
    out = speculative_generate(target, draft, prompts, max_new_tokens=17, gamma=4, temperature=0)
    assert out.stats.accepted_per_step[:-1] == [4] * (len(out.stats.accepted_per_step) - 1)
    assert out.stats.target_calls == 4  # 5 + 5 + 5 + 2 tokens


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, None, None), (0.7, 5, 0.9), (0, None, None)])
@pytest.mark.end_to_end
def test_cache_equals_recompute(toy64, temperature, top_k, top_p):
    """Same random draws, KV-cached vs recomputed from scratch: identical tokens (float64 models)."""
    target, draft = toy64
    prompts = torch.randint(0, 16, (4, 3), generator=torch.Generator().manual_seed(2))
    kwargs = dict(max_new_tokens=23, gamma=3, temperature=temperature, top_k=top_k, top_p=top_p, seed=11)
    cached = speculative_generate(target, draft, prompts, cache="cache", **kwargs)
    recomputed = speculative_generate(target, draft, prompts, cache="recompute", **kwargs)
    assert torch.equal(cached.tokens, recomputed.tokens)
    assert cached.stats.accepted_per_step == recomputed.stats.accepted_per_step


def test_stale_cache_would_be_detected(toy64, monkeypatch):
    """The cache-vs-recompute comparison is not vacuous: never cropping the cache after a rejection
    (entries of rejected drafts stay, the vLLM PR #9730 class) changes the output."""
    from transformers import DynamicCache

    target, draft = toy64
    prompts = torch.randint(0, 16, (2, 3), generator=torch.Generator().manual_seed(2))
    kwargs = dict(max_new_tokens=20, gamma=4, temperature=1.0, seed=5)
    good = speculative_generate(target, draft, prompts, cache="cache", **kwargs)
    monkeypatch.setattr(DynamicCache, "crop", lambda self, n: None)
    stale = speculative_generate(target, draft, prompts, cache="cache", **kwargs)
    assert not torch.equal(good.tokens, stale.tokens)


@pytest.mark.parametrize("gamma", [1, 3, 8])
@pytest.mark.parametrize("max_new", [1, 2, 5, 9])
def test_max_new_tokens_boundaries(toy64, gamma, max_new):
    target, draft = toy64
    prompts = torch.randint(0, 16, (3, 2), generator=torch.Generator().manual_seed(4))
    out = speculative_generate(target, draft, prompts, max_new_tokens=max_new, gamma=gamma, temperature=1.0, seed=1)
    assert out.tokens.shape == (3, max_new)
    assert bool((out.tokens >= 0).all())
    assert sum(out.stats.emitted_per_step) == 3 * max_new


@pytest.mark.end_to_end
def test_eos_inside_draft_block():
    """Rows stop at EOS (inclusive), pad with -1, and finish at different steps; greedy still matches."""
    target = toy.tiny_llama(16, seed=0, eos_token_id=3)
    draft = copy.deepcopy(target)  # draft == target: EOS arrives inside an accepted draft block
    prompts = torch.randint(0, 16, (16, 3), generator=torch.Generator().manual_seed(9))
    sampled = speculative_generate(target, draft, prompts, max_new_tokens=30, gamma=6, temperature=1.0,
                                   seed=3, eos_token_id=3)
    lengths = []
    for row in sampled.tokens.tolist():
        n = len([t for t in row if t >= 0])
        lengths.append(n)
        assert all(t == -1 for t in row[n:])
        assert 3 not in row[: n - 1]  # nothing after the first EOS
        assert row[n - 1] == 3 or n == 30
    assert len(set(lengths)) > 1, "rows should finish at different steps"
    greedy_ref = autoregressive_generate(target, prompts, max_new_tokens=30, temperature=0, eos_token_id=3)
    greedy_spec = speculative_generate(target, draft, prompts, max_new_tokens=30, gamma=6, temperature=0,
                                       eos_token_id=3)
    assert torch.equal(greedy_ref.tokens, greedy_spec.tokens)


def test_stats_bookkeeping(toy64):
    target, draft = toy64
    prompts = torch.randint(0, 16, (2, 3), generator=torch.Generator().manual_seed(6))
    out = speculative_generate(target, draft, prompts, max_new_tokens=30, gamma=4, temperature=1.0, seed=0)
    s = out.stats
    assert s.new_tokens == 60 == sum(s.emitted_per_step)
    assert all(0 <= a <= d for a, d in zip(s.accepted_per_step, s.drafted_per_step, strict=True))
    assert s.reached[0] == sum(1 for d in s.drafted_per_step if d > 0)
    assert all(s.accepted[i] <= s.reached[i] for i in range(4))
    assert 0.3 < s.alpha < 1.0
    assert s.target_seconds > 0 and s.draft_seconds > 0
    assert s.draft_calls >= s.target_calls
