"""Per-sequence KV ownership inside one batched cache.

The running batch shares one transformers ``DynamicCache`` whose layers hold tensors
``[B, H, C, D]``: row ``b`` belongs to one sequence, column ``c`` is a cache slot. Slots are
not positions: a row's valid slots are marked in ``valid[B, C]`` and rejected draft slots just
become holes (masked out), so verification never copies the cache. Rows join (right-padded to
a common width), leave (``index_select``), and get compacted when holes pile up. Positions for
RoPE come from each row's count of valid slots, passed explicitly to the model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .tree.tree import ancestor_matrix, tree_depths

__all__ = ["BatchKV"]


class BatchKV:
    """The running batch's KV cache: one row per sequence id."""

    def __init__(self) -> None:
        self.cache = None  # transformers DynamicCache, created by the first join
        self.rows: list[int] = []  # sequence id per row
        self.valid = torch.zeros(0, 0, dtype=torch.bool)  # [B, C]

    # -- bookkeeping ----------------------------------------------------------------------
    @property
    def width(self) -> int:
        return self.valid.shape[1]

    def row_of(self, seq_id: int) -> int:
        return self.rows.index(seq_id)

    def length(self, seq_id: int) -> int:
        """Tokens cached for a sequence (= the position of its next token)."""
        return int(self.valid[self.row_of(seq_id)].sum())

    def slots_in_use(self) -> int:
        """Memory footprint in token slots (rows x width): what eviction bounds."""
        return len(self.rows) * self.width

    # -- membership -----------------------------------------------------------------------
    def join(self, seq_id: int, single) -> None:
        """Add a sequence whose KV is a batch-1 DynamicCache ``single`` (all slots valid)."""
        from transformers import DynamicCache

        length = single.layers[0].keys.shape[2]
        if self.cache is None or not self.rows:
            self.cache, self.rows = single, [seq_id]
            self.valid = torch.ones(1, length, dtype=torch.bool)
            return
        width = max(self.width, length)
        merged = DynamicCache()
        for i, (mine, new) in enumerate(zip(self.cache.layers, single.layers)):
            keys = torch.cat([_pad(mine.keys, width), _pad(new.keys, width)])
            values = torch.cat([_pad(mine.values, width), _pad(new.values, width)])
            merged.update(keys, values, i)
        row = torch.zeros(1, width, dtype=torch.bool)
        row[0, :length] = True
        self.valid = torch.cat([F.pad(self.valid, (0, width - self.width)), row])
        self.cache, self.rows = merged, self.rows + [seq_id]

    def leave(self, seq_ids: set[int]) -> None:
        """Drop sequences from the batch (finished or evicted)."""
        keep = [r for r, s in enumerate(self.rows) if s not in seq_ids]
        if len(keep) == len(self.rows):
            return
        self.rows = [self.rows[r] for r in keep]
        self.valid = self.valid[keep]
        if not keep:
            self.cache = None
            self.valid = torch.zeros(0, 0, dtype=torch.bool)
            return
        index = torch.tensor(keep, device=self.cache.layers[0].keys.device)
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, index)
            layer.values = layer.values.index_select(0, index)
        self.compact()

    # -- one step ---------------------------------------------------------------------------
    def step_inputs(
        self, counts: list[int], dtype: torch.dtype, parents: list[list[int] | None] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions [B, G] and additive mask [B, 1, G, C+G] for ``counts[b]`` new tokens per row.

        New token j of row b sees the row's valid slots and its ancestors among the new tokens
        (``parents[b]``, a tree in topological order; ``None``: a chain, 0..j), at position
        valid-count + depth; padding tokens (j >= counts[b]) see only themselves so no row is
        all-masked.
        """
        rows, width, g = len(self.rows), self.width, max(counts)
        base = self.valid.sum(dim=1)  # [B]
        steps = torch.arange(g)
        anc = (steps[None, :] <= steps[:, None]).repeat(rows, 1, 1)  # [B, G, G] chains
        depth = steps.repeat(rows, 1)  # [B, G]
        for b, par in enumerate(parents or ()):
            if par is not None:
                anc[b], depth[b] = _tree_rows(par, g)
        positions = base[:, None] + depth  # [B, G]
        allowed = torch.zeros(rows, g, width + g, dtype=torch.bool)
        allowed[:, :, :width] = self.valid[:, None, :]
        real = steps[None, :] < torch.tensor(counts)[:, None]  # [B, G]
        allowed[:, :, width:] = anc & real[:, None, :] & real[:, :, None]
        allowed[:, :, :width] &= real[:, :, None]
        allowed[:, :, width:] |= torch.eye(g, dtype=torch.bool)[None]
        mask = torch.zeros(rows, 1, g, width + g, dtype=dtype)
        mask.masked_fill_(~allowed[:, None], torch.finfo(dtype).min)
        return positions, mask

    def commit(self, kept: list[list[int]], g: int) -> None:
        """After a step of width ``g``: row b keeps the new slots ``kept[b]`` (column indices;
        a chain keeps a prefix, a tree its accepted path — the rest become holes)."""
        new = torch.zeros(len(kept), g, dtype=torch.bool)
        for b, cols in enumerate(kept):
            new[b, cols] = True
        self.valid = torch.cat([self.valid, new], dim=1)
        self.compact()

    def compact(self, slack: float = 1.5, floor: int = 64) -> None:
        """Squeeze holes out once the width exceeds ``slack`` x the longest row (+ ``floor``)."""
        if self.cache is None or not self.rows:
            return
        lengths = self.valid.sum(dim=1)
        longest = int(lengths.max())
        if self.width <= slack * longest + floor:
            return
        # per row: valid slot indices first (stable), holes after; then cut to the longest row
        order = torch.argsort((~self.valid).to(torch.int8), dim=1, stable=True)[:, :longest]
        device = self.cache.layers[0].keys.device
        for layer in self.cache.layers:
            idx = order.to(device)[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
            layer.keys = torch.gather(layer.keys, 2, idx)
            layer.values = torch.gather(layer.values, 2, idx)
        self.valid = torch.arange(longest)[None, :] < lengths[:, None]


def _tree_rows(parents: list[int], g: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestor-or-self matrix [g, g] and depths [g] of a tree padded to g (pads: self, 0)."""
    n = len(parents)
    anc = torch.eye(g, dtype=torch.bool)
    anc[:n, :n] = ancestor_matrix(parents)
    depth = torch.zeros(g, dtype=torch.long)
    depth[:n] = torch.tensor(tree_depths(parents))
    return anc, depth


def _pad(t: torch.Tensor, width: int) -> torch.Tensor:
    """[B, H, C, D] right-padded on C to ``width``."""
    return F.pad(t, (0, 0, 0, width - t.shape[2]))
