"""llama.cpp's own `llama-server` as a served engine: built here, started and stopped here, spoken to natively.

- **Build** (`build_llama_server`): the `llama-server` cmake target only, from the llama.cpp sources
  vendored in the `llama-cpp-python` sdist (downloaded with pip from the package index), under
  `$SPECDEC_CACHE/llama-server/<version>` (cached: a second call finds the binary). `$SPECDEC_LLAMA_SERVER`
  names a prebuilt binary instead.
- **Models**: the target as an F32 GGUF written from the dequantized weights of the embedded SmolLM2
  Q4_1 GGUF (`write_f32_gguf`, the `gguf` package: the same tensors and metadata, every tensor
  dequantized to float32, i.e. the very weights `harness.models.smollm2` serves to transformers); the
  embedded Q4_1 GGUF itself is the draft (`--spec-draft-model`).
- **Adapter** (`LlamaServerClient`): llama-server's OpenAI route returns no token ids, so the engine
  check's vLLM-style requests (`/v1/completions` with n, seed, return_token_ids, logprobs) are sent to
  its native `/completion` (`return_tokens`, `n_probs`; one request per continuation, seed + i) and
  its answers are put back into the vLLM shape ("token_id:N" names). `/tokenize` is translated too.

llama-server's sampler chain (its defaults, `llama-server --help`): top-k 40 → top-p 0.95 → min-p
0.05 → temperature, i.e. truncation on the temperature-1 law and temperature after it, for every
parameter the request leaves unset. That is the processing convention `llama_cpp`
(specdec_ref.processing.ORDERS): a convention, not a bug, when it is declared.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

from harness.errors import HarnessError
from harness.models.gguf_f32 import smollm2_models, write_f32_gguf  # noqa: F401  (the served models)
from harness.served.client import CONSTRAINT_FIELDS, EngineClient
from harness.served.process import served
from harness.served.text import TOKEN_ID_PREFIX

LLAMA_CPP_PYTHON = "0.3.36"  # the sdist whose vendored llama.cpp is built
BINARY_ENV = "SPECDEC_LLAMA_SERVER"
MODEL_ALIAS = "smollm2"
DRAFT_TOKENS = 4  # --spec-draft-n-max
# What a request must send for llama-server to sample the plain law: its defaults truncate.
NO_TRUNCATION = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0}


# ------------------------------------------------------------------------------------------ build

def cache_root() -> Path:
    root = os.environ.get("SPECDEC_CACHE")
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "specdec") / "llama-server" / LLAMA_CPP_PYTHON


BUILD_DIR = "build-avx2"  # a portable build (see build_llama_server); older native builds are not reused


def find_binary() -> Path | None:
    """$SPECDEC_LLAMA_SERVER, else the cached build; None when neither exists."""
    given = os.environ.get(BINARY_ENV)
    if given:
        path = Path(given).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise HarnessError(f"${BINARY_ENV}={given} is not an executable file")
        return path
    path = cache_root() / "llama.cpp" / BUILD_DIR / "bin" / "llama-server"
    return path if path.is_file() else None


def build_llama_server(jobs: int = 2, log=None) -> Path:
    """The llama-server binary: found, or built from the sdist's vendored llama.cpp (nice 19; minutes)."""
    found = find_binary()
    if found is not None:
        return found
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise HarnessError(f"building llama-server needs {tool} on PATH (or set ${BINARY_ENV} to a prebuilt binary)")
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    sdist = root / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    run = dict(check=True, stdout=log, stderr=subprocess.STDOUT if log else None)
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(root)], **run)
    source = root / "llama.cpp"
    if not (source / "CMakeLists.txt").exists():
        tmp = root / "extract"
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        vendored = next(tmp.glob("llama_cpp_python-*/vendor/llama.cpp"))
        shutil.rmtree(source, ignore_errors=True)
        vendored.rename(source)
        shutil.rmtree(tmp, ignore_errors=True)
    nice = ["nice", "-n", "19"] if shutil.which("nice") else []
    # Not GGML_NATIVE: on a virtual machine whose CPU reports AMX / AVX-512 that the hypervisor does not let it
    # run, a native build dies with SIGILL in its quantized kernels (seen with the Q4_1 draft). ggml's
    # non-native x86 set (SSE4.2, AVX, AVX2, BMI2, FMA, F16C) runs wherever AVX2 does.
    subprocess.run(nice + ["cmake", "-S", str(source), "-B", str(source / BUILD_DIR), "-DLLAMA_CURL=OFF",
                           "-DGGML_NATIVE=OFF", "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF",
                           "-DLLAMA_BUILD_EXAMPLES=OFF"], **run)
    subprocess.run(nice + ["cmake", "--build", str(source / BUILD_DIR), "--target", "llama-server", "-j", str(jobs)],
                   **run)
    found = find_binary()
    if found is None:
        raise HarnessError(f"the llama-server build finished without {source / BUILD_DIR / 'bin/llama-server'}")
    return found


