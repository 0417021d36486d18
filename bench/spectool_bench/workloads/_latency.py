"""Injected tool latency: normal distributions, the same draw for the same call in paired runs.

BFCL's tools answer in microseconds (all 1,142 ground-truth calls of multi_turn_base run in
~0.2 s), so, as in the paper, latency is injected. A call's latency is drawn from
N(mean, (cv·mean)²), clipped at 0, with a generator seeded by (seed, task, call key): the
baseline and the speculative run of a pair see identical latencies for identical calls.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from spectool.errors import ConfigError

__all__ = ["LONG_SWEEP", "SHORT_SWEEP", "Latency"]

#: Mean tool latencies (s) of the paper's two sweeps.
SHORT_SWEEP = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
LONG_SWEEP = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)


@dataclass(frozen=True)
class Latency:
    """Normal tool latency: ``mean`` seconds, standard deviation ``cv × mean``."""

    mean: float
    cv: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mean < 0 or self.cv < 0:
            raise ConfigError(f"tool latency mean and cv must be ≥ 0, got {self.mean}, {self.cv}")

    def draw(self, task_id: str, key: str) -> float:
        if self.mean == 0:
            return 0.0
        digest = hashlib.sha256(f"{self.seed}\x00{task_id}\x00{key}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        return max(0.0, rng.gauss(self.mean, self.cv * self.mean))
