"""llama-cpp-python's own speculative decoder behind the §1b contract: `Llama.generate` with prompt-lookup drafts.

`prompt_lookup_generate` runs `llama_cpp.Llama.generate` (llama-cpp-python, the code its server runs) with
`draft_model=LlamaPromptLookupDecoding(num_pred_tokens=γ)`: each step evaluates the last token plus the γ
drafted tokens in one batch, samples every position with the request's sampler chain and keeps drafts while
the sampled token equals the draft (sample-and-match). Checked at the generation level this is a one-sample
test against the local target's exact law (ground truth a), far stronger than the two-sample comparison of
its servers (suites/campaigns/llamacpp.py).

The model: the GGUF in `$SPECDEC_LLAMACPP_MODEL`, else the embedded SmolLM2-135M-Instruct with every tensor
dequantized to float32 (the weights `--pair smollm2` loads in transformers, so the law is the same up to
kernel numerics; the Q4_1 file itself would test llama.cpp's quantized kernels, not speculation). Its
vocabulary must be the target's (a usage error otherwise, exit 2). One thread (the machines have two
cores), a context of `N_CTX` tokens, `logits_all` (sampling at drafted positions needs their logits).

Sampling: temperature, top-k, top-p and min-p map onto llama.cpp's chain, which applies temperature *after*
the truncations; unset ones are switched off explicitly (top-k 0, top-p 1, min-p 0, typical 1, repeat
penalty 1), because llama.cpp's own defaults truncate (top-k 40, top-p 0.95, min-p 0.05). So the convention
to declare is `--processing-order top_p_before_temperature` (llama.cpp's order without its default cuts),
not `llama_cpp` (which also applies those defaults: the check then FAILs on tokens outside top-k 40 / min-p
0.05, and its diagnosis names `top_p_before_temperature`). Each row gets its own seed (`Llama.set_seed`), the stream of
llama.cpp's `dist` sampler. Rows stop after an end-of-sequence id of the target (then -1).
Its planted bug (every draft kept unverified, on the same loop) is `harness.mutants.llamacpp:no_verify_generate`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

import torch

from harness.adapters.hf import eos_list
from harness.adapters.loading import pad_rows
from harness.errors import HarnessError, MissingOptionalPackage

N_CTX = 2048
THREADS = 1
MODEL_ENV = "SPECDEC_LLAMACPP_MODEL"


def model_path() -> Path:
    """The GGUF the adapter runs: $SPECDEC_LLAMACPP_MODEL, else the embedded SmolLM2 as float32."""
    if os.environ.get(MODEL_ENV):
        path = Path(os.environ[MODEL_ENV])
        if not path.is_file():
            raise HarnessError(f"${MODEL_ENV} names {path}, which is not a file")
        return path
    from harness.models.gguf_f32 import smollm2_models

    return smollm2_models()[0]


@functools.lru_cache(maxsize=2)
def _llama(path: str):
    """One llama_cpp.Llama per model file for the process (loading is the slow part)."""
    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise MissingOptionalPackage("llama-cpp-python", "the llama-cpp-python adapter",
                                     "nox -s engines (it builds llama-cpp-python==0.3.36)") from exc
    return Llama(model_path=path, n_ctx=N_CTX, n_threads=THREADS, n_threads_batch=THREADS, logits_all=True,
                 verbose=False)


def sampling_arguments(temperature: float, top_k, top_p, min_p) -> dict:
    """Llama.generate's sampling arguments with every unset truncation switched off."""
    return {"temp": float(temperature), "top_k": int(top_k or 0), "top_p": float(1.0 if top_p is None else top_p),
            "min_p": float(min_p or 0.0), "typical_p": 1.0, "repeat_penalty": 1.0, "frequency_penalty": 0.0,
            "presence_penalty": 0.0}


@contextlib.contextmanager
def _drafting(llm, gamma: int):
    """llm with prompt-lookup drafts of γ tokens for the call (the Llama object is shared: restored after)."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    before = llm.draft_model
    llm.draft_model = LlamaPromptLookupDecoding(num_pred_tokens=gamma)
    try:
        yield llm
    finally:
        llm.draft_model = before


def row_seed(seed: int, b: int) -> int:
    """Row b's seed for llama.cpp's `dist` sampler: a uint32 other than 0xFFFFFFFF (LLAMA_DEFAULT_SEED: random)."""
    return (seed * 100_003 + b) % 0xFFFFFFFF


def generate_rows(target, input_ids: torch.Tensor, max_new_tokens: int, seed: int, tokens_of) -> torch.Tensor:
    """tokens_of(prompt ids, row seed) -> an iterator of new ids, per row; cut at max_new_tokens / EOS."""
    llm = _llama(str(model_path()))
    vocab = int(target.get_output_embeddings().weight.shape[0]) if hasattr(target, "get_output_embeddings") else None
    if vocab is not None and llm.n_vocab() != vocab:
        raise HarnessError(f"the llama.cpp model {model_path()} has a vocabulary of {llm.n_vocab()} ids, the target "
                           f"{vocab}: give the GGUF of the target (${MODEL_ENV})")
    eos = set(eos_list(target))
    rows = []
    for b in range(input_ids.shape[0]):
        out: list[int] = []
        with contextlib.closing(tokens_of(llm, input_ids[b].tolist(), row_seed(seed, b))) as stream:
            for token in stream:  # closed on leaving: llama-cpp-python's generator and our draft setting end here
                out.append(int(token))
                if token in eos or len(out) >= max_new_tokens:
                    break
        rows.append(torch.tensor(out, dtype=torch.long))
    return pad_rows(rows)


def prompt_lookup_generate(target, draft, input_ids: torch.Tensor, *, max_new_tokens: int, gamma: int,
                           temperature: float, top_k: int | None, top_p: float | None, seed: int,
                           min_p: float | None = None) -> torch.Tensor:
    """llama-cpp-python's `Llama.generate` with `LlamaPromptLookupDecoding(num_pred_tokens=γ)`; `draft` unused
    (the drafts come from the context). [B, N] new ids, -1 after EOS."""
    del draft
    sampling = sampling_arguments(temperature, top_k, top_p, min_p)

    def tokens_of(llm, prompt: list[int], row_seed: int):
        llm.set_seed(row_seed)
        with _drafting(llm, gamma):
            yield from llm.generate(prompt, **sampling)

    return generate_rows(target, input_ids, max_new_tokens, seed, tokens_of)
