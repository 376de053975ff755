"""A fake in-process engine for the engine-interface tests: the reference generator (or a planted mutant) on a
registered pair, behind harness.engines.base as any adapter is. Registered as "fake-engine" on import."""

from __future__ import annotations

from harness.engines.base import Capabilities, Probe, register_engine
from harness.engines.inprocess import PairEngine


@register_engine("fake-engine")
class FakeEngine(PairEngine):
    """Method "draft": specdec_ref.adapters:generate, or the generation mutant Setup.options["mutant"] names."""

    capabilities = Capabilities(methods=("draft",), n=True, notes="tests only: the reference on a toy pair")

    @classmethod
    def installed(cls) -> Probe:
        return Probe(True, "", "fake 1.0")

    def decoders(self):
        from harness.adapters.control import target_only_generate
        from specdec_ref.adapters import generate

        mutant = self.setup.options.get("mutant")
        if mutant:
            from harness.mutants.registry import get

            generate = get(mutant).fn
        return {"draft": generate, None: target_only_generate}
