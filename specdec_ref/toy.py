"""Exact toy models: tiny real transformers architectures with fixed seeds and controllable α.

They run through the same transformers code paths (attention, RoPE, KV caches) as real models, but
with vocabularies of 8–32 tokens, so the exact law of a short continuation can be enumerated in
float64, and α can be dialled from near 0 to 1:

- `toy_pair(alpha=...)`: context-dependent target; the draft is a noisy copy whose LM head is
  scaled by a factor found by bisection so the mean α over random contexts hits the request
  (negative factors give "draft logits ≈ −target logits", α near 0).
- `constant_alpha_pair(alpha=...)`: every position has the same (p, q) whatever the context, with
  Σ min(p, q) = α exactly, so the Leviathan formula (1 − α^{γ+1}) / (1 − α) holds exactly.
- `add_synthetic_cost`: each forward takes a fixed wall time however many positions it scores,
  emulating the memory-bound regime of an accelerator (T_check(γ+1) ≈ T_pass(1)).
"""

from __future__ import annotations

import copy
import time

import torch

from specdec_ref.errors import SpecDecInputError


def tiny_llama(vocab_size: int = 16, *, hidden: int = 32, layers: int = 1, heads: int = 2, seed: int = 0,
               dtype: torch.dtype = torch.float32, max_positions: int = 64, logit_scale: float = 20.0,
               eos_token_id: int | None = None):
    """A randomly initialised LlamaForCausalLM (fixed seed) with moderately peaked next-token laws."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max_positions,
        tie_word_embeddings=False, eos_token_id=eos_token_id, bos_token_id=None, pad_token_id=None,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)  # random init gives near-uniform laws: sharpen them
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = None
    return model.to(dtype).eval()


def tiny_gpt2(vocab_size: int = 16, *, hidden: int = 32, layers: int = 1, heads: int = 2, seed: int = 0,
              dtype: torch.dtype = torch.float32, max_positions: int = 64):
    """A randomly initialised GPT2LMHeadModel (learned positions, a second cache layout)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size, n_embd=hidden, n_layer=layers, n_head=heads,
                        n_positions=max_positions, bos_token_id=None, eos_token_id=None,
                        tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    return model.to(dtype).eval()


