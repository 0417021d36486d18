"""A draft tree and its flattened form: tokens, ancestor-only mask, depth position ids.

Node 0 is the *root*: the last accepted token, whose KV is not in the cache yet. Every other
node is a drafted token whose parent index is smaller than its own (topological order), so
one forward over the flattened nodes scores every root-to-node path at once.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..masks import ancestor_matrix, tree_depths

__all__ = ["DraftTree", "ancestor_matrix", "tree_depths"]


@dataclass
class DraftTree:
    """Tokens, parents and cumulative confidences; ``parents[0] == -1`` (the root)."""

    tokens: list[int]
    parents: list[int]
    conf: list[float] = field(default_factory=list)  # cumulative path confidence per node
    source: list[str] = field(default_factory=list)  # "root" | "store" | "ctx" (metrics only)

    @classmethod
    def root(cls, token: int) -> DraftTree:
        return cls([int(token)], [-1], [1.0], ["root"])

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, parent: int, token: int, conf: float, source: str = "store") -> int:
        if not 0 <= parent < len(self.tokens):
            raise IndexError(f"parent {parent} is not a node of a {len(self.tokens)}-node tree")
        self.tokens.append(int(token))
        self.parents.append(int(parent))
        self.conf.append(float(conf))
        self.source.append(source)
        return len(self.tokens) - 1

    def children(self) -> list[list[int]]:
        kids: list[list[int]] = [[] for _ in self.tokens]
        for i, p in enumerate(self.parents[1:], start=1):
            kids[p].append(i)
        return kids

    def depths(self) -> list[int]:
        return tree_depths(self.parents)

    def best_first(self) -> list[int]:
        """Every node id, best score first (ties: shallower, then older), a node never before
        its parent — so every prefix of the list is an ancestor-closed tree. Where scores
        never grow along a path (the drafters' trees) this is plain sorting by score."""
        kids = self.children()
        depth = self.depths()
        out: list[int] = []
        frontier = [(0.0, 0, 0)]
        while frontier:
            _, _, i = heapq.heappop(frontier)
            out.append(i)
            for k in kids[i]:
                heapq.heappush(frontier, (-self.conf[k], depth[k], k))
        return out

    def top(self, n: int) -> DraftTree:
        """The ``n`` best nodes (root included) as a tree of their own."""
        return self if n >= len(self) else self.subtree(self.best_first()[: max(n, 1)])

    def subtree(self, keep: list[int]) -> DraftTree:
        """The nodes ``keep`` (must contain 0 and be ancestor-closed), renumbered in order."""
        keep = sorted(set(keep) | {0})
        new = {old: i for i, old in enumerate(keep)}
        if any(self.parents[k] not in new for k in keep[1:]):
            raise ValueError("subtree must be closed under parents")
        return DraftTree(
            [self.tokens[k] for k in keep],
            [-1] + [new[self.parents[k]] for k in keep[1:]],
            [self.conf[k] for k in keep],
            [self.source[k] for k in keep],
        )
