"""Planted logprob bugs: the logprobs `specdec serve` reports (harness.served.serve.LogprobsWriter) with one part wrong.

The tokens stay the served implementation's; only the logprobs reported for them (and their top k) are wrong, each
as the bug it names in `models` (docs/SERVED-CHECKS.md, "Logprobs honesty under speculation"). They are served
with the hidden `specdec serve --logprobs-mutant NAME` (or `serving(..., logprobs_mutant=NAME)`), and `specdec
verify --level engine --engine-checks logprobs` must FAIL each one while the token check passes on the same
server (tests/served/test_served_logprobs.py). They are not generate() implementations, so they are not in the
`specdec mutants` catalogue (harness.mutants.registry): like the planted API bugs (harness.mutants.api), they are
a property of the server around the implementation.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from harness.errors import UnknownNameError
from harness.served.serve import LogprobsWriter


class DraftLogprobs(LogprobsWriter):
    """The draft model's logprobs (teacher-forced in float64 over the same tokens) instead of the target's."""

    name = "draft"
    models = "the draft model's logprobs instead of the target's (those of the model that proposed the token)"

    def laws(self, backend, seqs, starts, sampling):
        meta = backend.pair.meta
        if "_draft64" not in meta:  # cached on the pair, as the target's float64 copy is
            meta["_draft64"] = copy.deepcopy(backend.pair.draft).to(torch.float64).eval()
        return backend.log_laws(seqs, starts, sampling, model=meta["_draft64"])


class ZeroLogprobs(LogprobsWriter):
    """Every logprob 0.0, of every returned and every listed token."""

    name = "zeros"
    models = "llama.cpp #27972 (every logprob 0.0 under speculation)"

    def laws(self, backend, seqs, starts, sampling):
        return [np.zeros((len(s) - start, backend.pair.vocab_size)) for s, start in zip(seqs, starts, strict=True)]


class ShiftedLogprobs(LogprobsWriter):
    """The law of position j + 1 reported for token j (an off-by-one in the position index; the last position
    keeps its own)."""

    name = "shifted"
    models = "an off-by-one in the position index (the neighbouring position's law)"

    def laws(self, backend, seqs, starts, sampling):
        laws = backend.log_laws([s + [0] for s in seqs], starts, sampling)
        return [law[1:] for law in laws]


class NonfiniteLogprobs(LogprobsWriter):
    """The target's laws, written with NaN as the logprob of every token after the first (unmasked): the server's
    JSON encoder refuses the reply."""

    name = "nonfinite"
    models = "vLLM 0.32 with n-gram speculation and processed logprobs (the reply cannot be written as JSON: " \
             "HTTP 400 'Out of range float values are not JSON compliant')"

    def written(self, entries):
        for entry in entries[1:]:
            entry["logprob"] = float("nan")
        return entries


LOGPROBS_MUTANTS = {cls.name: cls for cls in (DraftLogprobs, ZeroLogprobs, ShiftedLogprobs, NonfiniteLogprobs)}


def get(name: str) -> type[LogprobsWriter]:
    """The planted logprob bug `name`; UnknownNameError with close matches otherwise."""
    try:
        return LOGPROBS_MUTANTS[name]
    except KeyError:
        raise UnknownNameError("logprobs mutant", name, list(LOGPROBS_MUTANTS)) from None
