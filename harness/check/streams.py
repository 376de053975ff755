"""Independent random streams of one run, all spawned from the run seed.

The harness draws drafts, builds laws, seeds torch's global RNG for the implementation, hands the
implementation a generator and runs probes. If any two of these were seeded with the same number,
an implementation could receive the very uniforms its inputs were drawn with (torch's global RNG and
a `torch.Generator` seeded alike produce the same stream), and the check would create the dependence
it tests for. Every stream is therefore a child of `numpy.random.SeedSequence(seed)` keyed by its
purpose: different purposes never share a state, the same seed and purpose always give the same one.
"""

from __future__ import annotations

import zlib

import numpy as np

PURPOSES = ("drafts", "impl", "global", "laws", "probe", "pit", "estimate")  # append only: indices seed streams


def stream_seed(seed: int, purpose: str, *key: int | str) -> int:
    """A 63-bit seed for `purpose` (one of PURPOSES), optionally refined by `key` (a case name, a round)."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown random stream {purpose!r}; one of {', '.join(PURPOSES)}")
    words = [PURPOSES.index(purpose) + 1] + [zlib.crc32(k.encode()) if isinstance(k, str) else int(k) for k in key]
    state = np.random.SeedSequence(int(seed), spawn_key=tuple(words)).generate_state(2, np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def torch_generator(seed: int, purpose: str, *key):
    """A CPU `torch.Generator` on the stream `purpose` of the run seed."""
    import torch

    return torch.Generator().manual_seed(stream_seed(seed, purpose, *key))


def seed_global(seed: int, *key) -> None:
    """Seed torch's global RNG (what an implementation that ignores its generator draws from) on its own stream."""
    import torch

    torch.manual_seed(stream_seed(seed, "global", *key))


def numpy_rng(seed: int, purpose: str, *key) -> np.random.Generator:
    return np.random.default_rng(stream_seed(seed, purpose, *key))
