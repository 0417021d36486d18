"""Online acceptance rates of draft edges, per source, so tree scores are probabilities.

A draft node's score multiplies its parent's score by the probability that its edge is
accepted given the parent was. Raw signals differ in kind: a store edge carries the
verifier's probability from the last time its parent token was scored (in another context),
a context edge only the length of the suffix match that proposed it. Each *kind* of edge
(its ``source`` tag: ``s<bin>`` store, ``n<bin>`` next-next, ``c<b>`` first token of a
context match whose length falls in bucket b, ``cc<b>`` a continuation of such a match) gets
a Beta-smoothed hit rate learned from every tested edge — one whose parent was accepted — so
scores stay calibrated per prompt.
With calibrated scores, the sum over the verified nodes is the expected number of accepted
drafts, which is what the cost-aware shaping trades against measured forward cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["BINS", "AcceptanceRates", "conf_bin"]

BINS = 8  # raw-confidence bins for store and next-next edges


def conf_bin(raw: np.ndarray | float) -> np.ndarray:
    """Bin index in [0, BINS) of raw confidences in [0, 1]."""
    return np.minimum((np.asarray(raw) * BINS).astype(np.int64), BINS - 1)


def _default_priors() -> dict[str, float]:
    mid = (np.arange(BINS) + 0.5) / BINS
    priors = {f"s{b}": float(p) for b, p in enumerate(mid)}
    priors |= {f"n{b}": float(p) * 0.5 for b, p in enumerate(mid)}  # two steps away: weaker
    # context edges by match-length bucket (see .suffix): first token, then continuation
    first = {1: 0.3, 2: 0.5, 3: 0.6, 4: 0.7, 6: 0.75, 8: 0.8, 12: 0.85, 16: 0.85, 24: 0.9, 32: 0.9}
    priors |= {f"c{b}": p for b, p in first.items()}
    priors |= {f"cc{b}": (0.8 if b <= 4 else 0.9) for b in first}
    return priors


@dataclass
class AcceptanceRates:
    """Beta-smoothed hit rates per source tag (prior weight ``weight`` pseudo-tests)."""

    weight: float = 4.0
    decay: float = 0.99  # forget old evidence slowly: text changes character within a prompt
    priors: dict[str, float] = field(default_factory=_default_priors)
    hits: dict[str, float] = field(default_factory=dict)
    tests: dict[str, float] = field(default_factory=dict)

    def rate(self, source: str) -> float:
        prior = self.priors.get(source, 0.3)
        n = self.tests.get(source, 0.0)
        return (self.hits.get(source, 0.0) + self.weight * prior) / (n + self.weight)

    def table(self, kind: str) -> np.ndarray:
        """Rates of ``kind`` ('s' or 'n') per bin, shape [BINS], for vectorised scoring."""
        return np.asarray([self.rate(f"{kind}{b}") for b in range(BINS)], dtype=np.float32)

    def observe(self, sources: list[str], parents: list[int], path: list[int]) -> None:
        """Record every tested edge of a verified tree (node 0 is the root)."""
        on_path = set(path)
        for key in self.tests:
            self.tests[key] *= self.decay
            self.hits[key] *= self.decay
        for i in range(1, len(sources)):
            if parents[i] in on_path:
                key = sources[i]
                self.tests[key] = self.tests.get(key, 0.0) + 1.0
                self.hits[key] = self.hits.get(key, 0.0) + (1.0 if i in on_path else 0.0)
