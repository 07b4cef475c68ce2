"""glibc's malloc, told to give large blocks back: what `herald run` does before it starts.

glibc serves a block above its mmap threshold (128 KiB at start) with a fresh mapping that a
free() unmaps, but it raises that threshold to the size of every such block freed, up to
32 MiB. After one login's scrypt (16 MiB, core/passwords.py) frees its buffer, the next
scrypt's 16 MiB come from the heap and stay in RSS when freed: some 17 MB of a broker whose
10,000 idle connections take 90. Setting the threshold fixes it (and turns the dynamic raise
off), so scrypt buffers and message bodies over `MMAP_THRESHOLD` go back to the OS when freed.

An embedding program keeps its own allocator settings: only the CLI calls this. A user's
`MALLOC_MMAP_THRESHOLD_` (glibc's environment tunable) wins; other C libraries are left as
they are.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

MMAP_THRESHOLD = 1024 * 1024
"""Blocks of this size and more get their own mapping (bodies below it stay on the heap)."""

_M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>


def fix_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Set glibc's mmap threshold to `size`; False where that is not glibc or a user set it."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl has no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, size))
