"""Bad input to the reference gets a clear SpecDecInputError naming the argument."""

import pytest
import torch

from specdec_ref import SpecDecInputError, toy
from specdec_ref.generate import speculative_generate
from specdec_ref.verify import verify_step


def _verify_inputs(B=2, gamma=2, V=5):
    g = torch.Generator().manual_seed(0)
    p = torch.rand(B, gamma + 1, V, generator=g).softmax(-1)
    q = torch.rand(B, gamma, V, generator=g).softmax(-1)
    x = torch.zeros(B, gamma, dtype=torch.long)
    return p, q, x


@pytest.mark.parametrize("mutate,needle", [
    (lambda p, q, x: (p.log(), q, x), "target_probs"),  # logits instead of probabilities
    (lambda p, q, x: (p, q * 1.1, x), "draft_probs rows must sum to 1"),
    (lambda p, q, x: (p.masked_fill(p > 0.3, float("nan")), q, x), "NaN"),
    (lambda p, q, x: (p, q, x[:, :0]), "gamma must be >= 1"),
    (lambda p, q, x: (p, q[:, :, :4].softmax(-1), x), "vocabularies must match"),
    (lambda p, q, x: (p[:, :2], q, x), "target_probs must have shape"),
    (lambda p, q, x: (p, q, x + 7), "token ids in"),
    (lambda p, q, x: (p, q, x.float()), "integer"),
])
def test_verify_bad_input(mutate, needle):
    p, q, x = mutate(*_verify_inputs())
    with pytest.raises(SpecDecInputError, match=needle):
        verify_step(p, q, x, torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def pair():
    return toy.tiny_llama(16, seed=0, max_positions=32), toy.tiny_llama(16, seed=1, max_positions=32)


@pytest.mark.parametrize("kwargs,needle", [
    (dict(gamma=0), "gamma must be an integer >= 1"),
    (dict(temperature=-1.0), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_k=0), "top_k"),
    (dict(input_ids=torch.zeros(1, 0, dtype=torch.long)), "empty"),
    (dict(input_ids=torch.zeros(1, 30, dtype=torch.long)), "exceeds the model's context of 32"),
    (dict(input_ids=torch.full((1, 3), 99)), "token ids in"),
    (dict(max_new_tokens=-1), "max_new_tokens"),
])
def test_generate_bad_input(pair, kwargs, needle):
    target, draft = pair
    args = dict(input_ids=torch.zeros(1, 3, dtype=torch.long), max_new_tokens=5, gamma=2, temperature=1.0)
    args.update(kwargs)
    input_ids = args.pop("input_ids")
    with pytest.raises(SpecDecInputError, match=needle):
        speculative_generate(target, draft, input_ids, **args)


def test_vocabulary_mismatch_names_both_sizes(pair):
    target, _ = pair
    other = toy.tiny_llama(24, seed=2)
    with pytest.raises(SpecDecInputError, match=r"target 16 tokens, draft 24 tokens"):
        speculative_generate(target, other, torch.zeros(1, 3, dtype=torch.long), max_new_tokens=4, gamma=2)


def test_nan_logits_from_a_model_are_refused(pair):
    target, draft = pair
    broken = toy.tiny_llama(16, seed=0, max_positions=32)
    with torch.no_grad():
        broken.lm_head.weight[3, 0] = float("nan")
    with pytest.raises(SpecDecInputError, match="target logits contains NaN"):
        speculative_generate(broken, draft, torch.zeros(1, 3, dtype=torch.long), max_new_tokens=4, gamma=2)
