"""Can the soak see a leak? End-of-pass RSS over repeated passes, and its slope per pass.

RSS sampled *during* a pass follows the batch (conversations grow, agents finish at different
times): pass-to-pass noise there is ±15 %, so a 5 %-per-pass leak hides in it. What a leak
changes is what is left once a pass's work is done: so after each pass (and its settle time)
the soak collects garbage, hands freed heap pages back to the OS (glibc's ``malloc_trim``, where
there is one) and reads RSS once. Over ≥ :data:`MIN_PASSES` passes of the same tasks the
least-squares slope of that series, per pass and as a share of the first pass's value, is the
leak figure; above the threshold the soak's exit status is 1.

Pure arithmetic (:func:`slope`, :func:`judge`) apart from the measurement
(:func:`settled_rss_mb`) and the pass loop (:func:`run_passes`), which any workload can drive.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

__all__ = ["DEFAULT_MAX_LEAK_PCT", "MIN_PASSES", "judge", "rss_mb", "run_passes", "settled_rss_mb", "slope"]

MIN_PASSES = 4
DEFAULT_MAX_LEAK_PCT = 2.0  # per pass, of the first pass's end RSS: a 5 % leak is well above it

T = TypeVar("T")


def rss_mb() -> float:
    """This process's resident set size in MB (Linux ``/proc``; 0.0 where there is none)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _trim() -> None:
    """Give freed heap pages back to the OS, so RSS counts what is still live (glibc only)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        trim = getattr(libc, "malloc_trim", None)
        if trim is not None:
            trim(0)
    except OSError:
        pass


def settled_rss_mb() -> float:
    """RSS once the garbage is collected and freed pages are returned: what the pass left."""
    gc.collect()
    _trim()
    return rss_mb()


def slope(series: Sequence[float]) -> float:
    """Least-squares slope of ``series`` against its index (units per pass); 0.0 below 2 points."""
    n = len(series)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(series) / n
    var = sum((x - mx) ** 2 for x in range(n))
    return sum((x - mx) * (y - my) for x, y in enumerate(series)) / var


def judge(
    end_mb: Sequence[float], max_pct: float = DEFAULT_MAX_LEAK_PCT, min_passes: int = MIN_PASSES
) -> dict[str, Any]:
    """The verdict on an end-of-pass RSS series: its slope (MB and % of the first value per
    pass) and ``leak`` True / False, or None when there are too few passes to tell."""
    per_pass = slope(end_mb)
    pct = 100.0 * per_pass / end_mb[0] if end_mb and end_mb[0] > 0 else 0.0
    enough = len(end_mb) >= min_passes
    return {
        "rss_end_of_pass_mb": [round(v, 1) for v in end_mb],
        "rss_slope_mb_per_pass": round(per_pass, 2),
        "rss_slope_pct_per_pass": round(pct, 2),
        "rss_max_slope_pct_per_pass": max_pct,
        "rss_leak": (pct > max_pct) if enough else None,
        "rss_leak_note": None if enough else f"{len(end_mb)} passes: a slope needs at least {min_passes}",
    }


async def run_passes(
    passes: int, one_pass: Callable[[int], Awaitable[T]], measure: Callable[[], float] = settled_rss_mb
) -> tuple[list[T], list[float]]:
    """Run ``one_pass(k)`` for k = 0 … passes − 1, measuring after each one's work is done (its
    result kept, the rest collected): the pass results and the end-of-pass series."""
    results: list[T] = []
    series: list[float] = []
    for k in range(passes):
        results.append(await one_pass(k))
        series.append(measure())
    return results, series
