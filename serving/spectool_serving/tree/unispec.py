"""UniSpec drafting: an n-gram store refreshed from the verifier, plus context matches.

* ``NGramStore``: one-to-one store of shape [V, k] (next-token ids + confidences) and a
  next-next store (token -> candidates two positions later), both overwritten from the
  verifier's top-k at every tree node it scores.
* ``ContextIndex`` (:class:`.suffix.SuffixIndex`): the longest earlier matches of the
  current suffix (prompt + output), so text the model copies (summaries, RAG answers, tool
  calls' JSON) is drafted as chains, scored by rates learned per match length.
* ``TreeDrafter``: first level = store[x_t] ⊕ next-next[x_{t-1}] ⊕ context chains; expand
  level by level keeping the top-k by cumulative confidence, dropping nodes below ``r``;
  a ``Shaper`` (top-g* here, CAST in :mod:`.cast`) decides breadth, depth and final size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .rates import AcceptanceRates, conf_bin
from .suffix import SuffixIndex, match_bucket
from .tree import DraftTree

if TYPE_CHECKING:
    import torch

# the drafter's view of a sequence; one name for the serving policy and the decoding loop
ContextIndex = SuffixIndex

__all__ = ["ContextIndex", "NGramStore", "Shaper", "TopG", "TreeDrafter"]


class NGramStore:
    """Two [V, k] tables (ids, confidences) for next and next-next tokens."""

    def __init__(self, vocab: int, k: int = 10) -> None:
        self.k = k
        self.ids = np.full((vocab, k), -1, dtype=np.int64)
        self.conf = np.zeros((vocab, k), dtype=np.float32)
        self.nn_ids = np.full((vocab, k), -1, dtype=np.int64)
        self.nn_conf = np.zeros((vocab, k), dtype=np.float32)

    def update(
        self, tokens: np.ndarray, parents: np.ndarray, top_ids: np.ndarray, top_conf: np.ndarray
    ) -> None:
        """tokens, parents: [n] (parent -1 = unknown); top_ids, top_conf: [n, k] verifier top-k."""
        self.ids[tokens] = top_ids[:, : self.k]
        self.conf[tokens] = top_conf[:, : self.k]
        has = parents >= 0
        self.nn_ids[parents[has]] = top_ids[has, : self.k]
        self.nn_conf[parents[has]] = top_conf[has, : self.k]

    def refresh(
        self, tokens: list[int] | np.ndarray, parents: list[int] | np.ndarray, logits: torch.Tensor
    ) -> None:
        """:meth:`update` from the verifier's logits [n, V] at those n nodes (softmax top-k)."""
        from ..backends.kernels import row_stats  # one pass per row where the C kernel runs

        _, ids, conf = row_stats(logits, self.k)
        # on a GPU the top-k stays on the device: the store lives on the host
        self.update(np.asarray(tokens), np.asarray(parents), ids.cpu().numpy(), conf.cpu().numpy())


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
    """Builds one row's draft tree from the store and the context (see module doc).

    Node scores are probabilities of acceptance (:class:`.rates.AcceptanceRates` turns each
    edge's raw signal into a learned rate), so top-k by score keeps the likeliest paths and a
    shaper can read the sum of scores as expected accepted tokens.
    """

    store: NGramStore
    shaper: Shaper
    depth: int = 10  # store expansion depth
    use_context: bool = True
    use_next_next: bool = True
    ctx_branches: int = 3
    ctx_depth: int = 32  # context chains copy text, so they may run deeper than store levels
    rates: AcceptanceRates = field(default_factory=AcceptanceRates)

    def draft(self, seq: ContextIndex) -> DraftTree:
        root = seq.seq[-1]
        tree = DraftTree.root(root)
        where: dict[tuple[int, int], int] = {}
        if self.use_context:
            self._add_context(tree, where, seq)
        level = self._first_level(root, seq.seq[-2] if len(seq.seq) > 1 else -1)
        frontier = self._merge(tree, where, level, self.shaper.level_keep(1, level[1], 1))
        for d in range(2, self.depth + 1):
            if not frontier:
                break
            frontier = self._expand(tree, where, frontier, d)
        return self._select(tree)

    def _first_level(self, root: int, prev: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Store candidates of the root ⊕ next-next candidates of the token before it."""
        ids, raw = self.store.ids[root], self.store.conf[root]
        bins = conf_bin(raw)
        score = self.rates.table("s")[bins]
        src = [f"s{b}" for b in bins.tolist()]
        if self.use_next_next and prev >= 0:
            nn_bins = conf_bin(self.store.nn_conf[prev])
            ids = np.concatenate([ids, self.store.nn_ids[prev]])
            score = np.concatenate([score, self.rates.table("n")[nn_bins]])
            src += [f"n{b}" for b in nn_bins.tolist()]
        order = np.argsort(-score, kind="stable")
        ok = ids[order] >= 0
        order = order[ok]
        _, first = np.unique(ids[order], return_index=True)  # keep each token's best score
        order = order[np.sort(first)]
        return ids[order], score[order], [src[i] for i in order.tolist()]

    def _merge(
        self, tree: DraftTree, where: dict, cand: tuple[np.ndarray, np.ndarray, list[str]], keep: int
    ) -> list[int]:
        added = []
        for tok, cum, src in zip(cand[0][:keep].tolist(), cand[1][:keep].tolist(), cand[2]):
            node = where.get((0, tok))
            if node is None:
                node = tree.add(0, tok, cum, src)
                where[(0, tok)] = node
            elif cum > tree.conf[node]:
                tree.conf[node], tree.source[node] = cum, src
            added.append(node)
        return added

    def _expand(self, tree: DraftTree, where: dict, frontier: list[int], d: int) -> list[int]:
        ftoks = np.asarray([tree.tokens[f] for f in frontier])
        fcum = np.asarray([tree.conf[f] for f in frontier], dtype=np.float32)
        ids = self.store.ids[ftoks]  # [f, k]
        bins = conf_bin(self.store.conf[ftoks])  # [f, k]
        cum = fcum[:, None] * self.rates.table("s")[bins]  # [f, k]
        cum = np.where(ids >= 0, cum, -1.0).ravel()
        order = np.argsort(-cum, kind="stable")
        cum_sorted = cum[order]
        keep = self.shaper.level_keep(d, cum_sorted[cum_sorted >= 0], len(tree))
        added = []
        flat_ids, flat_bins = ids.ravel(), bins.ravel()
        for flat in order[:keep].tolist():
            parent, tok = frontier[flat // ids.shape[1]], int(flat_ids[flat])
            node = where.get((parent, tok))
            if node is None:
                node = tree.add(parent, tok, float(cum[flat]), f"s{flat_bins[flat]}")
                where[(parent, tok)] = node
            added.append(node)
        return added

    def _add_context(self, tree: DraftTree, where: dict, seq: ContextIndex) -> None:
        for n, cont in seq.continuations(self.ctx_depth, self.ctx_branches):
            b = match_bucket(n)  # a longer match is likelier to go on copying: rates per bucket
            first, cont_rate = self.rates.rate(f"c{b}"), self.rates.rate(f"cc{b}")
            parent, cum = 0, 1.0
            for j, tok in enumerate(cont):
                src = f"c{b}" if j == 0 else f"cc{b}"
                cum *= first if j == 0 else cont_rate
                node = where.get((parent, tok))
                if node is None:
                    node = tree.add(parent, tok, cum, src)
                    where[(parent, tok)] = node
                elif cum > tree.conf[node]:
                    tree.conf[node], tree.source[node] = cum, src
                parent = node

    def _select(self, tree: DraftTree) -> DraftTree:
        chosen = tree.best_first()  # scores never grow along a path: nothing is skipped
        g = self.shaper.final_size(np.asarray(tree.conf)[chosen])
        return tree.subtree(chosen[:g])

    def learn(self, tree: DraftTree, path: list[int]) -> None:
        """Update the edge acceptance rates from which tested edges were accepted."""
        self.rates.observe(tree.source, tree.parents, path)