def version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    return " ".join((out.stdout + out.stderr).split())[:200]


# ------------------------------------------------------------------------------------------ models

# ------------------------------------------------------------------------------------------ serving

def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_command(binary: Path, model: Path, port: int, *, draft: Path | None, draft_tokens: int = DRAFT_TOKENS,
                   host: str = "127.0.0.1", threads: int = 1, ctx: int = 2048, slots: int = 1) -> list[str]:
    cmd = [str(binary), "-m", str(model), "--alias", MODEL_ALIAS, "--host", host, "--port", str(port),
           "-t", str(threads), "-tb", str(threads), "-c", str(ctx), "-np", str(slots), "--metrics",
           "--no-webui", "-lv", "1"]
    if draft is not None:
        cmd += ["--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-n-max", str(draft_tokens), "--spec-draft-n-min", "0",
                "-td", str(threads), "-tbd", str(threads)]
    return cmd


@contextlib.contextmanager
def llama_server(*, draft: bool, draft_tokens: int = DRAFT_TOKENS, host: str = "127.0.0.1", slots: int = 1,
                 startup_timeout_s: float = 300.0, log_path: str | None = None, ctx: int = 2048) -> Iterator[str]:
    """llama-server on SmolLM2 (F32 target; Q4_1 draft when `draft`) on a free localhost port; always stopped."""
    binary = find_binary()
    if binary is None:
        raise HarnessError(f"no llama-server binary: run `nox -s engines` (it builds one) or set ${BINARY_ENV}")
    target, draft_model = smollm2_models()
    port = _free_port(host)
    cmd = server_command(binary, target, port, draft=draft_model if draft else None, draft_tokens=draft_tokens,
                         host=host, slots=slots, ctx=ctx)
    with served(cmd, f"http://{host}:{port}", "/health", "llama-server", startup_timeout_s=startup_timeout_s,
                log_path=log_path, describe_command=True) as url:
        yield url


# ------------------------------------------------------------------------------------------ the adapter

