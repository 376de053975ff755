"""Checks every command runs BEFORE any work starts: outputs writable, device and dtype usable, flags sane.

A run that would compute for an hour and then fail to write its report, or crash on a device this
torch build cannot use, must say so in its first second, as a HarnessError (exit 2, one line), never
as a traceback after the work (docs/EXIT_CODES.md).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from harness.errors import HarnessError

DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")


def _probe_write(folder: Path, flag: str, shown: str) -> None:
    """Create `folder` if needed and write + delete a temporary file in it."""
    blocker = next((a for a in (folder, *folder.parents) if a.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise HarnessError(f"{flag} {shown}: {blocker} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".specdec-probe-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise HarnessError(f"{flag} {shown}: cannot write there ({exc.strerror or exc})") from None


def output_file(path: str | os.PathLike | None, flag: str) -> Path | None:
    """A file the run will write (e.g. --json): not a folder, and its folder creatable and writable."""
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        raise HarnessError(f"{flag} {path}: is a folder; give a file name (e.g. {p / 'report.json'})")
    _probe_write(p.parent, flag, str(path))
    return p


def output_dir(path: str | os.PathLike | None, flag: str) -> Path | None:
    """A folder the run will write into (e.g. --out): not a file, creatable and writable."""
    if path is None:
        return None
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise HarnessError(f"{flag} {path}: is a file, not a folder")
    _probe_write(p, flag, str(path))
    return p


def device(name: str | None) -> str:
    """A device string torch understands AND can use here (cuda on a CPU-only build is refused)."""
    import torch

    name = name or "cpu"
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise HarnessError(f"--device {name!r} is not a device; use one of {', '.join(DEVICE_TYPES)} "
                           "(optionally with an index, e.g. cuda:0)") from None
    if dev.type == "cpu":
        return name
    if dev.type == "cuda":
        if not torch.backends.cuda.is_built():
            raise HarnessError(f"--device {name}: this torch build ({torch.__version__}) has no CUDA support; "
                               "install a CUDA build of torch or use --device cpu")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise HarnessError(f"--device {name}: no CUDA device is visible here; use --device cpu")
        if dev.index is not None and dev.index >= count:
            raise HarnessError(f"--device {name}: only {count} CUDA device(s) here (cuda:0..cuda:{count - 1})")
        return name
    backend = getattr(torch, dev.type, None) if dev.type != "mps" else torch.backends.mps
    if backend is None or not getattr(backend, "is_available", lambda: False)():
        raise HarnessError(f"--device {name}: device type {dev.type!r} is not available here; use --device cpu")
    return name


def dtype(name, device_name: str = "cpu"):
    """The torch dtype `name` means (None: the command's default), refused if the device cannot compute in it."""
    import torch

    from harness.models.hf_pair import resolve_dtype

    resolved = resolve_dtype(name, device=device_name)
    if not isinstance(resolved, torch.dtype):
        return resolved  # "auto": the checkpoint decides
    try:  # one tiny matmul: what every model step needs
        a = torch.ones(2, 2, dtype=resolved, device=device_name)
        (a @ a).sum().item()
    except (RuntimeError, TypeError) as exc:
        raise HarnessError(f"--dtype {name}: {str(resolved).removeprefix('torch.')} does not compute on "
                           f"--device {device_name} here ({str(exc).splitlines()[0]})") from None
    return resolved


def at_least(value, flag: str, minimum: float = 1):
    """value >= minimum (None passes: 'not given')."""
    if value is not None and not value >= minimum:
        raise HarnessError(f"{flag} must be >= {minimum:g}, got {value}")
    return value


def threads(n: int | None) -> int | None:
    """--threads N: torch's CPU threads for this process (None: leave torch's own setting)."""
    at_least(n, "--threads")
    if n is not None:
        import torch

        torch.set_num_threads(n)
    return n


def pair(name: str, target: str | None = None, draft: str | None = None) -> str:
    """A registered pair that is available here, or both checkpoints (before minutes of loading models)."""
    if target or draft:
        if not (target and draft):
            raise HarnessError("give both --target and --draft (or neither, and --pair)")
        return name
    from harness.errors import UnknownNameError
    from harness.pairs import pair_specs

    specs = pair_specs()
    if name not in specs:
        raise UnknownNameError("pair", name, list(specs))
    ok, why = specs[name].available()
    if not ok:
        raise HarnessError(f"pair {name!r} is not available here: {why}")
    return name


def common(args) -> None:
    """The checks every command shares, for the flags it has: --json, --out, --device, --threads."""
    if getattr(args, "json", None) is not None:
        output_file(args.json, "--json")
    if getattr(args, "out", None) is not None:
        output_dir(args.out, "--out")
    if getattr(args, "device", None) is not None:
        device(args.device)
    threads(getattr(args, "threads", None))