def mean_alpha(target, draft, *, contexts: int = 256, length: int = 6, seed: int = 1234,
               temperature: float = 1.0) -> float:
    """Mean Σ min(p, q) over all positions of random token contexts (a cheap α estimate)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, target.config.vocab_size, (contexts, length), generator=g)
    with torch.inference_mode():
        p = (target(input_ids=ids).logits.double() / temperature).softmax(-1)
        q = (draft(input_ids=ids).logits.double() / temperature).softmax(-1)
    return float(torch.minimum(p, q).sum(-1).mean())


def _check_alpha(alpha: float, low: float = 0.0) -> None:
    if not isinstance(alpha, (int, float)) or not low <= alpha <= 1.0:
        raise SpecDecInputError(f"alpha must be a number in [{low}, 1], got {alpha!r}")


def toy_pair(alpha: float = 0.7, *, vocab_size: int = 16, seed: int = 0, noise: float = 0.05,
             dtype: torch.dtype = torch.float32, tolerance: float = 0.01, **model_kwargs):
    """(target, draft) with mean α ≈ `alpha` over random contexts (context-dependent p and q)."""
    _check_alpha(alpha)
    target = tiny_llama(vocab_size, seed=seed, dtype=torch.float64, **model_kwargs)
    if alpha >= 1.0:
        return target.to(dtype), copy.deepcopy(target).to(dtype)
    base = copy.deepcopy(target)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param in base.parameters():  # a different body, so the draft is not just a reshaped p
            param.add_(noise * param.abs().mean() * torch.randn(param.shape, generator=gen, dtype=param.dtype))
    head = base.lm_head.weight.detach().clone()
    draft = copy.deepcopy(base)

    def alpha_at(scale: float) -> float:
        with torch.no_grad():
            draft.lm_head.weight.copy_(scale * head)
        return mean_alpha(target, draft)

    lo, hi = -1.0, 1.0
    if not alpha_at(lo) <= alpha <= alpha_at(hi):
        raise SpecDecInputError(
            f"alpha={alpha} is outside what this toy family reaches ([{alpha_at(lo):.3f}, {alpha_at(hi):.3f}] "
            f"with noise={noise}); lower `noise` for higher alpha"
        )
    for _ in range(40):  # bisection: α grows with the head scale on [-1, 1] for these models
        mid = (lo + hi) / 2
        measured = alpha_at(mid)
        if abs(measured - alpha) < tolerance / 4:
            break
        lo, hi = (mid, hi) if measured < alpha else (lo, mid)
    if abs(measured - alpha) > tolerance:
        raise SpecDecInputError(f"could not tune the toy draft to alpha={alpha} (got {measured:.3f})")
    return target.to(dtype), draft.to(dtype)


def constant_law_model(logits: torch.Tensor, *, seed: int = 0, dtype: torch.dtype = torch.float32,
                       max_positions: int = 2048):
    """A tiny Llama whose next-token logits equal `logits` [V] at every position, whatever the context.

    All token embeddings are the same vector, so every position sees identical values and the
    final hidden state n is the same everywhere; a rank-one LM head ℓ nᵀ / |n|² then maps n to ℓ.
    """
    V = logits.shape[-1]
    model = tiny_llama(V, seed=seed, dtype=torch.float64, max_positions=max_positions)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(model.model.embed_tokens.weight[0].expand(V, -1))
        captured = {}
        hook = model.lm_head.register_forward_pre_hook(lambda mod, args: captured.setdefault("n", args[0]))
        model(input_ids=torch.zeros(1, 1, dtype=torch.long))
        hook.remove()
        n = captured["n"][0, -1]  # [hidden]
        model.lm_head.weight.copy_(torch.outer(logits.double(), n) / n.dot(n))
    return model.to(dtype).eval()


def constant_alpha_laws(alpha: float, vocab_size: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, q) float64 with Σ min(p, q) = alpha exactly: q = (1 − t) p + t·e_m, m the least likely token.

    Then min(p, q) = (1 − t) p off m and p_m at m, so α = 1 − t (1 − p_m), t = (1 − α) / (1 − p_m).
    """
    g = torch.Generator().manual_seed(seed)
    p = (2.0 * torch.randn(vocab_size, generator=g, dtype=torch.float64)).softmax(-1)
    m = int(p.argmin())
    _check_alpha(alpha, low=float(p[m]))
    t = (1 - alpha) / (1 - float(p[m]))
    q = (1 - t) * p
    q[m] += t
    return p, q


def constant_alpha_pair(alpha: float, *, vocab_size: int = 16, seed: int = 0, dtype: torch.dtype = torch.float32,
                        max_positions: int = 2048):
    """(target, draft) whose laws are context-free with Σ min(p, q) = alpha (to float rounding)."""
    p, q = constant_alpha_laws(alpha, vocab_size, seed)
    target = constant_law_model(p.log(), seed=seed, dtype=dtype, max_positions=max_positions)
    draft = constant_law_model(q.log(), seed=seed + 1, dtype=dtype, max_positions=max_positions)
    return target, draft


def add_synthetic_cost(model, seconds: float):
    """Make every forward of `model` take at least `seconds` of wall time (however many positions).

    Returns the hook handles (call `.remove()` on each to undo). The pad-to-a-fixed-time emulates
    an accelerator where a pass is bound by loading weights, so scoring γ+1 positions costs ≈ one.
    """
    if seconds < 0:
        raise SpecDecInputError(f"synthetic cost must be >= 0 seconds, got {seconds}")
    starts: list[float] = []

    def before(module, args, kwargs):
        starts.append(time.perf_counter())

    def after(module, args, kwargs, output):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        left = seconds - (time.perf_counter() - starts.pop())
        if left > 0:
            time.sleep(left)
        return output

    model.specdec_synthetic_cost = seconds
    return [model.register_forward_pre_hook(before, with_kwargs=True),
            model.register_forward_hook(after, with_kwargs=True)]
