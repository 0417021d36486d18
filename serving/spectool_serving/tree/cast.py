"""CAST: cost-aware tree shaping from measured forward costs f(B, c, n).

* ``max_valid_index`` is Algorithm 1: index j (0 = take nothing) is *valid* when its
  utility gain over every smaller index pays at least ``C`` per unit of extra cost,
  ``(u[j] - u[i]) >= C * (c[j] - c[i])`` for all ``i < j``; the largest valid j is chosen.
* ``CostTable`` holds f(B, c, n) per batch size and context bucket; ``select`` picks the
  bucket for a context length, and costs are made non-decreasing in n by a suffix minimum
  (a forward of n tokens can always be padded to any cheaper larger width).
* ``CastShaper`` prunes breadth per level (Algorithm 1 with C1), stops depth when the
  expected gain of the next level, corrected by a FIFO of observed/predicted gain ratios for
  that level, is below C2 per unit cost, and reranks how many nodes to verify (C3).
"""

from __future__ import annotations

import bisect
import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .tree import DraftTree

__all__ = ["CastShaper", "CostTable", "max_valid_index", "measure_cost_table"]


def max_valid_index(u: np.ndarray, c: np.ndarray, threshold: float) -> int:
    """Algorithm 1. u, c: [n+1] utility and cost of taking the first j items (u[0] = c[0] ref).

    Returns the largest j with ``u[j] - u[i] >= threshold * (c[j] - c[i])`` for all i < j.
    """
    u = np.asarray(u, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    if u.shape != c.shape or u.ndim != 1:
        raise ValueError("u and c must be 1-D arrays of the same length")
    du = u[:, None] - u[None, :]  # [j, i]
    dc = c[:, None] - c[None, :]
    ok = (du >= threshold * dc - 1e-12) | ~np.tri(len(u), k=-1, dtype=bool)  # only i < j count
    valid = np.flatnonzero(ok.all(axis=1))
    return int(valid.max())


@dataclass
class CostTable:
    """Forward seconds ``f(B, c, n)``; ``buckets`` are context lengths, ``ns`` token counts."""

    batches: list[int]
    buckets: list[int]
    ns: list[int]
    seconds: dict[str, list[float]]  # key f"{B}/{bucket}" -> [len(ns)]

    def select(self, ctx: int) -> int:
        """The select operator: the smallest bucket covering ``ctx`` (else the largest)."""
        i = bisect.bisect_left(self.buckets, ctx)
        return self.buckets[min(i, len(self.buckets) - 1)]

    def curve(self, batch: int, ctx: int) -> np.ndarray:
        """Cost for n = 1..max(ns) tokens, interpolated, suffix-min monotone. Shape [max_n]."""
        b = min(self.batches, key=lambda x: (abs(x - batch), x))
        raw = np.asarray(self.seconds[f"{b}/{self.select(ctx)}"], dtype=np.float64)
        grid = np.arange(1, max(self.ns) + 1)
        f = np.interp(grid, self.ns, raw)
        return np.minimum.accumulate(f[::-1])[::-1]

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str) -> CostTable:
        return cls(**json.loads(text))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json())


