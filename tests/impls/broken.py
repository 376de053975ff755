"""Implementations with planted bugs or bad behaviour, named on the command line in tests."""

import torch

from specdec_ref.sampling import sample_from_uniform
from specdec_ref.verify import accept_and_final_law, assemble, verify_step


def always_accept(target_probs, draft_probs, draft_tokens, generator):
    """transformers PR #28508: drafts always accepted, bonus from p."""
    bonus = torch.multinomial(target_probs[:, -1].float(), 1, generator=generator)
    return torch.cat([draft_tokens, bonus], dim=1)


def residual_from_p(target_probs, draft_probs, draft_tokens, generator):
    """vllm-ascend #7807: the recovered token is drawn from p instead of norm((p − q)₊)."""
    B, gamma = draft_tokens.shape
    u = torch.rand(B, gamma + 1, generator=generator, dtype=torch.float64)
    n_acc, _ = accept_and_final_law(target_probs, draft_probs, draft_tokens, u[:, :gamma])
    p_n = target_probs.gather(1, n_acc.view(B, 1, 1).expand(B, 1, target_probs.shape[-1])).squeeze(1)
    return assemble(draft_tokens, n_acc, sample_from_uniform(p_n, u[:, gamma]))


def out_of_range(target_probs, draft_probs, draft_tokens, generator):
    out = verify_step(target_probs, draft_probs, draft_tokens, generator).tokens
    out[0, 0] = target_probs.shape[-1] + 3
    return out


def wrong_shape(target_probs, draft_probs, draft_tokens, generator):
    return verify_step(target_probs, draft_probs, draft_tokens, generator).tokens[:, :-1]


def returns_nan(target_probs, draft_probs, draft_tokens, generator):
    out = verify_step(target_probs, draft_probs, draft_tokens, generator).tokens.double()
    out[0, 0] = float("nan")
    return out


def raises(target_probs, draft_probs, draft_tokens, generator):
    raise RuntimeError("CUDA error: device-side assert triggered")


def one_row_only(target_probs, draft_probs, draft_tokens, generator):
    if draft_tokens.shape[0] != 1:
        raise ValueError("batch size 1 only")
    return verify_step(target_probs, draft_probs, draft_tokens, generator).tokens


def two_args(target_probs, draft_probs):
    return None


not_callable = 42


def shared_uniforms_across_rows(target_probs, draft_probs, draft_tokens, generator):
    """Each pair of neighbouring rows shares its random numbers (rows are no longer independent)."""
    from specdec_ref.verify import verify_from_uniforms

    B, gamma = draft_tokens.shape
    u = torch.rand((B + 1) // 2, gamma + 1, generator=generator, dtype=torch.float64).repeat_interleave(2, 0)[:B]
    return verify_from_uniforms(target_probs, draft_probs, draft_tokens, u[:, :gamma], u[:, gamma]).tokens


def returns_none(target_probs, draft_probs, draft_tokens, generator):
    return None


def returns_list(target_probs, draft_probs, draft_tokens, generator):
    return verify_step(target_probs, draft_probs, draft_tokens, generator).tokens.tolist()


def returns_float(target_probs, draft_probs, draft_tokens, generator):
    return verify_step(target_probs, draft_probs, draft_tokens, generator).tokens.float()


def raises_without_message(target_probs, draft_probs, draft_tokens, generator):
    raise RuntimeError()


_calls = {"flaky": 0}


def flaky(target_probs, draft_probs, draft_tokens, generator):
    """Raises on its 1st, 4th, 7th ... call: a single probe call would take it for a B = 1 implementation."""
    _calls["flaky"] += 1
    if _calls["flaky"] % 3 == 1:
        raise ValueError("flaky kernel launch")
    return verify_step(target_probs, draft_probs, draft_tokens, generator).tokens


def one_row_none_beyond_gamma1(target_probs, draft_probs, draft_tokens, generator):
    """B = 1 only; returns None (not tokens) whenever γ > 1 (the B = 1 probe uses γ = 1)."""
    if draft_tokens.shape[0] != 1:
        raise ValueError("batch size 1 only")
    if draft_tokens.shape[1] > 1:
        return None
    return verify_step(target_probs, draft_probs, draft_tokens, generator).tokens


def hangs(target_probs, draft_probs, draft_tokens, generator):
    import time

    time.sleep(30)


def generate_raises(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    raise KeyError("past_key_values")


def generate_returns_none(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    return None


def generate_one_row(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The reference, refusing B > 1 (many third-party implementations do)."""
    from specdec_ref.adapters import generate

    if input_ids.shape[0] != 1:
        raise ValueError("only batch size 1 is supported")
    return generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature,
                    top_k=top_k, top_p=top_p, seed=seed)
