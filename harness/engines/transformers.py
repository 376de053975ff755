"""transformers in process: assisted generation (a draft model) and prompt lookup (n-gram), speculation off as its
plain generate() (harness.adapters.hf: a fixed γ, sampling parameters always explicit)."""

from __future__ import annotations

from importlib import metadata

from harness.engines.base import Capabilities, Probe, register_engine
from harness.engines.inprocess import PairEngine


def _plain(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    from harness.adapters.hf import hf_generate

    return hf_generate(target, input_ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                       top_p=top_p, seed=seed)


@register_engine("transformers")
class Transformers(PairEngine):
    capabilities = Capabilities(methods=("draft", "ngram"), returns=("ids", "text", "logprobs"), n=False,
                                notes="assisted generation and prompt lookup; rows one at a time; a seed per row")

    @classmethod
    def installed(cls) -> Probe:
        try:
            return Probe(True, "", metadata.version("transformers"))
        except metadata.PackageNotFoundError:
            return Probe(False, "transformers is not installed in this Python")

    def decoders(self):
        from harness.adapters.hf import assisted_generate, prompt_lookup_generate

        return {"draft": assisted_generate, "ngram": prompt_lookup_generate, None: _plain}
