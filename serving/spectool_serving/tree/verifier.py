"""Tree verification on the serving path: the engine's :class:`~..runner.Runner` over its
:class:`~..kv.BatchKV`, for code that scores trees without an engine (CAST's cost tables).

One forward scores a whole tree per row (ancestor-only attention among the new nodes, depth
positions); :meth:`TreeVerifier.commit` keeps each row's accepted path and leaves the other
slots as holes, exactly as an engine step does — so what is measured here is what serves.
"""

from __future__ import annotations

from typing import Any

import torch

from ..kv import BatchKV
from ..runner import Runner
from .tree import DraftTree

__all__ = ["TreeVerifier"]


class TreeVerifier:
    """Rows of prompts in one batched KV; trees verified against them."""

    def __init__(self, model: Any, kv: Any = None) -> None:
        device = next(model.parameters()).device
        self.runner = Runner(model, str(device))
        self.kv = kv or BatchKV()
        self._width = 0  # the last forward's G

    @property
    def length(self) -> int:
        """The cache's width in slots (the context a forward attends over)."""
        return self.kv.width

    def prefill(self, prompts: list[list[int]], keep: int = 1) -> tuple[list[torch.Tensor], list[int]]:
        """Every prompt but its last token (the first root) into its own row.

        Returns (logits [min(keep, L-1), V] of each prefix's last positions, roots). Only the
        drafter's store warm-up reads more than one row: the output projection over a 49k
        vocabulary is a quarter of a prefill's FLOPs."""
        if any(len(p) < 2 for p in prompts):
            raise ValueError("each prompt needs at least two tokens")
        logits = []
        for p in prompts:
            out, cache = self.runner.prefill(p[:-1], keep=min(keep, len(p) - 1))
            self.kv.join(len(self.kv.rows), cache)
            logits.append(out if out.dim() == 2 else out[None])
        return logits, [p[-1] for p in prompts]

    def forward(self, trees: list[DraftTree], width: int = 1) -> torch.Tensor:
        """Score one tree per row, padded to ``width`` nodes at least; returns logits
        [B, G, V] fp32 on the model's device. :meth:`commit` must follow."""
        counts = [len(t) for t in trees]
        positions, mask = self.kv.step_inputs(
            counts, self.runner.dtype, [t.parents for t in trees], width=width, window=self.runner.window
        )
        g = positions.shape[1]
        ids = torch.zeros(len(trees), g, dtype=torch.long)
        for b, t in enumerate(trees):
            ids[b, : len(t)] = torch.tensor(t.tokens)
        self._width = g
        return self.runner.forward(ids, positions, mask, self.kv.cache)

    def commit(self, paths: list[list[int]]) -> None:
        """Keep each row's accepted path (node ids, root first) of the last forward."""
        self.kv.commit(paths, self._width)

    def discard(self) -> None:
        """Drop the last forward's slots without keeping any (cost probes)."""
        self.kv.discard_step()
