"""Giving freed heap memory back to the OS on a long-lived CPU engine.

The batched KV cache is rebuilt with ``torch.cat`` as rows join, leave and grow, so the engine
frees and allocates buffers of ever-changing sizes. glibc's malloc keeps freed memory in its
arenas (and raises its mmap threshold after large frees, moving later buffers onto the heap),
so a server's RSS climbs to a new high-water mark whenever the batch's shape does, long after
the memory was freed: the soak measured that as growth from pass to pass. ``malloc_trim(0)``
returns the free pages; it walks the heap (a few ms), so the engine calls it at most every
``every_s`` seconds between steps. Elsewhere than glibc (macOS, musl) it is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Callable

__all__ = ["HeapTrimmer"]


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


class HeapTrimmer:
    """``maybe_trim()`` between engine steps: trims at most once per ``every_s`` seconds."""

    def __init__(self, every_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self._trim = _malloc_trim() if every_s > 0 else None
        self._next = clock() + every_s
        #: How many times the heap was trimmed (for counters and tests).
        self.trims = 0

    @property
    def available(self) -> bool:
        return self._trim is not None

    def maybe_trim(self) -> bool:
        """Trim if it is time; True when it did."""
        if self._trim is None or self._clock() < self._next:
            return False
        self._trim(0)
        self.trims += 1
        self._next = self._clock() + self.every_s
        return True
