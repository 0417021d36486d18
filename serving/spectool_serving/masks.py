"""A draft tree's shape as attention inputs: depths (position offsets) and the ancestor-only
mask. Below both the KV cache (:mod:`.kv`, which builds a step's masks) and the tree package."""

from __future__ import annotations

import torch

__all__ = ["ancestor_matrix", "tree_depths"]


def tree_depths(parents: list[int]) -> list[int]:
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        if not 0 <= parents[i] < i:
            raise ValueError(f"node {i} has parent {parents[i]}: parents must precede children")
        depth[i] = depth[parents[i]] + 1
    return depth


def ancestor_matrix(parents: list[int]) -> torch.Tensor:
    """``A[i, j]`` is True iff node j is node i or one of its ancestors. Shape [g, g]."""
    g = len(parents)
    anc = torch.zeros(g, g, dtype=torch.bool)
    for i in range(g):
        anc[i, i] = True
        if i:
            anc[i] |= anc[parents[i]]  # parents precede children, so their rows are final
    return anc
