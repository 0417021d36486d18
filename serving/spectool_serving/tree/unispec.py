"""UniSpec drafting: an n-gram store refreshed from the verifier, plus context matches.

* ``NGramStore``: one-to-one store of shape [V, k] (next-token ids + confidences) and a
  next-next store (token -> candidates two positions later), both overwritten from the
  verifier's top-k at every tree node it scores.
* ``ContextIndex``: suffix matches of the sequence against itself (prompt + output), so text
  the model copies (summaries, RAG answers) is drafted as chains, scored by learned rates.
* ``TreeDrafter``: first level = store[x_t] ⊕ next-next[x_{t-1}] ⊕ context chains; expand
  level by level keeping the top-k by cumulative confidence, dropping nodes below ``r``;
  a ``Shaper`` (top-g* here, CAST in :mod:`.cast`) decides breadth, depth and final size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .tree import DraftTree

__all__ = ["ContextIndex", "NGramStore", "Shaper", "TopG", "TreeDrafter"]


class NGramStore:
    """Two [V, k] tables (ids, confidences) for next and next-next tokens."""

    def __init__(self, vocab: int, k: int = 10) -> None:
        self.k = k
        self.ids = np.full((vocab, k), -1, dtype=np.int64)
        self.conf = np.zeros((vocab, k), dtype=np.float32)
        self.nn_ids = np.full((vocab, k), -1, dtype=np.int64)
        self.nn_conf = np.zeros((vocab, k), dtype=np.float32)

    def update(self, tokens: np.ndarray, parents: np.ndarray, top_ids: np.ndarray,
               top_conf: np.ndarray) -> None:
        """tokens, parents: [n] (parent -1 = unknown); top_ids, top_conf: [n, k] verifier top-k."""
        self.ids[tokens] = top_ids[:, :self.k]
        self.conf[tokens] = top_conf[:, :self.k]
        has = parents >= 0
        self.nn_ids[parents[has]] = top_ids[has, :self.k]
        self.nn_conf[parents[has]] = top_conf[has, :self.k]


class ContextIndex:
    """n-gram → positions of what followed it, over one growing token sequence."""

    def __init__(self, tokens: list[int], max_n: int = 4) -> None:
        self.seq: list[int] = []
        self.max_n = max_n
        self._index: dict[tuple[int, ...], list[int]] = {}
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        for t in tokens:
            self.seq.append(int(t))
            end = len(self.seq)
            for n in range(1, self.max_n + 1):
                if end - 1 - n >= 0:  # n-gram ending just before the new token -> its position
                    self._index.setdefault(tuple(self.seq[end - 1 - n:end - 1]), []).append(end - 1)

    def continuations(self, depth: int, branches: int) -> list[tuple[int, list[int]]]:
        """Up to ``branches`` distinct (match length n, following tokens) pairs, longest n first."""
        out: list[tuple[int, list[int]]] = []
        seen: set[tuple[int, ...]] = set()
        for n in range(min(self.max_n, len(self.seq)), 0, -1):
            for pos in reversed(self._index.get(tuple(self.seq[-n:]), [])):
                cont = tuple(self.seq[pos:pos + depth])
                if cont and cont not in seen:
                    seen.add(cont)
                    out.append((n, list(cont)))
                    if len(out) >= branches:
                        return out
        return out


class Shaper(Protocol):
    """Decides a tree's breadth per level, its depth and how many nodes are verified."""

    def level_keep(self, depth: int, cum_sorted: np.ndarray, size: int) -> int: ...
    def final_size(self, cum_sorted: np.ndarray) -> int: ...


@dataclass
class TopG:
    """UniSpec's shaping: top-k per level above threshold r, then the best g* nodes."""

    g: int = 16
    k: int = 10
    r: float = 0.05

    def level_keep(self, depth: int, cum_sorted: np.ndarray, size: int) -> int:
        return int(min(self.k, int((cum_sorted >= self.r).sum())))

    def final_size(self, cum_sorted: np.ndarray) -> int:
        return min(self.g, len(cum_sorted))


