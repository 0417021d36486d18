"""Captured decode steps: the engine's one-token step replayed as a CUDA graph.

On a GPU a decode step of a small model is a thousand-odd kernel launches of a few
microseconds each, and the host, not the GPU, sets the pace. :class:`DecodeGraphs` runs the
step of :mod:`.backends.static_step` from **static buffers** it owns — token ids, positions,
slot mapping (the pool column each new token's keys/values go to) and the additive mask over
the whole KV pool (which slots each row's tokens see: the block table's rows, holes masked) —
and captures it with ``torch.cuda.graph`` once per **batch-size bucket** (1, 2, 4, 8, 16, 24,
32, …): a batch of B rows pads to the smallest bucket that holds it, the padding rows writing
only into free pool rows and seeing only themselves. A step is then four host-to-device copies
and one graph replay.

What stays eager, and rejoins the captured step afterwards (the KV pool is shared):
prefills (variable length), steps wider than the captured widths (O2 drafts, O3 appends, tree
verification unless its width is listed in ``widths``), sliding-window models, models the lean
forward does not run, and any step after a capture failed (the reason is kept in
:attr:`GraphStats.fallback` and logged once). Growing the KV pool moves it, so its graphs are
dropped and recaptured lazily.

Graph memory comes from one pool — the first capture's (``graph.pool()``) — shared by every
later capture, bounded by ``max_graphs`` (the least recently used graph is dropped past it) and released by
:meth:`DecodeGraphs.close`. With ``capture=False`` the same buffers and step run without a
graph: the code path a CPU can check.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

from .backends.fastpath import attention_backends
from .backends.layer_glue import LayerOps
from .backends.static_step import StaticStep, pool_views

__all__ = ["BUCKETS", "DecodeGraphs", "GraphStats"]

log = logging.getLogger("spectool.serving.graphs")

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)


@dataclass
class GraphStats:
    captures: int = 0
    replays: int = 0  # steps run from static buffers (replayed, or run uncaptured)
    eager: int = 0  # steps handed back to the eager forward
    dropped: int = 0  # graphs dropped (pool moved, or past max_graphs)
    capture_s: float = 0.0
    graph_bytes: int = 0  # device memory the graph pool holds (reserved, after the last capture)
    fallback: str | None = None  # why capture was switched off, if it was


@dataclass
class _Bucket:
    ids: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    mask: torch.Tensor
    graph: Any = None
    out: torch.Tensor | None = None


class DecodeGraphs:
    """Decode steps of one lean model from static buffers, captured per (bucket, width)."""

    def __init__(
        self,
        lean: Any,
        device: str | torch.device,
        *,
        capture: bool = True,
        ops: LayerOps | None = None,
        widths: tuple[int, ...] = (1,),
        buckets: tuple[int, ...] = BUCKETS,
        max_graphs: int = 24,
    ) -> None:
        self.device = torch.device(device)
        self.capture = capture and self.device.type == "cuda"
        self.step = StaticStep(lean, ops)
        self.widths, self.buckets, self.max_graphs = tuple(widths), tuple(sorted(buckets)), max_graphs
        self.stats = GraphStats()
        self._buckets: OrderedDict[tuple[int, int], _Bucket] = OrderedDict()
        self._pool_key: tuple | None = None
        # the first capture's own pool, shared by every later one (torch's documented pattern;
        # a fresh graph_pool_handle() failed capture_begin on an H100 for a Qwen2 model)
        self._mempool: Any = None

    # -- the one entry point --------------------------------------------------------------
    def run(self, ids: torch.Tensor, positions: torch.Tensor, mask: Any, cache: Any) -> torch.Tensor | None:
        """Logits [B, G, V] (fp32, on the device) of one engine step from the static buffers,
        with the cache's views advanced by G slots as an eager forward would; None where the
        step must run eagerly (the caller then does)."""
        kv = getattr(cache, "spectool_kv", None)
        if kv is None or isinstance(mask, dict) or self.stats.fallback is not None:
            self.stats.eager += 1
            return None
        rows, g = ids.shape
        pool = kv._pool
        width = mask.shape[-1] - g  # cached slots before this step
        have_rows, capacity = pool[0][0].shape[0], pool[0][0].shape[2]
        bucket = self._bucket(rows, have_rows)
        if g not in self.widths or bucket is None or cache.layers[0].keys.shape[2] != width:
            self.stats.eager += 1
            return None
        self._check_pool(pool)
        buf = self._buffers(bucket, g, capacity, pool[0][0].dtype)
        self._fill(buf, ids, positions, mask, rows, width)
        try:
            out = self._replay(buf, pool, (bucket, g))
        except Exception as exc:  # noqa: BLE001 - capture is an optimisation: fall back, say why
            self._disable(f"capture failed at bucket {bucket}, width {g}: {exc!r}")
            return None
        for layer, (keys, values) in zip(cache.layers, pool):  # what GrowableLayer.update does
            layer.keys, layer.values = keys[:rows, :, : width + g], values[:rows, :, : width + g]
        self.stats.replays += 1
        return out[:rows].to(torch.float32, copy=True)  # the static output is rewritten next step

    # -- buffers ------------------------------------------------------------------------------
    def _bucket(self, rows: int, have_rows: int) -> int | None:
        """The smallest bucket holding ``rows`` within the pool's rows (the pool's own row count
        where the next bucket would overrun it); None past the largest bucket."""
        fit = next((b for b in self.buckets if b >= rows), None)
        if fit is None:
            return None
        return fit if fit <= have_rows else have_rows

    def _check_pool(self, pool: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Graphs hold the pool's addresses: a reallocated (grown) pool drops them all."""
        key = (len(pool), pool[0][0].data_ptr(), tuple(pool[0][0].shape))
        if key != self._pool_key:
            self._drop_all()  # no graph holds the old pool: the next capture starts one
            self._pool_key = key

    def _buffers(self, bucket: int, g: int, capacity: int, dtype: torch.dtype) -> _Bucket:
        key = (bucket, g)
        buf = self._buckets.get(key)
        if buf is None:
            dev = self.device
            ids, positions, slots = (torch.zeros(bucket, g, dtype=torch.long, device=dev) for _ in range(3))
            buf = _Bucket(ids, positions, slots, torch.zeros(bucket, 1, g, capacity, dtype=dtype, device=dev))
            self._buckets[key] = buf
            while len(self._buckets) > self.max_graphs:  # the least recently used goes
                self._buckets.popitem(last=False)
                self.stats.dropped += 1
        self._buckets.move_to_end(key)
        return buf

    def _fill(
        self,
        buf: _Bucket,
        ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        rows: int,
        width: int,
    ) -> None:
        """Host-side inputs padded to the bucket, one copy each into the static buffers.
        Padding rows feed token 0 at position 0 into slot ``width + j`` of a free pool row and
        see only that slot (no row is all-masked)."""
        bucket, g = buf.ids.shape
        capacity = buf.mask.shape[-1]
        new = width + torch.arange(g)
        host_ids = torch.zeros(bucket, g, dtype=torch.long)
        host_ids[:rows] = ids
        host_pos = torch.zeros(bucket, g, dtype=torch.long)
        host_pos[:rows] = positions
        host_mask = torch.full(
            (bucket, 1, g, capacity), torch.finfo(buf.mask.dtype).min, dtype=buf.mask.dtype
        )
        host_mask[:rows, :, :, : width + g] = mask
        host_mask[rows:, 0, torch.arange(g), new] = 0
        buf.ids.copy_(host_ids)
        buf.positions.copy_(host_pos)
        buf.slots.copy_(new.expand(bucket, g))
        buf.mask.copy_(host_mask)

    # -- capture and replay ---------------------------------------------------------------------
    def _call(self, buf: _Bucket, views: list) -> torch.Tensor:
        with attention_backends(self.device):
            return self.step(buf.ids, buf.positions, buf.slots, buf.mask, views)

    def _replay(self, buf: _Bucket, pool: list, key: tuple[int, int]) -> torch.Tensor:
        if not self.capture:
            return self._call(buf, pool_views(pool, key[0]))
        if buf.graph is None:
            views = pool_views(pool, key[0])  # a replay reads them where the capture saw them
            t0 = time.perf_counter()
            before = torch.cuda.memory_reserved(self.device)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):  # warm-up: compiles the layer ops, picks kernels
                for _ in range(2):
                    self._call(buf, views)  # writes the same keys/values the step will
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._mempool, capture_error_mode="thread_local"):
                out = self._call(buf, views)
            buf.graph, buf.out = graph, out
            if self._mempool is None:
                self._mempool = graph.pool()
            self.stats.captures += 1
            self.stats.capture_s += time.perf_counter() - t0
            self.stats.graph_bytes += max(0, torch.cuda.memory_reserved(self.device) - before)
            log.debug("captured decode step: bucket %d, width %d", *key)
        buf.graph.replay()
        assert buf.out is not None
        return buf.out

    def _disable(self, why: str) -> None:
        self.stats.fallback = why
        log.warning("CUDA graphs off, the decode step runs eagerly: %s", why)
        self.close()

    def _drop_all(self) -> None:
        self.stats.dropped += len(self._buckets)
        self._buckets.clear()
        self._pool_key = self._mempool = None

    def close(self) -> None:
        """Drop every graph and buffer and hand the graph pool's memory back."""
        self._drop_all()
        if self.capture:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
