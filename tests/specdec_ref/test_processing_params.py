"""min_p, logit_bias, penalties, bad words, min_new_tokens: each against transformers' own logits
processor where one exists (OpenAI's frequency/presence penalties against their published formula),
the documented order against transformers' chain, history bookkeeping, conventions and bad input."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoBadWordsLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from specdec_ref.errors import SpecDecInputError
from specdec_ref.processing import History, SamplingParams, extend_history, history_of, process

V = 12
EOS = 3


def _case(seed, n_prompt=3, n_gen=4, rows=4):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, V, generator=g, dtype=torch.float64) * 3
    seq = torch.randint(0, V, (rows, n_prompt + n_gen), generator=g)
    return logits, seq, History(seq, torch.full((rows,), n_gen), (EOS,))


def _hf(chain, seq, logits):
    return LogitsProcessorList(chain)(seq, logits.clone()).softmax(-1)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), min_p=st.floats(0.0, 1.0), temperature=st.floats(0.3, 2.0))
def test_min_p_matches_transformers(seed, min_p, temperature):
    logits, seq, hist = _case(seed)
    ours = process(logits, SamplingParams(temperature, min_p=min_p), hist)
    want = _hf([TemperatureLogitsWarper(temperature), MinPLogitsWarper(min_p)], seq, logits)
    assert torch.allclose(ours, want, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), penalty=st.floats(0.2, 3.0))
def test_repetition_penalty_matches_transformers(seed, penalty):
    logits, seq, hist = _case(seed)
    ours = process(logits, SamplingParams(1.0, repetition_penalty=penalty), hist)
    assert torch.allclose(ours, _hf([RepetitionPenaltyLogitsProcessor(penalty)], seq, logits), atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), words=st.lists(st.lists(st.integers(0, V - 1), min_size=1, max_size=3),
                                                   min_size=1, max_size=4))
def test_bad_words_match_transformers(seed, words):
    logits, seq, hist = _case(seed)
    seq[0, -2:] = torch.tensor(words[0][:2][-2:] + [0] * (2 - len(words[0][:2][-2:])))  # make some prefixes hit
    words = [w for w in words if w != [EOS]]  # transformers drops a bad word equal to the EOS id
    if not words:
        return
    ours = process(logits, SamplingParams(1.0, bad_words_ids=words), hist)
    assert torch.equal(torch.isinf(ours.log()), torch.isinf(_hf([NoBadWordsLogitsProcessor(words, EOS)], seq,
                                                                 logits).log()))


@pytest.mark.parametrize("n_gen", [0, 2, 3, 5])
def test_min_new_tokens_matches_transformers(n_gen):
    logits, seq, _ = _case(1, n_prompt=3, n_gen=n_gen)
    ours = process(logits, SamplingParams(1.0, min_new_tokens=3), History(seq, torch.full((4,), n_gen), (EOS,)))
    want = _hf([MinNewTokensLengthLogitsProcessor(3, 3, EOS)], seq, logits)
    assert torch.allclose(ours, want, atol=1e-12)
    assert (ours[:, EOS] == 0).all() == (n_gen < 3)


def test_logit_bias_matches_sequence_bias():
    logits, seq, hist = _case(2)
    bias = {1: 2.5, 7: -4.0}
    ours = process(logits, SamplingParams(0.8, logit_bias=bias), hist)
    want = _hf([SequenceBiasLogitsProcessor({(k,): b for k, b in bias.items()}), TemperatureLogitsWarper(0.8)],
               seq, logits)
    assert torch.allclose(ours, want, atol=1e-12)


def test_frequency_and_presence_penalties_follow_openai_over_generated_tokens_only():
    logits, seq, _ = _case(3, n_prompt=3, n_gen=4)
    hist = History(seq, torch.full((4,), 4), ())
    ours = process(logits, SamplingParams(1.0, frequency_penalty=0.7, presence_penalty=0.4), hist)
    counts = torch.zeros(4, V, dtype=torch.float64).scatter_add_(1, seq[:, 3:], torch.ones(4, 4, dtype=torch.float64))
    want = (logits - 0.7 * counts - 0.4 * (counts > 0)).softmax(-1)
    assert torch.allclose(ours, want, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), temperature=st.floats(0.3, 2.0), top_k=st.integers(1, V),
       top_p=st.floats(0.1, 1.0), min_p=st.floats(0.0, 0.5), rep=st.floats(0.5, 2.0))
def test_documented_order_matches_transformers_chain(seed, temperature, top_k, top_p, min_p, rep):
    logits, seq, hist = _case(seed)
    hist = History(seq, torch.full((4,), 1), (EOS,))
    params = SamplingParams(temperature, top_k, top_p, min_p=min_p, logit_bias=((5, 1.5),), repetition_penalty=rep,
                            bad_words_ids=((2,),), min_new_tokens=2)
    chain = [SequenceBiasLogitsProcessor({(5,): 1.5}), RepetitionPenaltyLogitsProcessor(rep),
             NoBadWordsLogitsProcessor([[2]], EOS), MinNewTokensLengthLogitsProcessor(6, 2, EOS),
             TemperatureLogitsWarper(temperature), TopKLogitsWarper(top_k), TopPLogitsWarper(top_p),
             MinPLogitsWarper(min_p)]
    assert torch.allclose(process(logits, params, hist), _hf(chain, seq, logits), atol=1e-12)


def test_greedy_applies_the_pre_temperature_steps():
    logits = torch.tensor([[5.0, 1.0, 0.0, -1.0]])
    hist = history_of([torch.tensor([0, 0])], [2])
    assert process(logits, SamplingParams(0.0, repetition_penalty=10.0), hist).argmax().item() == 1
    assert process(logits, SamplingParams(0.0, bad_words_ids=((0,),)), hist).argmax().item() == 1
    assert process(logits, SamplingParams(0.0, logit_bias={3: 7.0})).argmax().item() == 3


def test_extend_history_gives_position_i_the_first_i_drafts():
    base = history_of([torch.tensor([4, 5]), torch.tensor([6])], [1, 0])
    ext = extend_history(base, torch.tensor([[1, 2], [3, 4]]))
    assert ext.seq.shape == (2, 3, 4)
    assert ext.seq[0].tolist() == [[-1, -1, 4, 5], [-1, 4, 5, 1], [4, 5, 1, 2]]
    assert ext.seq[1].tolist() == [[-1, -1, -1, 6], [-1, -1, 6, 3], [-1, 6, 3, 4]]
    assert ext.n_generated.tolist() == [[1, 2, 3], [0, 1, 2]]


def test_defaults_are_no_ops_and_extras_lists_only_what_is_set():
    logits, seq, hist = _case(4)
    assert torch.equal(process(logits, SamplingParams(0.7, 5, 0.9), hist), process(logits, SamplingParams(0.7, 5, 0.9)))
    params = SamplingParams(0.7, min_p=0.1, logit_bias={2: 1.0}, bad_words_ids=[[1, 2]])
    assert params.extras() == {"min_p": 0.1, "logit_bias": {2: 1.0}, "bad_words_ids": [[1, 2]]}
    assert SamplingParams(1.0).extras() == {}


def test_conventions_differ_from_the_standard_order_as_documented():
    logits, seq, hist = _case(5)
    t, top_p = 0.5, 0.6
    before = process(logits, SamplingParams(t, top_p=top_p), order="top_p_before_temperature")
    want = (LogitsProcessorList([TopPLogitsWarper(top_p)])(None, logits.clone()) / t).softmax(-1)
    assert torch.allclose(before, want, atol=1e-12)
    assert not torch.allclose(before, process(logits, SamplingParams(t, top_p=top_p)))
    late = process(logits, SamplingParams(t, logit_bias={1: 2.0}), order="penalties_after_temperature")
    assert torch.allclose(late, (logits / t + 2.0 * (torch.arange(V) == 1)).softmax(-1), atol=1e-12)


@pytest.mark.parametrize("kwargs, needle", [
    ({"min_p": 1.5}, "min_p"), ({"min_p": -0.1}, "min_p"), ({"logit_bias": {V: 1.0}}, "logit_bias keys"),
    ({"logit_bias": {-1: 1.0}}, "logit_bias keys"), ({"logit_bias": {1: math.inf}}, "logit_bias values"),
    ({"logit_bias": {1: math.nan}}, "logit_bias values"), ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"repetition_penalty": -1.0}, "repetition_penalty"), ({"frequency_penalty": math.nan}, "frequency_penalty"),
    ({"bad_words_ids": [[]]}, "bad_words_ids"), ({"bad_words_ids": [[V]]}, "bad_words_ids"),
    ({"min_new_tokens": -1}, "min_new_tokens"),
])
def test_bad_params_raise_one_line_naming_the_parameter(kwargs, needle):
    with pytest.raises(SpecDecInputError, match=needle) as info:
        process(torch.zeros(1, V), SamplingParams(1.0, **kwargs), history_of([torch.tensor([0])], [0]))
    assert "\n" not in str(info.value)
