"""Batched teacher forcing (harness.check.scoring) against one full forward per sequence."""

from __future__ import annotations

import pytest
import torch

from harness.check.scoring import score_continuations
from harness.models.toy_pairs import toy_models
from specdec_ref import toy


def _full_forward(model, prompt: list[int], row: torch.Tensor) -> torch.Tensor:
    """The plain way: the whole sequence through the model, logits at the continuation positions."""
    seq = torch.tensor([list(prompt) + row.clamp_min(0).tolist()])
    with torch.inference_mode():
        return model(input_ids=seq, attention_mask=torch.ones_like(seq)).logits[0, len(prompt) - 1 : -1]


@pytest.mark.parametrize("model", [toy_models("0.7", torch.float64)[0], toy.tiny_gpt2(32, seed=3).double()],
                         ids=["llama", "gpt2"])
def test_matches_full_forward_across_prompts(model):
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    prompts = [[1, 2, 3, 4, 5], [1, 2, 7], [1, 2, 3, 9, 9, 9, 2]]  # shared head, different lengths
    rows = torch.randint(0, V, (7, 6), generator=g)
    rows[2, 4:] = -1  # ended with EOS
    index = [0, 1, 2, 0, 1, 2, 2]
    got = score_continuations(model, prompts, rows, prompt_index=index, vocab=V)
    assert got.shape == (7, 6, V)
    for j in range(7):
        want = _full_forward(model, prompts[index[j]], rows[j])
        # 1e-5: transformers' eager attention takes its softmax in float32 even for a float64 model
        assert torch.allclose(got[j], want, atol=1e-5, rtol=0), j


def test_one_row_and_one_prompt():
    model = toy_models("0.7", torch.float64)[0]
    rows = torch.randint(0, 16, (1, 4), generator=torch.Generator().manual_seed(1))
    got = score_continuations(model, [[3, 1, 4]], rows)
    assert torch.allclose(got[0], _full_forward(model, [3, 1, 4], rows[0]), atol=1e-5, rtol=0)


def test_shifted_positions_would_be_detected():
    """Not vacuous: scoring each row one position late (off by one in the gather) is caught."""
    model = toy_models("0.7", torch.float64)[0]
    rows = torch.randint(0, 16, (3, 5), generator=torch.Generator().manual_seed(2))
    got = score_continuations(model, [[3, 1, 4]], rows)
    late = torch.cat([got[:, 1:], got[:, -1:]], dim=1)
    assert not torch.allclose(late[0], _full_forward(model, [3, 1, 4], rows[0]), atol=1e-6)