def measure_cost_table(model: Any, batches: list[int], buckets: list[int], ns: list[int],
                       reps: int = 3) -> CostTable:
    """Time forwards of n new tokens over a random-KV cache of each bucket's length.

    The cached keys/values are random: attention cost does not depend on their values, so no
    prefill is needed. Each figure is the median of ``reps`` runs after one warm-up.
    """
    import time

    import torch
    from transformers import DynamicCache

    cfg = model.config
    heads = getattr(cfg, "num_key_value_heads", cfg.num_attention_heads)
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    seconds: dict[str, list[float]] = {}
    for bsz in batches:
        for ctx in buckets:
            row = []
            for n in ns:
                times = []
                for rep in range(reps + 1):
                    cache = DynamicCache()
                    for layer in range(cfg.num_hidden_layers):
                        kv = torch.randn(bsz, heads, ctx, dim, dtype=model.dtype)
                        cache.update(kv, kv.clone(), layer)
                    tokens = torch.randint(0, cfg.vocab_size, (bsz, n))
                    pos = torch.arange(ctx, ctx + n).expand(bsz, n)
                    mask = torch.zeros(bsz, 1, n, ctx + n, dtype=model.dtype)
                    mask[:, :, :, ctx:] = torch.triu(torch.full((n, n), torch.finfo(
                        model.dtype).min, dtype=model.dtype), diagonal=1)
                    t0 = time.perf_counter()
                    with torch.no_grad():
                        model(input_ids=tokens, attention_mask=mask, position_ids=pos,
                              past_key_values=cache, use_cache=True)
                    if rep:
                        times.append(time.perf_counter() - t0)
                row.append(float(np.median(times)))
            seconds[f"{bsz}/{ctx}"] = row
    return CostTable(list(batches), list(buckets), list(ns), seconds)


@dataclass
class CastShaper:
    """Breadth (C1), depth (C2) and verification-size (C3) decisions from a cost table.

    Costs are normalised by one plain decoding step f(B, c, 1), so the thresholds read as
    "expected accepted tokens per extra decoding-step of cost".
    """

    table: CostTable
    c1: float = 0.3
    c2: float = 0.3
    c3: float = 0.5
    k: int = 10
    fifo: int = 16
    batch: int = 1
    ctx: int = 256
    _curve: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    _ratios: dict[int, deque] = field(default_factory=dict, repr=False)

    def begin_step(self, batch: int, ctx: int) -> None:
        self.batch, self.ctx = batch, ctx
        self._curve = None

    def _cost(self, n: int) -> float:
        """Normalised cost of verifying n tokens (f(n) / f(1)); beyond the table: linear."""
        if self._curve is None:
            curve = self.table.curve(self.batch, self.ctx)
            self._curve = curve / curve[0]
        cv = self._curve
        if n <= len(cv):
            return float(cv[max(n, 1) - 1])
        slope = (cv[-1] - cv[len(cv) // 2]) / max(1, len(cv) - 1 - len(cv) // 2)
        return float(cv[-1] + slope * (n - len(cv)))

    def gain_ratio(self, depth: int) -> float:
        buf = self._ratios.setdefault(depth, deque([1.0], maxlen=self.fifo))
        return float(np.mean(buf))

    def level_keep(self, depth: int, cum_sorted: np.ndarray, size: int) -> int:
        cand = np.asarray(cum_sorted[: self.k], dtype=np.float64)
        if len(cand) == 0:
            return 0
        u = np.concatenate([[0.0], np.cumsum(cand)]) * self.gain_ratio(depth)
        c = np.asarray([self._cost(size + j) - self._cost(size) for j in range(len(cand) + 1)])
        j = max_valid_index(u, c, self.c1)
        extra = max(c[j], 1e-3 * j)  # a free level is worth any gain
        if j == 0 or u[j] < self.c2 * extra:  # depth pruning: the level does not pay
            return 0
        return j

    def final_size(self, cum_sorted: np.ndarray) -> int:
        gains = np.asarray(cum_sorted[1:], dtype=np.float64)  # the root is always verified
        u = np.concatenate([[0.0], np.cumsum(gains)])
        c = np.asarray([self._cost(1 + j) - self._cost(1) for j in range(len(gains) + 1)])
        return 1 + max_valid_index(u, c, self.c3)

    def observe(self, tree: DraftTree, path: list[int]) -> None:
        """Push observed/predicted gain per level into that level's FIFO."""
        depth = tree.depths()
        predicted: dict[int, float] = {}
        for i in range(1, len(tree)):
            predicted[depth[i]] = predicted.get(depth[i], 0.0) + tree.conf[i]
        reached = len(path) - 1
        for d, pred in predicted.items():
            if pred > 1e-6:
                ratio = (1.0 if reached >= d else 0.0) / pred
                self._ratios.setdefault(d, deque([1.0], maxlen=self.fifo)).append(min(ratio, 4.0))
