"""pytest-benchmark micro-benchmarks of the reference's hot paths (regression guards, not speedup claims).

    pytest benchmarks --benchmark-autosave                                   # record a baseline
    pytest benchmarks --benchmark-compare --benchmark-compare-fail=median:25%  # fail on a >25% slowdown

- the verification step (Leviathan Algorithm 1) at V = 32,000, γ = 4, B = 64: with and without input
  validation (`verify_step` validates, the generation loop calls `verify_from_uniforms(validate=False)`);
  rows/s is written to each benchmark's extra_info;
- the kernel beside the memory-bandwidth floor (one read of p and q, `p.sum() + q.sum()`), timed
  interleaved round by round in one benchmark so machine load hits both alike; the ratio (median
  and best round) is in extra_info["x_floor_median"] / ["x_floor_min"] (target: validated ≤ 3×);
- one whole speculative step on a toy pair (α = 1, so max_new_tokens = γ + 1 is exactly one step:
  γ draft passes, one target pass, the acceptance rule, bookkeeping).
"""

import statistics
import time

import pytest
import torch

from specdec_ref.verify import verify_from_uniforms, verify_step

V, GAMMA, B = 32_000, 4, 64


@pytest.fixture(scope="module")
def verify_inputs():
    g = torch.Generator().manual_seed(0)
    p = torch.randn(B, GAMMA + 1, V, generator=g).softmax(-1)  # [B, γ+1, V]
    q = (p[:, :GAMMA] + 0.3 * torch.rand(B, GAMMA, V, generator=g)).softmax(-1)  # [B, γ, V]
    x = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, GAMMA)  # [B, γ], x ~ q
    u = torch.rand(B, GAMMA + 1, generator=g, dtype=torch.float64)  # [B, γ+1]
    return p, q, x, u


def _rows_per_s(benchmark) -> None:
    benchmark.extra_info["rows_per_s"] = B / benchmark.stats.stats.median
    benchmark.extra_info["shape"] = f"B={B}, gamma={GAMMA}, V={V}"


def test_verify_step_validated(benchmark, verify_inputs):
    p, q, x, _ = verify_inputs
    out = benchmark(lambda: verify_step(p, q, x, torch.Generator().manual_seed(1)))
    assert out.tokens.shape == (B, GAMMA + 1)
    _rows_per_s(benchmark)


def test_verify_step_unvalidated(benchmark, verify_inputs):
    p, q, x, u = verify_inputs
    out = benchmark(lambda: verify_from_uniforms(p, q, x, u[:, :GAMMA], u[:, GAMMA], validate=False))
    assert out.tokens.shape == (B, GAMMA + 1)
    _rows_per_s(benchmark)


def test_bandwidth_floor(benchmark, verify_inputs):
    p, q, _, _ = verify_inputs
    total = benchmark(lambda: p.sum() + q.sum())
    assert abs(float(total) - B * (2 * GAMMA + 1)) < 1e-2 * B  # every row sums to 1
    _rows_per_s(benchmark)


@pytest.mark.parametrize("validated", [True, False], ids=["validated", "unvalidated"])
def test_verify_vs_floor(benchmark, verify_inputs, validated):
    """Kernel rounds (timed by pytest-benchmark) with one floor read timed just before each."""
    p, q, x, u = verify_inputs
    floor_s = []

    def time_floor():
        start = time.perf_counter()
        (p.sum() + q.sum()).item()
        floor_s.append(time.perf_counter() - start)

    if validated:
        def kernel():
            return verify_step(p, q, x, torch.Generator().manual_seed(1))
    else:
        def kernel():
            return verify_from_uniforms(p, q, x, u[:, :GAMMA], u[:, GAMMA], validate=False)
    out = benchmark.pedantic(kernel, setup=time_floor, rounds=40, warmup_rounds=2)
    assert out.tokens.shape == (B, GAMMA + 1)
    floor_s = floor_s[-40:]  # the warm-up rounds call setup too
    benchmark.extra_info["floor_median_s"] = statistics.median(floor_s)
    benchmark.extra_info["x_floor_median"] = benchmark.stats.stats.median / statistics.median(floor_s)
    benchmark.extra_info["x_floor_min"] = benchmark.stats.stats.min / min(floor_s)
    _rows_per_s(benchmark)


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only add contention
    yield
    torch.set_num_threads(before)


def test_one_speculative_step_toy(benchmark, one_thread):
    from harness.pairs import get_pair
    from specdec_ref.generate import speculative_generate

    pair = get_pair("toy-same")
    ids = torch.tensor([pair.prompts[0]])  # [1, T]

    def step():
        return speculative_generate(pair.target, pair.draft, ids, max_new_tokens=GAMMA + 1, gamma=GAMMA, seed=0)

    result = benchmark(step)
    assert result.stats.target_calls == 1 and result.stats.draft_calls == GAMMA
    benchmark.extra_info["steps_per_s"] = 1 / benchmark.stats.stats.median
