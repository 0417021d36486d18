"""CAST: cost-aware tree shaping from measured forward costs f(B, c, n).

* ``max_valid_index`` is Algorithm 1: index j (0 = take nothing) is *valid* when its
  utility gain over every smaller index pays at least ``C`` per unit of extra cost,
  ``(u[j] - u[i]) >= C * (c[j] - c[i])`` for all ``i < j``; the largest valid j is chosen.
* ``CostTable`` holds f(B, c, n) per batch size and context bucket; ``select`` picks the
  bucket for a context length, and costs are made non-decreasing in n by a suffix minimum
  (a forward of n tokens can always be padded to any cheaper larger width).
* ``CastShaper`` prunes breadth per level (Algorithm 1 with C1), stops depth when the
  expected gain of the next level, corrected by a FIFO of observed/predicted gain ratios for
  that level, is below C2 per unit cost, and reranks how many nodes to verify (C3) — per
  row, then once more for the batch (:meth:`CastShaper.batch_width`), since rows share a
  forward's width.
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
        return np.minimum.accumulate(self._raw(batch, ctx)[::-1])[::-1]

    def _raw(self, batch: int, ctx: int) -> np.ndarray:
        b = min(self.batches, key=lambda x: (abs(x - batch), x))
        measured = np.asarray(self.seconds[f"{b}/{self.select(ctx)}"], dtype=np.float64)
        return np.interp(np.arange(1, max(self.ns) + 1), self.ns, measured)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str) -> CostTable:
        return cls(**json.loads(text))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json())


def measure_cost_table(
    model: Any, batches: list[int], buckets: list[int], ns: list[int], reps: int = 3
) -> CostTable:
    """Time tree forwards of n new tokens over a random-KV cache of each bucket's length.

    The forwards go through :class:`.verifier.TreeVerifier` — the engine's runner over its
    batched KV, the path that serves. Cached keys/values are random: attention cost does not
    depend on their values, so no prefill is needed. The n values are interleaved in shuffled
    rounds so that drift on a shared machine spreads over all of them; each figure is the
    median of ``reps`` rounds after a warm-up.
    """
    import random
    import time

    rng = random.Random(0)
    seconds: dict[str, list[float]] = {}
    for bsz in batches:
        for ctx in buckets:
            verifier = _random_verifier(model, bsz, ctx)
            times: dict[int, list[float]] = {n: [] for n in ns}
            for rep in range(reps + 1):
                for n in rng.sample(ns, len(ns)):
                    t0 = time.perf_counter()
                    _timed_forward(verifier, bsz, n, model.config.vocab_size)
                    if rep:
                        times[n].append(time.perf_counter() - t0)
            seconds[f"{bsz}/{ctx}"] = [float(np.median(times[n])) for n in ns]
    return CostTable(list(batches), list(buckets), list(ns), seconds)


def _random_verifier(model: Any, bsz: int, ctx: int) -> Any:
    """A verifier whose ``bsz`` rows hold ``ctx`` random cached slots each."""
    import torch
    from transformers import DynamicCache

    from .verifier import TreeVerifier

    cfg = model.config
    heads = getattr(cfg, "num_key_value_heads", cfg.num_attention_heads)
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    param = next(model.parameters())
    verifier = TreeVerifier(model)
    for row in range(bsz):
        cache = DynamicCache()
        for layer in range(cfg.num_hidden_layers):
            kv = torch.randn(1, heads, ctx, dim, dtype=param.dtype, device=param.device)
            cache.update(kv, kv.clone(), layer)
        verifier.kv.join(row, cache)
    return verifier


def _timed_forward(verifier: Any, bsz: int, n: int, vocab: int) -> None:
    """One forward of a random chain of ``n`` tokens per row; its slots are then dropped."""
    import torch

    from .tree import DraftTree

    trees = []
    for _ in range(bsz):
        tokens = torch.randint(0, vocab, (n,)).tolist()
        trees.append(DraftTree(tokens, list(range(-1, n - 1)), [1.0] * n, ["root"] * n))
    logits = verifier.forward(trees)
    if logits.is_cuda:  # kernels run asynchronously: the timer must wait for them
        torch.cuda.synchronize(logits.device)
    verifier.discard()


@dataclass
class CastShaper:
    """Breadth (C1), depth (C2) and verification-size (C3) decisions from a cost table.

    Costs are normalised by one plain decoding step f(B, c, 1), so the thresholds read as
    "expected accepted tokens per extra decoding-step of cost".
    """

    table: CostTable
    c1: float = 0.3
    c2: float = 0.3
    k: int = 10
    fifo: int = 16
    batch: int = 1
    ctx: int = 256
    overhead: float = 0.0  # per-step cost outside the forward, in decoding steps
    _curve: np.ndarray | None = field(default=None, repr=False)  # this step's; None: to compute
    _unit: float = field(default=1.0, repr=False)  # f(B, c, 1) in seconds
    _ratios: dict[int, deque] = field(default_factory=dict, repr=False)

    def begin_step(self, batch: int, ctx: int) -> None:
        self.batch, self.ctx = batch, ctx
        self._curve = None

    def _cost(self, n: int) -> float:
        """Normalised cost of verifying n tokens (f(n) / f(1)); beyond the table: linear."""
        cv = self._normalised()
        if n <= len(cv):
            return float(cv[max(n, 1) - 1])
        slope = (cv[-1] - cv[len(cv) // 2]) / max(1, len(cv) - 1 - len(cv) // 2)
        return float(cv[-1] + slope * (n - len(cv)))

    def _normalised(self) -> np.ndarray:
        """f(B, c, n) / f(B, c, 1) for this step's batch and context (the unit kept aside)."""
        if self._curve is None:
            curve = self.table.curve(self.batch, self.ctx)
            self._unit, self._curve = float(curve[0]), curve / curve[0]
        return self._curve

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
        """Reranking (C3): how many of the best nodes to verify.

        With scores that are acceptance probabilities, verifying the first n nodes yields
        ``1 + Σ scores`` tokens for ``f(n) + overhead``; C3 is the marginal-gain-per-cost bar a
        node must clear, and the bar that maximises throughput is the best rate itself, so
        the n with the highest expected tokens per unit cost is chosen directly.
        """
        scores = np.asarray(cum_sorted, dtype=np.float64)
        expected = 1.0 + np.concatenate([[0.0], np.cumsum(scores[1:])])  # [n]
        cost = np.asarray([self._cost(n) for n in range(1, len(scores) + 1)]) + self.overhead
        return int(np.argmax(expected / cost)) + 1

    def batch_width(self, trees: list[DraftTree]) -> int:
        """C3 across a batch: all rows are verified at one width, the widest tree's, so the
        width w is chosen once for the step from each row's expected tokens E_b(w) (its best
        w nodes) and the cost f(B, c, w) + overhead. w = 1 is plain decoding for everyone.
        The engine's batch refills as rows finish, so it wants the most tokens per unit cost,
        Σ_b E_b(w) / cost(w).
        """
        longest = max(len(t) for t in trees)
        gains = np.ones((len(trees), longest))  # E_b(w), w = 1..longest
        for b, t in enumerate(trees):
            gain = 1.0 + np.cumsum([0.0] + [t.conf[i] for i in t.best_first()[1:]])
            gains[b] = np.pad(gain, (0, longest - len(t)), mode="edge")
        cost = np.asarray([self._cost(w) for w in range(1, longest + 1)]) + self.overhead
        return int(np.argmax(gains.sum(axis=0) / cost)) + 1

    def note_overhead(self, seconds: float) -> None:
        """Per-step time outside the forward (drafting, acceptance, bookkeeping), as an EMA
        in units of one decoding step: a fixed cost per step favours fewer, larger steps."""
        self._normalised()
        self.overhead += 0.2 * (seconds / max(self._unit, 1e-9) - self.overhead)

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
