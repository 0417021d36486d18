"""Confidence intervals for time saved: a paired percentile bootstrap over tasks (pure math).

Time saved over a set of tasks is 100·(Σ base − Σ spec)/Σ base: the share of the baseline's
wall time the arm saved, with each task weighted by its length (a long task saves more
seconds). The bootstrap resamples tasks with replacement, pairs kept together, and takes the
2.5th and 97.5th percentiles of that statistic over the resamples.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["bootstrap_saved_ci", "saved_pct"]


def saved_pct(base: Sequence[float], spec: Sequence[float]) -> float:
    """100·(Σ base − Σ spec)/Σ base (0 when the baseline took no time)."""
    total = sum(base)
    return 100.0 * (total - sum(spec)) / total if total > 0 else 0.0


def bootstrap_saved_ci(
    base: Sequence[float],
    spec: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = 4000,
    seed: int = 0,
) -> tuple[float, float]:
    """The ``level`` percentile-bootstrap interval of :func:`saved_pct` over paired tasks."""
    if len(base) != len(spec):
        raise ValueError(f"paired samples differ in length: {len(base)} vs {len(spec)}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    n = len(base)
    if n == 0:
        return (0.0, 0.0)
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        stats.append(saved_pct([base[i] for i in idx], [spec[i] for i in idx]))
    stats.sort()
    tail = (1 - level) / 2
    lo = stats[min(resamples - 1, int(tail * resamples))]
    hi = stats[min(resamples - 1, int((1 - tail) * resamples))]
    return (lo, hi)
