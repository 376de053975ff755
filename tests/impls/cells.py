"""Cell functions for the executor tests: importable by dask worker processes (plain module functions)."""

from __future__ import annotations

import os
import time
import zlib
from pathlib import Path


def seeded_cell(seed: int, log_dir: str | None = None, sleep_s: float = 0.0) -> dict:
    """A deterministic result for `seed` (a torch draw); logs every start as LOG_DIR/<seed>.<pid>.<ns>."""
    import torch

    if log_dir is not None:
        Path(log_dir, f"{seed}.{os.getpid()}.{time.time_ns()}").touch()
    time.sleep(sleep_s)
    g = torch.Generator().manual_seed(seed)
    return {"seed": seed, "draw": torch.rand(3, generator=g, dtype=torch.float64).tolist(), "pid": os.getpid()}


def starts(log_dir: str) -> dict[int, list[int]]:
    """seed -> the pids of every execution that started, in start order."""
    out: dict[int, list[tuple[int, int]]] = {}
    for path in Path(log_dir).iterdir():
        seed, pid, ns = (int(v) for v in path.name.split("."))
        out.setdefault(seed, []).append((ns, pid))
    return {seed: [pid for _, pid in sorted(v)] for seed, v in out.items()}


def logged_run_task(task, gate: float, log_dir: str):
    """suites.campaigns.zoo.run_task, logging each start under LOG_DIR (one empty file per execution, named by
    the crc32 of the task's journal key) and returning the worker's pid with the result."""
    from suites.campaigns.zoo import run_task, task_key

    Path(log_dir, f"{zlib.crc32(task_key(task, gate).encode())}.{os.getpid()}.{time.time_ns()}").touch()
    return {**run_task(task, gate), "pid": os.getpid()}
