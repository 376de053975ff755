"""transformers adapters: γ is really applied (transformers 5 reads it from the draft's config)."""

import torch

from harness.adapters.hf import assisted_generate
from harness.models.toy_pairs import toy_models


def test_assisted_generate_fixes_gamma_for_the_call_and_restores_the_config(monkeypatch):
    target, draft = toy_models("0.7", torch.float32)
    seen = []
    original = type(target).generate

    def spy(self, *args, **kwargs):
        seen.append((draft.generation_config.num_assistant_tokens, draft.generation_config.num_assistant_tokens_schedule))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(target), "generate", spy)
    before = draft.generation_config.num_assistant_tokens_schedule
    out = assisted_generate(target, draft, torch.tensor([[1, 2, 3]] * 2), max_new_tokens=6, gamma=5, temperature=1.0,
                            top_k=None, top_p=None, seed=0)
    assert out.shape == (2, 6)
    assert len(seen) >= 2 and set(seen) == {(5, "constant")}  # the draft runs generate() too
    assert draft.generation_config.num_assistant_tokens_schedule == before


def test_optional_parameters_reach_transformers_and_unsupported_ones_are_not_accepted(monkeypatch):
    from harness.check.settings import accepted_parameters

    target, draft = toy_models("0.7", torch.float32)
    seen = []
    original = type(target).generate

    def spy(self, *args, **kwargs):
        if "assistant_model" in kwargs:
            seen.append({k: kwargs.get(k) for k in ("min_p", "sequence_bias", "repetition_penalty", "bad_words_ids",
                                                    "min_new_tokens")})
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(target), "generate", spy)
    out = assisted_generate(target, draft, torch.tensor([[1, 2, 3]]), max_new_tokens=4, gamma=2, temperature=1.0,
                            top_k=None, top_p=None, seed=0, min_p=0.1, logit_bias={4: -100.0},
                            repetition_penalty=1.3, bad_words_ids=[[7]], min_new_tokens=2)
    assert seen == [{"min_p": 0.1, "sequence_bias": {(4,): -100.0}, "repetition_penalty": 1.3,
                     "bad_words_ids": [[7]], "min_new_tokens": 2}]
    assert not set(out[0].tolist()) & {4, 7}  # a -100 bias and a bad word are never emitted
    assert accepted_parameters(assisted_generate) == {"min_p", "logit_bias", "repetition_penalty", "bad_words_ids",
                                                      "min_new_tokens", "constraint"}  # as prefix_allowed_tokens_fn


def test_transformers_drops_a_bad_word_equal_to_eos():
    """The finding in results/findings/README.md: `bad_words_ids=[[eos]]` does not ban EOS in transformers
    (NoBadWordsLogitsProcessor filters it out), in plain and assisted generation alike; the reference bans it."""
    from harness.adapters.hf import hf_generate
    from harness.pairs import get_pair
    from specdec_ref.adapters import generate as reference_generate

    pair = get_pair("toy-eos")
    eos = pair.target.generation_config.eos_token_id
    ids = torch.tensor([pair.prompts[0]] * 20)
    kw = dict(max_new_tokens=3, temperature=1.0, top_k=None, top_p=None, seed=0, bad_words_ids=[[eos]])
    assert (hf_generate(pair.target, ids, **kw) == eos).any()
    assert (assisted_generate(pair.target, pair.draft, ids, gamma=3, **kw) == eos).any()
    assert not (reference_generate(pair.target, pair.draft, ids, gamma=3, **kw) == eos).any()
