"""In-process engines whose decoders are §1b generate() functions over a registered pair (docs/CONTRACT.md §1b).

`PairEngine` loads the Setup's pair and maps one Request onto `decoders()[method]` (method None: speculation off):
the prompt repeated n times as one [n, T] batch, one seed for the call. transformers' adapter and the tests' fake
engine are written this way; an engine with its own runtime (OpenVINO GenAI, ONNX Runtime GenAI) subclasses Engine
directly and maps the Request onto its own API.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.engines.base import Completion, Engine, Request
from harness.errors import HarnessError


class PairEngine(Engine):
    """Subclasses write `decoders() -> {method or None: generate function}`."""

    kind = "in-process"

    def decoders(self) -> dict[str | None, Callable]:
        raise NotImplementedError

    def start(self) -> None:
        from harness.pairs import get_pair

        self.pair = get_pair(self.setup.pair)
        if self.setup.method not in self.decoders():
            raise HarnessError(f"engine {self.name} does not run method {self.setup.method!r}")

    def generate(self, request: Request) -> Completion:
        import torch

        why = self.unsupported(request)
        if why:
            raise HarnessError(f"engine {self.name} cannot honour {why}")
        fn = self.decoders()[self.setup.method]
        ids = torch.tensor([list(request.prompt_ids)] * request.n, dtype=torch.long)
        out = fn(self.pair.target, self.pair.draft, ids, max_new_tokens=request.max_new_tokens,
                 gamma=self.setup.gamma, temperature=request.temperature, top_k=request.top_k,
                 top_p=request.top_p, seed=request.seed)
        return Completion([[int(t) for t in row if t >= 0] for row in out.tolist()])
