"""Calling an implementation under test: its exceptions become verdicts, not crashes.

Whatever a user's implementation raises (or however long it hangs) says something about the
implementation, not about the run: the CLI reports an `ImplementationError` as a FAIL verdict with
exit code 1 (docs/EXIT_CODES.md), with the exception text and the innermost frame of the user's own
code (file:line), so a bug report can start from there. Problems of the run itself stay
`HarnessError` (exit 2).
"""

from __future__ import annotations

import functools
import inspect
import os
import sysconfig
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

from harness.errors import HarnessError

_HARNESS_ROOT = Path(__file__).resolve().parent.parent  # frames in here are the harness's, not the user's


class ImplementationError(Exception):
    """The implementation raised, hung or returned something that is not an output: judged not lossless.

    Deliberately not a HarnessError: that one means "the run could not be done" (exit 2)."""


class MalformedOutput(ImplementationError):
    """The implementation returned a value of the wrong kind (None, a list, ...) where tokens were due."""


class ImplementationTimeout(ImplementationError):
    """One call of the implementation took longer than the run's --timeout."""


def _library_roots() -> list[Path]:
    """Folders of installed packages and the standard library: frames there are not the user's code."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return [Path(r).resolve() for r in roots]


def _under(path: Path, roots) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _impl_roots(impl: Callable) -> list[Path]:
    """The folder of the implementation's own module (unwrapping harness wrappers)."""
    fn = inspect.unwrap(impl)
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        source = None
    return [Path(source).resolve().parent] if source else []


def user_frame(exc: BaseException, impl: Callable | None = None) -> str | None:
    """'file:line in function' of the innermost frame of the user's own code in exc's traceback.

    Preference: a frame in the implementation's own folder, else any frame outside the harness,
    the standard library and installed packages, else the innermost frame outside the harness."""
    frames = traceback.extract_tb(exc.__traceback__)
    resolved = [(f, Path(f.filename).resolve()) for f in frames if not f.filename.startswith("<")]
    own = _impl_roots(impl) if impl is not None else []
    libraries = _library_roots()
    tiers = [
        [f for f, p in resolved if own and _under(p, own) and not _under(p, [_HARNESS_ROOT])],
        [f for f, p in resolved if not _under(p, [_HARNESS_ROOT]) and not _under(p, libraries)],
        [f for f, p in resolved if not _under(p, [_HARNESS_ROOT])],
    ]
    for tier in tiers:
        if tier:
            f = tier[-1]
            return f"{_short(f.filename)}:{f.lineno} in {f.name}"
    return None


def _short(filename: str) -> str:
    """Relative to the current directory when inside it (what a user can paste into an editor)."""
    try:
        return os.path.relpath(filename) if Path(filename).resolve().is_relative_to(Path.cwd()) else filename
    except ValueError:  # another drive on Windows
        return filename


def describe(exc: BaseException, impl: Callable | None = None, what: str = "") -> str:
    """'RuntimeError during WHAT: text (at file:line in fn)': one line, never an empty message."""
    text = " ".join(str(exc).split())[:500] or "(no message)"  # one line, whatever the exception holds
    where = user_frame(exc, impl)
    return (f"{type(exc).__name__}" + (f" during {what}" if what else "") + f": {text}"
            + (f" (at {where})" if where else ""))


def call_impl(impl: Callable, *args, what: str, **kwargs):
    """impl(*args, **kwargs); anything it raises becomes an ImplementationError naming `what` and where."""
    try:
        return impl(*args, **kwargs)
    except (HarnessError, ImplementationError):
        raise
    except Exception as exc:  # a user implementation may raise anything: report it in one line
        raise ImplementationError(f"the implementation raised {describe(exc, impl, what)}") from exc


def with_timeout(fn: Callable, seconds: float | None) -> Callable:
    """fn, but a call that runs longer than `seconds` raises ImplementationTimeout.

    A worker thread runs each call (signal.alarm would only work in the main thread and not on
    Windows). Python cannot stop a thread: a hung call keeps running in the background as a daemon
    thread; the run ends anyway, and the process exits without waiting for it."""
    if seconds is None:
        return fn

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        box: dict = {}

        def work():
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed back to the calling thread below
                box["error"] = exc

        worker = threading.Thread(target=work, name="specdec-impl-call", daemon=True)
        worker.start()
        worker.join(seconds)
        if worker.is_alive():
            raise ImplementationTimeout(f"the implementation timed out: one call took longer than --timeout "
                                        f"{seconds:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    return timed