@dataclass
class TreeDrafter:
    """Builds one row's draft tree from the store and the context (see module doc)."""

    store: NGramStore
    shaper: Shaper
    depth: int = 10
    use_context: bool = True
    use_next_next: bool = True
    ctx_branches: int = 3
    # Learned acceptance rates of context drafts: first token per match length, then chain.
    ctx_first: dict[int, float] = field(default_factory=lambda: {1: .3, 2: .5, 3: .6, 4: .7})
    ctx_next: float = .7
    ema: float = .1

    def draft(self, seq: ContextIndex) -> DraftTree:
        root = seq.seq[-1]
        tree = DraftTree.root(root)
        where: dict[tuple[int, int], int] = {}
        level = self._first_level(root, seq.seq[-2] if len(seq.seq) > 1 else -1)
        if self.use_context:
            self._add_context(tree, where, seq)
        frontier = self._merge(tree, where, 0, level, self.shaper.level_keep(1, level[1], 1))
        for d in range(2, self.depth + 1):
            if not frontier:
                break
            frontier = self._expand(tree, where, frontier, d)
        return self._select(tree)

    def _first_level(self, root: int, prev: int) -> tuple[np.ndarray, np.ndarray]:
        ids, conf = self.store.ids[root], self.store.conf[root]
        if self.use_next_next and prev >= 0:
            ids = np.concatenate([ids, self.store.nn_ids[prev]])
            conf = np.concatenate([conf, self.store.nn_conf[prev] * 0.5])  # a weaker signal
        order = np.argsort(-conf, kind="stable")
        ids, conf = ids[order], conf[order]
        ok = ids >= 0
        ids, conf = ids[ok], conf[ok]
        _, first = np.unique(ids, return_index=True)  # keep each token's best score
        first.sort()
        return ids[first], conf[first]

    def _merge(self, tree: DraftTree, where: dict, parent: int,
               cand: tuple[np.ndarray, np.ndarray], keep: int) -> list[int]:
        added = []
        for tok, cum in zip(cand[0][:keep].tolist(), cand[1][:keep].tolist()):
            node = where.get((parent, tok))
            if node is None:
                node = tree.add(parent, tok, cum, "store")
                where[(parent, tok)] = node
            else:
                tree.conf[node] = max(tree.conf[node], cum)
            added.append(node)
        return added

    def _expand(self, tree: DraftTree, where: dict, frontier: list[int], d: int) -> list[int]:
        ftoks = np.asarray([tree.tokens[f] for f in frontier])
        fcum = np.asarray([tree.conf[f] for f in frontier], dtype=np.float32)
        ids = self.store.ids[ftoks]  # [f, k]
        cum = fcum[:, None] * self.store.conf[ftoks]  # [f, k]
        cum = np.where(ids >= 0, cum, -1.0).ravel()
        order = np.argsort(-cum, kind="stable")
        cum_sorted = cum[order]
        keep = self.shaper.level_keep(d, cum_sorted[cum_sorted >= 0], len(tree))
        added = []
        for flat in order[:keep].tolist():
            parent, tok = frontier[flat // ids.shape[1]], int(ids.ravel()[flat])
            node = where.get((parent, tok))
            if node is None:
                node = tree.add(parent, tok, float(cum[flat]), "store")
                where[(parent, tok)] = node
            added.append(node)
        return added

    def _add_context(self, tree: DraftTree, where: dict, seq: ContextIndex) -> None:
        for n, cont in seq.continuations(self.depth, self.ctx_branches):
            parent, cum = 0, 1.0
            for j, tok in enumerate(cont):
                cum *= self.ctx_first[n] if j == 0 else self.ctx_next
                node = where.get((parent, tok))
                if node is None:
                    node = tree.add(parent, tok, cum, f"ctx{n}.{j}")
                    where[(parent, tok)] = node
                else:
                    tree.conf[node] = max(tree.conf[node], cum)
                    tree.source[node] = f"ctx{n}.{j}"
                parent = node

    def _select(self, tree: DraftTree) -> DraftTree:
        conf = np.asarray(tree.conf)
        depth = np.asarray(tree.depths())
        order = np.lexsort((depth, -conf))  # best first; parents before equal-scored children
        g = self.shaper.final_size(conf[order])
        chosen: list[int] = []
        picked = set()
        for i in order.tolist():
            if len(chosen) >= g:
                break
            if i == 0 or tree.parents[i] in picked:
                chosen.append(i)
                picked.add(i)
        return tree.subtree(chosen)

    def learn(self, tree: DraftTree, path: list[int]) -> None:
        """Update context acceptance rates from which tested context nodes were accepted."""
        on_path = set(path)
        for i, src in enumerate(tree.source):
            if src.startswith("ctx") and tree.parents[i] in on_path:
                n, j = src[3:].split(".")
                hit = 1.0 if i in on_path else 0.0
                # floor: a rate at 0 would never be tested (and so never learned) again
                if j == "0":
                    rate = self.ctx_first[int(n)]
                    self.ctx_first[int(n)] = max(.05, rate + self.ema * (hit - rate))
                else:
                    self.ctx_next = max(.05, self.ctx_next + self.ema * (hit - self.ctx_next))
