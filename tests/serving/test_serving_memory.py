"""The engine's heap trimming: rate-limited, and really returning freed pages on glibc."""

from __future__ import annotations

import sys

import pytest

from spectool_serving.memory import HeapTrimmer


def test_trims_at_most_once_per_period():
    now = [0.0]
    heap = HeapTrimmer(every_s=5.0, clock=lambda: now[0])
    if not heap.available:
        pytest.skip("no malloc_trim in this C library (not glibc)")
    assert not heap.maybe_trim()  # not yet time
    now[0] = 5.0
    assert heap.maybe_trim() and not heap.maybe_trim()
    now[0] = 9.9
    assert not heap.maybe_trim()
    now[0] = 10.0
    assert heap.maybe_trim() and heap.trims == 2
    assert not HeapTrimmer(every_s=0).available  # 0 turns it off


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_freed_small_blocks_go_back_to_the_os():
    """Many small blocks freed leave the arena's pages resident until trimmed: the pattern of a
    KV cache rebuilt at ever-changing sizes."""
    now = [0.0]
    heap = HeapTrimmer(every_s=1.0, clock=lambda: now[0])
    if not heap.available:
        pytest.skip("no malloc_trim in this C library (not glibc)")

    def rss_mb() -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024

    import torch

    # ~400 MB of CPU tensors of changing sizes under the mmap threshold, all freed but the last
    blocks = [torch.ones(8000 + (i % 50) * 100) for i in range(10_000)]
    keep = blocks[-1]
    del blocks
    freed = rss_mb()
    now[0] = 1.0
    assert heap.maybe_trim()
    assert rss_mb() < freed - 100, (freed, rss_mb())
    assert keep.sum() > 0  # the heap top stays in use: free() alone could not shrink it
