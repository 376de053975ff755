"""A new user's speculative decoding, written from the README's contract alone."""
import torch


def verify(target_probs, draft_probs, draft_tokens, generator):
    """Chain rejection sampling (Leviathan et al. 2023), all rows at once."""
    B, g1, V = target_probs.shape
    gamma = g1 - 1
    p, q = target_probs.double(), draft_probs.double()
    p_x = p[:, :gamma].gather(2, draft_tokens[..., None])[..., 0]
    q_x = q.gather(2, draft_tokens[..., None])[..., 0]
    u = torch.rand(B, gamma, generator=generator, dtype=torch.float64)
    accept = (u * q_x <= p_x) & (q_x > 0)
    n_kept = accept.long().cumprod(1).sum(1)                       # drafts kept before the first rejection
    rows = torch.arange(B)
    last = torch.where(n_kept < gamma, n_kept, torch.full_like(n_kept, gamma))
    law = p[rows, last].clone()                                     # the bonus position's p when all are kept
    rejected = n_kept < gamma
    residual = (p[rows, last.clamp(max=gamma - 1)] - q[rows, last.clamp(max=gamma - 1)]).clamp(min=0)
    mass = residual.sum(-1, keepdim=True)
    residual = torch.where(mass > 0, residual / mass.clamp(min=1e-300), p[rows, last.clamp(max=gamma - 1)])
    law[rejected] = residual[rejected]
    final = torch.multinomial(law, 1, generator=generator)[:, 0]
    out = torch.full((B, g1), -1, dtype=torch.int64)
    keep = torch.arange(g1)[None, :] < n_kept[:, None]
    out[:, :gamma][keep[:, :gamma]] = draft_tokens[keep[:, :gamma]]
    out[rows, n_kept] = final
    return out


def always_accept(target_probs, draft_probs, draft_tokens, generator):
    """A planted bug: every draft is kept."""
    bonus = torch.multinomial(target_probs[:, -1].double(), 1, generator=generator)
    return torch.cat([draft_tokens, bonus], dim=1)


def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The contract's generate() (§1b), and nothing more: the reference behind exactly that signature."""
    from specdec_ref.adapters import generate as reference

    return reference(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                     temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)


def generate_ignoring_top_p(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """A planted bug: top-p is dropped."""
    return generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature,
                    top_k=top_k, top_p=None, seed=seed)


from specdec_ref.adapters import tree_verify_specinfer as tree_verify  # noqa: E402,F401  (a tree verifier is long to write by hand)
