"""The C heap of a long run: large blocks go back to the system when they are freed.

glibc serves a freed block of several MB from its heap the next time (its mmap threshold rises to the largest
block freed, up to 32 MB), and a long run that allocates many of them at changing sizes fragments that heap: a zoo
cell drawing `floored_uniform_race` on the tail case (10 rows × 131,072 float64 per call) grew by ~150 MB/s to
23 GB and was killed by the kernel, and the tail campaign's long-lived processes reached 8 GB after 15 runs. With
the threshold fixed at 1 MiB (which also stops it from rising), every block of 1 MiB or more is its own mapping and
is returned when freed: the same cell stayed at ~350 MB. Elsewhere (not glibc) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD_BYTES = 1 << 20


def return_large_blocks() -> bool:
    """Fix glibc's mmap threshold at 1 MiB for this process (and the processes it forks); True if it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):  # another C library (musl has no mallopt)
        return False
