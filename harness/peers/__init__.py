"""The tests engines ship for their own speculative decoding, as verdict functions (issue 58).

Each is written from its published source — the statistic, the sample size, the threshold — and cited there;
no code is copied. Each takes the implementation `specdec verify` takes:

- sampler level (docs/CONTRACT.md §1a `verify(target_probs, draft_probs, draft_tokens, generator)`):
  `harness.peers.sampler` — vLLM V1's histogram-distance test, vLLM Model Runner V2's chi-squared test,
  TRT-LLM's KL test;
- generation level (§1b `generate(target, draft, input_ids, *, ...)`): `harness.peers.greedy` — the greedy
  end-to-end comparisons of vLLM, SGLang, transformers and llama.cpp.

A peer test returns a `PeerVerdict` (passed or not, its statistic, its threshold, the samples it drew). It has
no stated false-alarm rate and no stated power: that is what the side-by-side campaign measures
(suites/campaigns/peers.py). `harness.peers.oracle` gives the Neyman–Pearson bound against a known alternative.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class PeerVerdict:
    """What one run of a peer test concluded."""

    test: str  # PeerTest.name
    passed: bool
    samples: int  # draws of the implementation (sampler rows, or generated tokens at the generation level)
    statistic: float | None = None  # the test's statistic (None: an equality test)
    threshold: float | None = None
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class PeerTest:
    """One engine's test: where it is published, at which level, and its own sample size."""

    name: str
    engine: str
    level: str  # "sampler" | "generation"
    source: str  # file / PR it is written from
    own_samples: int  # rows (sampler) or prompts (generation) of the published test
    run: Callable[..., PeerVerdict]
    description: str


def peer_tests(level: str | None = None) -> list[PeerTest]:
    """Every peer test, sampler level first; `level` filters."""
    from harness.peers.greedy import GREEDY_TESTS
    from harness.peers.sampler import SAMPLER_TESTS

    tests = [*SAMPLER_TESTS, *GREEDY_TESTS]
    return [t for t in tests if level is None or t.level == level]


def get_peer_test(name: str) -> PeerTest:
    from harness.errors import UnknownNameError

    tests = {t.name: t for t in peer_tests()}
    if name not in tests:
        raise UnknownNameError("peer test", name, list(tests))
    return tests[name]