class LlamaServerClient(EngineClient):
    """The engine check's vLLM-style requests over llama-server's native API (see the module docstring).

    `processed`: ask for post-sampling probabilities (`post_sampling_probs`: the law after its sampler
    chain) instead of the raw softmax of the logits. `max_cmpl`: continuations per native request
    (llama-server's `n_cmpl`: one prompt prefill, the continuations decoded in one batch; its child
    completions get seed + 1, seed + 2, ..., so the seeds are those of one request per continuation).
    It must not exceed the server's slots (`-np`): llama-server defers a request whose children find
    no free slot, forever. Default: the server's `total_slots` (GET /props), asked once."""

    sends_constraints = False  # harness.served.structured.ConstrainedLlamaServerClient translates them

    def __init__(self, endpoint: str, *, processed: bool = False, max_cmpl: int | None = None, **options):
        super().__init__(endpoint, **options)
        if max_cmpl is not None and max_cmpl < 1:
            raise HarnessError(f"max_cmpl must be >= 1, got {max_cmpl}")
        self.processed, self._max_cmpl = processed, max_cmpl
        self._options, self._api = options, None

    def api_route(self) -> EngineClient:
        """The API check's client (harness.served.llama_api): stop, stream, n and seed sent natively, one native
        request per request, unlike this client's continuations split over seeds."""
        if self._api is None:
            from harness.served.llama_api import LlamaServerApiClient

            self._api = LlamaServerApiClient(self.base, **self._options)
        return self._api

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
        super().close()

    @property
    def max_cmpl(self) -> int:
        if self._max_cmpl is None:
            from harness.served.client import RequestRefused

            try:
                props = super().request("GET", "/props")
            except RequestRefused:  # no /props (an older server, a stand-in): one continuation per request
                props = None
            slots = props.get("total_slots") if isinstance(props, dict) else None
            self._max_cmpl = int(slots) if isinstance(slots, int) and slots >= 1 else 1
        return self._max_cmpl

    def request(self, method: str, path: str, payload: dict | None = None, *, parse_json: bool = True):
        if method != "POST" or path not in ("/tokenize", "/v1/completions"):
            return super().request(method, path, payload, parse_json=parse_json)
        payload = payload or {}
        if path == "/tokenize":
            reply = super().request("POST", "/tokenize", {"content": payload.get("prompt", ""),
                                                          "add_special": bool(payload.get("add_special_tokens"))})
            return {"tokens": reply.get("tokens", [])}
        constrained = [k for k in CONSTRAINT_FIELDS if payload.get(k) is not None]
        if constrained and not self.sends_constraints:  # never drop a constraint silently
            raise HarnessError(f"llama-server: this client does not translate {', '.join(constrained)} into llama.cpp's "
                               "grammar; run constrained checks with `specdec campaign structured --parts llama-server`")
        if payload.get("prompt_logprobs") is not None or payload.get("echo"):
            from harness.served.client import RequestRefused

            raise RequestRefused(400, "llama-server scores no prompts (no prompt_logprobs)")
        n, seed = int(payload.get("n", 1)), payload.get("seed")
        if seed is None:  # unseeded: one request each (the children's seeds would be llama-server's choice)
            choices = [c for i in range(n) for c in self._batch(payload, None, i, 1)]
        else:
            choices = [c for i in range(0, n, self.max_cmpl)
                       for c in self._batch(payload, int(seed) + i, i, min(self.max_cmpl, n - i))]
        return {"object": "text_completion", "model": payload.get("model"), "choices": choices,
                "usage": {"completion_tokens": sum(len(c["token_ids"]) for c in choices)}}

    def _batch(self, payload: dict, seed: int | None, first: int, count: int) -> list[dict]:
        """Continuations first .. first + count - 1 (seeds seed, seed + 1, ...), in one native request."""
        body = {"prompt": payload["prompt"], "n_predict": int(payload.get("max_tokens", 16)),
                "temperature": payload.get("temperature", 1.0), "return_tokens": True, "cache_prompt": False,
                "stream": False}
        for key in ("top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "presence_penalty",
                    "frequency_penalty", "logit_bias"):
            if payload.get(key) is not None:
                body[key] = payload[key]
        if seed is not None:
            body["seed"] = seed
        if count > 1:
            body["n_cmpl"] = count
        k = payload.get("logprobs")
        if k is not None and k is not False:
            body["n_probs"] = max(1, int(k))
            body["post_sampling_probs"] = self.processed
        reply = super().request("POST", "/completion", body)
        replies = reply if isinstance(reply, list) else [reply]
        if len(replies) != count:
            raise HarnessError(f"{self.base}/completion returned {len(replies)} completions for n_cmpl {count}")
        replies = sorted(replies, key=lambda r: int(r.get("index", 0)))
        return [self._choice(r, first + j, "n_probs" in body) for j, r in enumerate(replies)]

    def _choice(self, reply: dict, index: int, with_probs: bool) -> dict:
        tokens = reply.get("tokens") if isinstance(reply, dict) else None
        if not isinstance(tokens, list):
            raise HarnessError(f"{self.base}/completion returned no `tokens` (return_tokens): not a llama-server?")
        stop = reply.get("stop_type")
        choice = {"index": index, "text": reply.get("content", ""), "token_ids": [int(t) for t in tokens],
                  "finish_reason": "stop" if stop in ("eos", "word") else "length", "logprobs": None}
        if with_probs:
            choice["logprobs"] = _legacy(reply.get("completion_probabilities") or [], self.processed)
        return choice


def _legacy(entries: list[dict], processed: bool) -> dict:
    """llama-server's completion_probabilities as the OpenAI completions `logprobs` object with id names."""
    import math

    def lp(e):
        if processed:
            p = float(e.get("prob", 0.0))
            return math.log(p) if p > 0 else -9999.0
        return float(e.get("logprob"))

    tops = "top_probs" if processed else "top_logprobs"
    return {"tokens": [f"{TOKEN_ID_PREFIX}{e['id']}" for e in entries],
            "token_logprobs": [lp(e) for e in entries],
            "top_logprobs": [{f"{TOKEN_ID_PREFIX}{t['id']}": lp(t) for t in e.get(tops) or []} for e in entries]}


def client_for(api: str, endpoint: str, **options) -> EngineClient:
    """The client of an engine API: "openai" (vLLM, specdec serve, ...), "llama-server" (native) or
    "llama-cpp-python" (its OpenAI route, ids from text pieces)."""
    if api == "openai":
        return EngineClient(endpoint, **options)
    if api in ("llama-server", "llama-server-processed"):
        return LlamaServerClient(endpoint, processed=api.endswith("processed"), **options)
    if api == "llama-cpp-python":  # its OpenAI route with ids recovered from text pieces (harness.served.pieces)
        from harness.served.pieces import PiecesClient

        return PiecesClient(endpoint, **options)
    raise HarnessError(f"--api must be openai, llama-server, llama-server-processed or llama-cpp-python, got {api!r}")
