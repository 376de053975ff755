"""Results on disk (shared/CONTRACT.md §3): provenance for every record, atomic writes.

Every record carries seed(s), git commit, package versions, device, dtype and UTC time.
Writes go to a temporary file in the same folder and are renamed into place, so an interrupted
run never leaves a half-written file and results already written are never lost.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

_PACKAGES = ("specdec", "torch", "transformers", "scipy", "numpy", "pandas", "accelerate", "gguf")


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """Commit of the working tree ('+dirty' if it has uncommitted changes), or 'unknown'."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
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
    return {"seed": seed, "git_commit": git_commit(), "versions": versions(), "device": device_name(device),
            "dtype": str(dtype).removeprefix("torch."), "utc_time": utc_now()}


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


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure atomically as PNG."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return atomic_write_bytes(path, buf.getvalue())
