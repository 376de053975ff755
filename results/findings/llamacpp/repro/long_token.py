"""llama-cpp-python 0.3.36 drops every token longer than 32 bytes from its text.

`llama_cpp._internals.LlamaModel.detokenize` renders each token into a 32-byte buffer; for a longer token
`llama_token_to_piece` returns minus the size it needs, and `bytes(buffer[:n])` with that negative n is empty.
Every completion text, and every logprobs piece, of `Llama` and of its server goes through it.
Run in the engines venv: `.nox/engines/bin/python results/findings/llamacpp/repro/long_token.py`.
"""

import ctypes

import llama_cpp

from harness.models.smollm2 import gguf_path

llama = llama_cpp.Llama(model_path=str(gguf_path()), vocab_only=True, verbose=False)
model = llama._model


def piece(token: int, size: int = 256) -> bytes:
    buf = ctypes.create_string_buffer(size)
    n = llama_cpp.llama_token_to_piece(model.vocab, token, buf, size, 0, False)
    return bytes(buf[:n])


long = [t for t in range(llama.n_vocab()) if len(piece(t)) > 32]
print(f"llama-cpp-python {llama_cpp.__version__}: {len(long)} of {llama.n_vocab()} SmolLM2 tokens are longer than 32 bytes")
for t in long[:3]:
    print(f"  token {t}: llama.cpp's piece {piece(t)!r} ({len(piece(t))} bytes); Llama.detokenize gives {llama.detokenize([t])!r}")
text = llama.tokenize(b"x = 1\n" + b"-" * 64 + b"\ny = 2", add_bos=False)
print(f"tokenize('x = 1\\n' + '-' * 64 + '\\ny = 2') = {text}")
print(f"detokenize of those ids: {llama.detokenize(text)!r}")
