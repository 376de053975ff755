"""The planted bug of llama-cpp-python's speculative decoder (harness.adapters.llamacpp), for the llamacpp campaign.

`no_verify_generate` runs the adapter's loop on llama-cpp-python's own eval / sample with prompt-lookup drafts and
keeps every draft unverified (as if the target had accepted it): the generation-level check must FAIL it on the
plan that passes `harness.adapters.llamacpp:prompt_lookup_generate` (the llamacpp campaign of suites/). Not in
the zoo's catalogue (it needs llama-cpp-python and the SmolLM2 GGUF); named on command lines as
`harness.mutants.llamacpp:no_verify_generate`.
"""

from __future__ import annotations

import torch

from harness.adapters.llamacpp import generate_rows, sampling_arguments


def no_verify_generate(target, draft, input_ids: torch.Tensor, *, max_new_tokens: int, gamma: int,
                       temperature: float, top_k: int | None, top_p: float | None, seed: int,
                       min_p: float | None = None) -> torch.Tensor:
    """Planted bug: prompt-lookup drafts emitted without verification (every draft kept, as if accepted), the
    target sampled only where no draft is proposed. Built on llama-cpp-python's own eval / sample."""
    del draft
    sampling = sampling_arguments(temperature, top_k, top_p, min_p)

    def tokens_of(llm, prompt: list[int], row_seed: int):
        # imported here, after generate_rows loaded the model: without llama-cpp-python that is exit 2, not this line
        import numpy as np
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        lookup = LlamaPromptLookupDecoding(num_pred_tokens=gamma)
        llm.set_seed(row_seed)
        llm.reset()
        llm._sampler = llm._init_sampler(**{k: v for k, v in sampling.items()})  # noqa: SLF001 - its own chain
        try:
            llm.eval(prompt)
            context = list(prompt)
            while True:
                token = llm.sample(idx=llm.n_tokens - 1)
                yield token
                context.append(token)
                kept = [int(t) for t in lookup(np.asarray(context, dtype=np.intc))]
                yield from kept  # the bug: drafts emitted as if the target had sampled them
                context += kept
                llm.eval([token, *kept])
        finally:
            llm._sampler = None  # noqa: SLF001

    return generate_rows(target, input_ids, max_new_tokens, seed, tokens_of)
