"""Per-sequence KV ownership inside one preallocated, block-table batched cache.

Storage is a pool per layer, ``[R, H, C, D]`` keys and values, allocated once per engine and
grown (rows doubling, slots by a quarter: the only copy of other rows' data) only when a
high-water mark is passed; it never shrinks, so memory is flat once warm.
Each sequence owns one block of it: a pool row, found through the block table ``rows`` (row
-> sequence id; ``None`` marks a free row). Joining writes the new sequence's prefill into a
free row; leaving marks the row free. Neither touches another row's storage, so memory stays
flat across a pass. (Blocks are whole rows because the attention backends read a contiguous
``[B, H, C, D]`` view; token-sized blocks would need a paged attention kernel.)

The forward sees ``cache`` — a transformers ``DynamicCache`` whose layers are views
``pool[:span, :, :width]`` that grow in place (:class:`.backends.fastpath.GrowableLayer`) —
over every row up to the last one in use; a free row in between is fed one padding token
that sees only itself. Slots are not positions: a row's valid slots are marked in
``valid[B, C]`` and rejected draft slots just become holes (masked out), so verification
never copies the cache; holes are squeezed out in place when they pile up. Positions for
RoPE come from each row's count of valid slots, passed explicitly to the model.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .masks import ancestor_matrix, tree_depths

__all__ = ["BatchKV"]

_MIN_SLOTS = 256


class BatchKV:
    """The running batch's KV cache: one pool row per sequence id.

    ``rows``/``slots`` preallocate the pool at the first join (0: sized by the first
    sequence, then grown as needed).
    """

    def __init__(self, rows: int = 0, slots: int = 0) -> None:
        self.cache: Any = None  # DynamicCache over the pool's live span, created by the first join
        self.rows: list[int | None] = []  # block table: sequence id per pool row (None: free)
        self.valid = torch.zeros(0, 0, dtype=torch.bool)  # [span, width]
        self._pool: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer [R, H, C, D]
        self._hint = (rows, slots)
        self.reallocations = 0  # pool growths (each copies the live rows once)

    # -- bookkeeping ----------------------------------------------------------------------
    @property
    def width(self) -> int:
        return self.valid.shape[1]

    def row_of(self, seq_id: int) -> int:
        return self.rows.index(seq_id)

    def length(self, seq_id: int) -> int:
        """Tokens cached for a sequence (= the position of its next token)."""
        return int(self.valid[self.row_of(seq_id)].sum())

    def memory(self) -> dict[str, int]:
        """KV bytes: ``reserved`` by the pool, ``in_use`` by valid slots, and ``rows``/
        ``slots`` of the pool (a gauge for soaks: reserved stays flat once warm)."""
        if not self._pool:
            return {"reserved": 0, "in_use": 0, "rows": 0, "slots": 0}
        keys = self._pool[0][0]
        per_slot = 2 * len(self._pool) * keys.shape[1] * keys.shape[3] * keys.element_size()
        reserved = sum(k.nbytes + v.nbytes for k, v in self._pool)
        return {
            "reserved": reserved,
            "in_use": int(self.valid.sum()) * per_slot,
            "rows": keys.shape[0],
            "slots": keys.shape[2],
        }

    # -- membership -----------------------------------------------------------------------
    def join(self, seq_id: int, single: Any) -> None:
        """Add a sequence whose KV is a batch-1 DynamicCache ``single`` (all slots valid):
        its keys/values are written into a free pool row; no other row moves."""
        length = single.layers[0].keys.shape[2]
        row = self.rows.index(None) if None in self.rows else len(self.rows)
        self._ensure(single, row + 1, max(self.width, length))
        if row == len(self.rows):
            self.rows.append(seq_id)
            self.valid = F.pad(self.valid, (0, 0, 0, 1))
        else:
            self.rows[row] = seq_id
        if length > self.width:
            self.valid = F.pad(self.valid, (0, length - self.width))
        self.valid[row] = False
        self.valid[row, :length] = True
        for (kpool, vpool), layer in zip(self._pool, single.layers):
            kpool[row, :, :length] = layer.keys[0]
            vpool[row, :, :length] = layer.values[0]
        self._bind()

    def leave(self, seq_ids: set[int]) -> None:
        """Drop sequences from the batch (finished or evicted): their rows become free."""
        for r, s in enumerate(self.rows):
            if s is not None and s in seq_ids:
                self.rows[r] = None
                self.valid[r] = False
        while self.rows and self.rows[-1] is None:  # the live span ends at the last row in use
            self.rows.pop()
        self.valid = self.valid[: len(self.rows)]
        if not self.rows:
            self.valid = torch.zeros(0, 0, dtype=torch.bool)
        self._bind()

    def reset(self) -> None:
        """Forget every row (after a failed step); the pool is kept."""
        self.rows, self.valid = [], torch.zeros(0, 0, dtype=torch.bool)
        self._bind()

    # -- the pool ----------------------------------------------------------------------------
    def _ensure(self, like: Any, rows: int, slots: int) -> None:
        """A pool with at least ``rows`` x ``slots``, grown past a high-water mark (the live
        data copied once): rows double (at most twice the batch), slots grow by a quarter,
        since every row pays for them and a pool never shrinks."""
        if self._pool:
            have_r, have_c = self._pool[0][0].shape[0], self._pool[0][0].shape[2]
            if rows <= have_r and slots <= have_c:
                return
            rows = max(rows, 2 * have_r) if rows > have_r else have_r
            slots = _round_up(max(slots, have_c + have_c // 4)) if slots > have_c else have_c
        else:
            rows, slots = max(rows, self._hint[0]), _round_up(max(slots, self._hint[1], _MIN_SLOTS))
        old, span, width = self._pool, len(self.rows), self.width
        new = []
        for i, layer in enumerate(like.layers):
            k = layer.keys
            # zeros, not empty: a free slot is masked, and a NaN there would still poison it
            kp = torch.zeros(rows, k.shape[1], slots, k.shape[3], dtype=k.dtype, device=k.device)
            vp = torch.zeros_like(kp)
            if old and span and width:
                kp[:span, :, :width] = old[i][0][:span, :, :width]
                vp[:span, :, :width] = old[i][1][:span, :, :width]
            new.append((kp, vp))
        self.reallocations += bool(old)
        self._pool = new

    def _bind(self) -> None:
        """Point the cache's layers at ``pool[:span, :, :width]`` (views, no copy)."""
        from .backends.fastpath import GrowableLayer, new_cache

        if not self.rows or not self._pool:
            self.cache = None
            return
        if self.cache is None:
            self.cache = new_cache()
            # a captured step (:mod:`.graphs`) reads the pool and writes it at a slot mapping
            self.cache.spectool_kv = self
            for kpool, _ in self._pool:
                layer = GrowableLayer()
                layer.lazy_initialization(kpool[:0], kpool[:0])
                self.cache.layers.append(layer)
        span, width = len(self.rows), self.width
        for layer, (kpool, vpool) in zip(self.cache.layers, self._pool):
            layer._kbuf, layer._vbuf = kpool[:span], vpool[:span]
            layer.keys, layer.values = kpool[:span, :, :width], vpool[:span, :, :width]

    # -- one step ---------------------------------------------------------------------------
    def step_inputs(
        self,
        counts: list[int],
        dtype: torch.dtype,
        parents: list[list[int] | None] | None = None,
        *,
        width: int = 1,
        window: int | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """Positions [B, G] and additive mask [B, 1, G, C+G] for ``counts[b]`` new tokens per
        row, G = max(``width``, counts) (a wider G pads every row).

        New token j of row b sees the row's valid slots and its ancestors among the new tokens
        (``parents[b]``, a tree in topological order; ``None``: a chain, 0..j), at position
        valid-count + depth; padding tokens (j >= counts[b]) see only themselves so no row is
        all-masked. With a sliding ``window`` (Gemma 3) the mask is a dict by layer type, the
        sliding one also hiding keys ``window`` or more positions back. Makes room for the G
        new slots in the pool.
        """
        g = max([width, *counts])
        if self._pool and self._pool[0][0].shape[2] < self.width + g:
            self._grow_slots(g)
        rows, cached = len(self.rows), self.width
        base = self.valid.sum(dim=1)  # [B]
        steps = torch.arange(g)
        anc = (steps[None, :] <= steps[:, None]).repeat(rows, 1, 1)  # [B, G, G] chains
        depth = steps.repeat(rows, 1)  # [B, G]
        for b, par in enumerate(parents or ()):
            if par is not None:
                anc[b], depth[b] = _tree_rows(par, g)
        positions = base[:, None] + depth  # [B, G]
        allowed = torch.zeros(rows, g, cached + g, dtype=torch.bool)
        allowed[:, :, :cached] = self.valid[:, None, :]
        real = steps[None, :] < torch.tensor(counts)[:, None]  # [B, G]
        allowed[:, :, cached:] = anc & real[:, None, :] & real[:, :, None]
        allowed[:, :, :cached] &= real[:, :, None]
        allowed[:, :, cached:] |= torch.eye(g, dtype=torch.bool)[None]
        full = _additive(allowed, dtype)
        if window is None:
            return positions, full
        # valid slots hold positions 0, 1, ... in column order; holes never pass ``allowed``
        k_pos = torch.cat([self.valid.long().cumsum(1) - 1, positions], dim=1)  # [B, C+G]
        near = (positions[:, :, None] - k_pos[:, None, :]) < window
        return positions, {"full_attention": full, "sliding_attention": _additive(allowed & near, dtype)}

    def discard_step(self) -> None:
        """Forget the slots the last forward appended, before any commit (cost probes)."""
        self._bind()

    def _grow_slots(self, g: int) -> None:
        """Room for ``g`` new slots: squeeze holes out first (in place), grow if still short."""
        self.compact(slack=1.0, floor=0)
        if self._pool[0][0].shape[2] < self.width + g:
            self._ensure(self.cache, len(self.rows), self.width + g)
            self._bind()

    def commit(self, kept: list[list[int]], g: int) -> None:
        """After a step of width ``g``: row b keeps the new slots ``kept[b]`` (column indices;
        a chain keeps a prefix, a tree its accepted path — the rest become holes)."""
        new = torch.zeros(len(kept), g, dtype=torch.bool)
        for b, cols in enumerate(kept):
            new[b, cols] = True
        self.valid = torch.cat([self.valid, new], dim=1)
        self.compact()

    def compact(self, slack: float = 1.5, floor: int = 64) -> None:
        """Squeeze holes out, in place, once the width exceeds ``slack`` x the longest row
        (+ ``floor``)."""
        if not self.rows or not self._pool:
            return
        lengths = self.valid.sum(dim=1)
        longest = int(lengths.max())
        if self.width <= slack * longest + floor:
            return
        # per row: valid slot indices first (stable), holes after; then cut to the longest row
        order = torch.argsort((~self.valid).to(torch.int8), dim=1, stable=True)[:, :longest]
        span, width = len(self.rows), self.width
        for kpool, vpool in self._pool:
            device = kpool.device
            idx = order.to(device)[:, None, :, None].expand(-1, kpool.shape[1], -1, kpool.shape[3])
            for pool in (kpool, vpool):
                pool[:span, :, :longest] = torch.gather(pool[:span, :, :width], 2, idx)
        self.valid = torch.arange(longest)[None, :] < lengths[:, None]
        self._bind()


def _round_up(slots: int, to: int = 64) -> int:
    return -(-slots // to) * to


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, G, C+G] bool -> additive [B, 1, G, C+G] mask in ``dtype``."""
    mask = torch.zeros(allowed.shape[0], 1, *allowed.shape[1:], dtype=dtype)
    return mask.masked_fill_(~allowed[:, None], torch.finfo(dtype).min)


def _tree_rows(parents: list[int], g: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestor-or-self matrix [g, g] and depths [g] of a tree padded to g (pads: self, 0)."""
    n = len(parents)
    anc = torch.eye(g, dtype=torch.bool)
    anc[:n, :n] = ancestor_matrix(parents)
    depth = torch.zeros(g, dtype=torch.long)
    depth[:n] = torch.tensor(tree_depths(parents))
    return anc, depth
