"""llama.cpp as a served engine: `python -m llama_cpp.server` (llama-cpp-python) started and stopped here.

It serves the embedded SmolLM2-135M GGUF (harness.models.smollm2) on 127.0.0.1, with prompt-lookup
speculative decoding on (`--draft_model prompt-lookup-decoding`, llama-cpp-python's
`LlamaPromptLookupDecoding`) or off, and `logits_all` so that it can return logprobs. Its verifier
is sample-and-match: `Llama.generate` evaluates the context plus the drafted tokens in one pass,
samples every position with the request's sampler, and keeps drafts while the sampled token equals
the draft — lossless in law for any drafter (acceptance Σ p·q instead of Σ min(p, q)).

What this server returns (see `specdec probe`): no token ids (text pieces only, in `logprobs.tokens`),
raw logprobs (before temperature), prompt scoring by `echo` + `logprobs`, `seed` honoured, n = 1 per
request. Its sampler order is top-k → typical → top-p → min-p → temperature (top-p before temperature,
unlike transformers), and its defaults are top-k 40, top-p 0.95, min-p 0.05: requests here always set
all of them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import sys
from collections.abc import Iterator

from harness.errors import MissingOptionalPackage
from harness.served.process import served

PROMPT_LOOKUP_TOKENS = 10  # drafted tokens per step (llama-cpp-python's default for prompt lookup)
MODEL_ALIAS = "smollm2"


def llamacpp_available() -> tuple[bool, str]:
    if importlib.util.find_spec("llama_cpp") is None:
        return False, "needs llama-cpp-python with its server extras: `nox -s engines` builds it"
    from harness.models.smollm2 import gguf_path, smollm2_available

    ok, why = smollm2_available()
    if not ok or gguf_path() is None:
        return False, why or "the SmolLM2 GGUF file is missing"
    return True, ""


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_command(port: int, *, speculative: bool, host: str = "127.0.0.1", seed: int = 0,
                   model: str | None = None) -> list[str]:
    """`model`: a GGUF path (default: the embedded Q4_1 SmolLM2; the F32 one of harness.models.gguf_f32 has the
    weights the local target scores with)."""
    from harness.models.smollm2 import gguf_path

    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model or gguf_path()), "--model_alias", MODEL_ALIAS,
           "--host", host, "--port", str(port), "--logits_all", "True", "--n_threads", "1", "--n_threads_batch", "1",
           "--n_ctx", "1024", "--seed", str(seed), "--verbose", "False"]
    if speculative:
        cmd += ["--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", str(PROMPT_LOOKUP_TOKENS)]
    return cmd


@contextlib.contextmanager
def llamacpp_server(*, speculative: bool, host: str = "127.0.0.1", startup_timeout_s: float = 120.0,
                    log_path: str | None = None, model: str | None = None) -> Iterator[str]:
    """A llama.cpp server subprocess on a free localhost port; yields its base URL; always stopped."""
    ok, why = llamacpp_available()
    if not ok:
        raise MissingOptionalPackage("llama-cpp-python", "the llama.cpp engine", why)
    port = _free_port(host)
    with served(server_command(port, speculative=speculative, host=host, model=model), f"http://{host}:{port}", "/v1/models",
                "the llama.cpp server", startup_timeout_s=startup_timeout_s, log_path=log_path) as url:
        yield url


# ------------------------------------------------------------------------------------------ the finding

# Repetitive, so that prompt lookup finds n-gram matches and drafts on most steps.
