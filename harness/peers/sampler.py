"""The engines' sampler-level tests of their rejection samplers, as verdict functions of a §1a `verify`.

Written from the published sources (statistic, sample size, threshold; no code copied):

- `vllm_v1_histogram` — vLLM V1, tests/v1/sample/test_rejection_sampler.py::
  test_rejection_sampling_approximates_target_distribution (read at vllm-project/vllm 004fce2d). One target
  p = softmax(U(0,1)^10) and one draft q = softmax(U(0,1)^10), V = 10, k = 2 drafts per row, the same p at every
  position; 100 reference laws softmax(U(0,1)^10). At n = 10, 100, 1,000, 10,000, 100,000 rows it histograms the
  emitted tokens of positions 0..k−1 (bonus column dropped, padding ignored), and takes the L2 distance to p and
  the Frobenius distance to the 100 references divided by 100. It passes if (distance to p at n = 10) / (at
  n = 100,000) > 20 × the same ratio for the references. No p-value.
- `vllm_mrv2_chisq` — vLLM Model Runner V2, PR #38496 (tests/v1/spec_decode/
  test_probabilistic_rejection_sampler_utils.py::test_stochastic_rejection_sample, read at 5315868). V = 4,096,
  10·V = 40,960 trials per parametrisation (K, T) ∈ {(1, 0.6), (3, 0.6), (1, 1.0), (3, 1.0)}, target and draft
  logits N(0, 1)/T; at every position 0..K, on the rows that emitted it, Pearson's χ² against p with cells of
  expected count < 5 merged into one "other" cell (kept only if its expected count is ≥ 5). The threshold — "up
  to some threshold" in the PR text — is df + 10·√(2·df) ("~10 sigma"). It passes if every position of every
  parametrisation is below it. (The published test seeds torch with 42; here each seed draws its own laws.)
- `trtllm_kl` — TRT-LLM, tests/unittest/_torch/speculative/test_torch_rejection_sampling.py::
  test_get_rejected_indices (read at NVIDIA/TensorRT-LLM 476ab24). V = 500, q = U(0,1)^500 with its 400 smallest
  set to 0, p at position 0 likewise (its own 100 non-zero tokens), one draft per row, 50,000 rows; the first
  emitted token's histogram h_spec and 50,000 direct draws from p (h_direct). It passes if
  |KL(p‖h_spec) − KL(p‖h_direct)| < 0.01 (scipy's entropy: a token of p never emitted makes a KL infinite: fail).

The published tests call the sampler on one row at a time (TRT-LLM) or on one batch; here rows are i.i.d. in
chunks of the harness's call size (harness.check.sampler_source.CHUNK_FLOATS, contiguous inputs as the sampler check
passes them), which leaves each row's law unchanged. `samples` (the equal-n comparison) replaces the total rows:
vLLM V1's last sample size grows so the five sizes sum to it; the others draw that many rows in all.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from harness.adapters.calling import ImplementationError, call_impl
from harness.check.sampler_source import CHUNK_FLOATS
from harness.check.streams import torch_generator
from harness.peers import PeerTest, PeerVerdict

VLLM_V1_SIZES = (10, 100, 1_000, 10_000, 100_000)
VLLM_V1_MULTIPLIER = 20.0
MRV2_VOCAB = 4096
MRV2_PARAMS = ((1, 0.6), (3, 0.6), (1, 1.0), (3, 1.0))
MRV2_MIN_EXPECTED = 5.0
TRT_VOCAB, TRT_NONZERO, TRT_ROWS, TRT_TOLERANCE = 500, 100, 50_000, 0.01


def draw_rows(impl, p: torch.Tensor, q: torch.Tensor, rows: int, *, drafts: torch.Generator,
              generator: torch.Generator, what: str) -> np.ndarray:
    """The emitted tokens [rows, γ+1] (−1 padded) of `impl` on `rows` i.i.d. rows holding p [γ+1, V], q [γ, V]:
    drafts x_j ~ q_j drawn here on `drafts`, the implementation called in chunks on `generator`."""
    gamma, V = q.shape
    x = torch.stack([torch.multinomial(q[j].double(), rows, replacement=True, generator=drafts)
                     for j in range(gamma)], dim=1)
    chunk = max(1, int(CHUNK_FLOATS // ((2 * gamma + 1) * V)))
    out = np.empty((rows, gamma + 1), dtype=np.int64)
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        target, draft = p.expand(n, -1, -1).contiguous(), q.expand(n, -1, -1).contiguous()
        tokens = call_impl(impl, target, draft, x[start:start + n].clone(), generator, what=what)
        if not isinstance(tokens, torch.Tensor) or tuple(tokens.shape) != (n, gamma + 1):
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise ImplementationError(f"{what}: the implementation returned {shape}, expected [{n}, {gamma + 1}]")
        out[start:start + n] = tokens.detach().cpu().long().numpy()
    return out


def _emitted(tokens: np.ndarray) -> np.ndarray:
    """Tokens emitted per row: the leading non-negative entries (n + 1 of Algorithm 1)."""
    return (np.cumprod(tokens >= 0, axis=1)).sum(axis=1)


# ---------------------------------------------------------------------------------------------- vLLM V1


def vllm_v1_sizes(samples: int | None) -> list[int]:
    """The published sample sizes, or (equal n) the same sizes with the last grown so they sum to `samples`."""
    if samples is None:
        return list(VLLM_V1_SIZES)
    head = list(VLLM_V1_SIZES[:-1])
    return [*head, max(VLLM_V1_SIZES[-2] + 1, samples - sum(head))]


def vllm_v1_histogram(impl, *, seed: int, samples: int | None = None) -> PeerVerdict:
    V, k, refs_n = 10, 2, 100
    laws = torch_generator(seed, "laws", "peer-vllm-v1")
    q = torch.softmax(torch.rand(V, generator=laws), -1)
    p = torch.softmax(torch.rand(V, generator=laws), -1)
    refs = torch.softmax(torch.rand(refs_n, V, generator=laws), -1).double()
    drafts, gen = torch_generator(seed, "drafts", "peer-vllm-v1"), torch_generator(seed, "impl", "peer-vllm-v1")
    to_target, to_refs, sizes = [], [], vllm_v1_sizes(samples)
    for n in sizes:
        tokens = draw_rows(impl, p.expand(k + 1, V), q.expand(k, V), n, drafts=drafts, generator=gen,
                           what="vLLM V1 histogram test")
        emitted = tokens[:, :k].ravel()
        emitted = emitted[(emitted >= 0) & (emitted < V)]  # torch.histogram over range (0, V) drops the rest
        hist = torch.from_numpy(np.bincount(emitted, minlength=V) / max(1, len(emitted))).double()
        if len(emitted) == 0:
            hist = torch.full((V,), math.nan, dtype=torch.float64)
        to_target.append(float(torch.linalg.vector_norm(p.double() - hist)))
        to_refs.append(float(torch.linalg.vector_norm(refs - hist)) / refs_n)
    ratio_target = to_target[0] / to_target[-1] if to_target[-1] > 0 else math.inf
    ratio_refs = to_refs[0] / to_refs[-1]
    passed = bool(ratio_target > VLLM_V1_MULTIPLIER * ratio_refs)  # nan (nothing emitted) compares False: fail
    return PeerVerdict("vllm_v1_histogram", passed, sum(sizes), statistic=ratio_target,
                       threshold=VLLM_V1_MULTIPLIER * ratio_refs,
                       detail=f"L2 to p {to_target[0]:.4f} -> {to_target[-1]:.5f}; to references "
                              f"{to_refs[0]:.4f} -> {to_refs[-1]:.5f}")


# ---------------------------------------------------------------------------------------------- vLLM MRV2


def chisq_merged(observed: np.ndarray, expected: np.ndarray, min_expected: float = MRV2_MIN_EXPECTED):
    """(χ², df) with cells of expected count < min_expected merged into one, kept if its expected is ≥ it."""
    small = expected < min_expected
    obs, exp = observed[~small], expected[~small]
    if expected[small].sum() >= min_expected:
        obs, exp = np.append(obs, observed[small].sum()), np.append(exp, expected[small].sum())
    return float(((obs - exp) ** 2 / exp).sum()), len(obs) - 1


def vllm_mrv2_chisq(impl, *, seed: int, samples: int | None = None) -> PeerVerdict:
    V = MRV2_VOCAB
    trials = 10 * V if samples is None else max(1, samples // len(MRV2_PARAMS))
    worst, total, notes, passed = 0.0, 0, [], True
    for K, T in MRV2_PARAMS:
        laws = torch_generator(seed, "laws", "peer-mrv2", K, str(T))
        p = torch.softmax(torch.randn(V, generator=laws) / T, -1)
        q = torch.softmax(torch.randn(V, generator=laws) / T, -1)
        tokens = draw_rows(impl, p.expand(K + 1, V), q.expand(K, V), trials,
                           drafts=torch_generator(seed, "drafts", "peer-mrv2", K, str(T)),
                           generator=torch_generator(seed, "impl", "peer-mrv2", K, str(T)), what="vLLM MRV2 χ² test")
        total += trials
        emitted = _emitted(tokens)
        for pos in range(K + 1):
            sampled = tokens[emitted >= pos + 1, pos]
            if sampled.size and (sampled.min() < 0 or sampled.max() >= V):  # scatter_add_ would fault: a failure
                passed = False
                notes.append(f"K={K} T={T} pos {pos}: token id out of range")
                continue
            chi2, df = chisq_merged(np.bincount(sampled, minlength=V).astype(float), p.double().numpy() * len(sampled))
            if df < 1:  # the published test returns (nothing to evaluate)
                continue
            threshold = df + 10 * math.sqrt(2 * df)
            worst = max(worst, chi2 / threshold)
            if not chi2 < threshold:
                passed = False
                notes.append(f"K={K} T={T} pos {pos}: χ² {chi2:.0f} ≥ {threshold:.0f} (df {df})")
    return PeerVerdict("vllm_mrv2_chisq", passed, total, statistic=worst, threshold=1.0,
                       detail="; ".join(notes[:3]) or "every position below df + 10√(2df)")


# ---------------------------------------------------------------------------------------------- TRT-LLM


def _top_support(w: torch.Tensor, keep: int) -> torch.Tensor:
    """w with all but its `keep` largest entries set to 0, normalised."""
    w = w.clone()
    w[torch.topk(w, k=len(w) - keep, largest=False).indices] = 0.0
    return w / w.sum()


def kl_to_histogram(p: np.ndarray, tokens: np.ndarray) -> float:
    """KL(p ‖ h) of the empirical law h of `tokens` over [0, V) (scipy.stats.entropy: both normalised; ids outside
    [0, V) fall outside the histogram's bins); inf where h misses a token of p, nan if h is empty."""
    from scipy.stats import entropy

    V = len(p)
    inside = tokens[(tokens >= 0) & (tokens < V)]
    if inside.size == 0:
        return math.nan
    return float(entropy(p, np.bincount(inside, minlength=V).astype(float)))


def trtllm_kl(impl, *, seed: int, samples: int | None = None) -> PeerVerdict:
    V, rows = TRT_VOCAB, samples or TRT_ROWS
    laws = torch_generator(seed, "laws", "peer-trtllm")
    q = _top_support(torch.rand(V, generator=laws), TRT_NONZERO)
    p = torch.rand(2, V, generator=laws)
    p = torch.stack([_top_support(p[0], TRT_NONZERO), p[1] / p[1].sum()])
    tokens = draw_rows(impl, p, q[None], rows, drafts=torch_generator(seed, "drafts", "peer-trtllm"),
                       generator=torch_generator(seed, "impl", "peer-trtllm"), what="TRT-LLM KL test")
    direct = torch.multinomial(p[0].double(), rows, replacement=True,
                               generator=torch_generator(seed, "probe", "peer-trtllm")).numpy()
    p0 = p[0].double().numpy()
    kl_spec, kl_direct = kl_to_histogram(p0, tokens[:, 0]), kl_to_histogram(p0, direct)
    gap = abs(kl_spec - kl_direct)
    passed = bool(gap < TRT_TOLERANCE)  # inf or nan: fail, as the published assert does
    return PeerVerdict("trtllm_kl", passed, rows, statistic=gap, threshold=TRT_TOLERANCE,
                       detail=f"KL(p‖spec) {kl_spec:.5f}, KL(p‖direct) {kl_direct:.5f}")


SAMPLER_TESTS = [
    PeerTest("vllm_v1_histogram", "vLLM V1", "sampler",
             "vllm-project/vllm tests/v1/sample/test_rejection_sampler.py::"
             "test_rejection_sampling_approximates_target_distribution", sum(VLLM_V1_SIZES), vllm_v1_histogram,
             "V = 10, k = 2; L2 distance to p shrinks > 20× faster than to 100 random laws (n = 10 … 100,000)"),
    PeerTest("vllm_mrv2_chisq", "vLLM MRV2", "sampler",
             "vllm-project/vllm PR #38496 tests/v1/spec_decode/test_probabilistic_rejection_sampler_utils.py::"
             "test_stochastic_rejection_sample", len(MRV2_PARAMS) * 10 * MRV2_VOCAB, vllm_mrv2_chisq,
             "V = 4,096, 40,960 trials × 4 (K, T); χ² per position < df + 10√(2df)"),
    PeerTest("trtllm_kl", "TRT-LLM", "sampler",
             "NVIDIA/TensorRT-LLM tests/unittest/_torch/speculative/test_torch_rejection_sampling.py::"
             "test_get_rejected_indices", TRT_ROWS, trtllm_kl,
             "V = 500 (100 non-zero), 50,000 draws, one position; |KL(p‖spec) − KL(p‖direct)| < 0.01"),
]
