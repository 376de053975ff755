"""transformers adapters: γ is really applied (transformers 5 reads it from the draft's config)."""

import torch

from harness.adapters.hf import assisted_generate
from harness.models.toy_pairs import _toy_models


def test_assisted_generate_fixes_gamma_for_the_call_and_restores_the_config(monkeypatch):
    target, draft = _toy_models("0.7", torch.float32)
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
