"""A per-server decoding policy for ordinary text, shaped for an engine that verifies chains.

The serving engine verifies one draft per row: O2 tool-call drafts are chains; text drafts
from this object are trees for greedy rows (:meth:`draft_tree`, verified with ancestor masks
in the same batched forward) and the tree's best chain otherwise (:meth:`draft`). After the
forward the engine hands back the verifier's logits so the n-gram store stays fresh. Tool-cache (O2)
drafts take precedence: call :meth:`draft` only when the tool-cache proposer returned nothing.

Hook (engine side, three lines)::

    draft = propose_draft(seq, ctx) or policy.draft(seq.seq_id, seq.tokens)
    ...
    policy.observe(seq.seq_id, root_and_draft_tokens, logits_for_them, n_accepted, verify_s)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .cast import CastShaper, CostTable
from .tree import DraftTree
from .unispec import ContextIndex, NGramStore, Shaper, TopG, TreeDrafter

__all__ = ["DecodingPolicy", "PolicyStats"]

MODES = ("off", "unispec", "cast", "both")


@dataclass
class PolicyStats:
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    verify_s: float = 0.0

    @property
    def tau(self) -> float:
        """Mean tokens emitted per verification (accepted drafts + 1)."""
        return (self.accepted + self.steps) / self.steps if self.steps else 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "tree_steps": self.steps,
            "tree_drafted": self.drafted,
            "tree_accepted": self.accepted,
            "tree_tau": self.tau,
            "tree_mean_draft": self.drafted / self.steps if self.steps else 0.0,
            "tree_verify_s": self.verify_s,
        }


@dataclass
class DecodingPolicy:
    """``mode``: off | unispec | cast | both; one store per server (shared by its rows)."""

    mode: str
    vocab: int
    g: int = 16
    table: CostTable | None = None
    stats: PolicyStats = field(default_factory=PolicyStats)
    _drafter: TreeDrafter | None = field(default=None, init=False, repr=False)
    _ctx: dict[Any, ContextIndex] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"decoding policy must be one of {MODES}; got {self.mode!r}")
        if self.mode == "off":
            return
        shaper: Shaper
        if self.mode in ("cast", "both"):
            if self.table is None:
                raise ValueError(f"policy {self.mode!r} needs a cost table")
            shaper = CastShaper(self.table)
        else:
            shaper = TopG(g=self.g)
        full = self.mode in ("unispec", "both")
        self._drafter = TreeDrafter(NGramStore(self.vocab), shaper, use_context=full, use_next_next=full)

    def draft(self, row: Any, tokens: list[int], batch: int = 1) -> list[int]:
        """A linear draft continuing ``tokens`` (their last token is the root)."""
        tree = self.draft_tree(row, tokens, batch)
        return best_chain(tree) if tree is not None else []

    def draft_tree(self, row: Any, tokens: list[int], batch: int = 1) -> DraftTree | None:
        """A draft tree whose root is the last of ``tokens``; None when the policy is off."""
        if self._drafter is None or len(tokens) < 2:
            return None
        ctx = self._ctx.get(row)
        if ctx is None or ctx.seq != tokens[: len(ctx.seq)]:
            ctx = self._ctx[row] = ContextIndex(tokens)
        else:
            ctx.extend(tokens[len(ctx.seq) :])
        if hasattr(self._drafter.shaper, "begin_step"):
            self._drafter.shaper.begin_step(batch, len(tokens))
        return self._drafter.draft(ctx)

    def fit_batch(self, trees: list[DraftTree]) -> list[DraftTree]:
        """Trees of the rows verified in one step, cut to the width that pays for the batch
        as a whole (CAST's :meth:`~.cast.CastShaper.batch_width`, running-batch form)."""
        shaper = self._drafter.shaper if self._drafter is not None else None
        if len(trees) < 2 or shaper is None or not hasattr(shaper, "batch_width"):
            return trees
        width = shaper.batch_width(trees)
        return [t.top(width) for t in trees]

    def observe_tree(
        self, row: Any, tree: DraftTree, logits: torch.Tensor, path: list[int], verify_s: float = 0.0
    ) -> None:
        """After a tree row was verified: logits [len(tree), V], ``path`` the accepted node ids
        (root first). Refreshes the store at every node and learns the edge rates."""
        if self._drafter is None:
            return
        parents = [self._prev(row)] + [tree.tokens[p] for p in tree.parents[1:]]
        self._drafter.store.refresh(tree.tokens, parents, logits)
        self._drafter.learn(tree, path)
        if hasattr(self._drafter.shaper, "observe"):
            self._drafter.shaper.observe(tree, path)
        self._count(len(tree) - 1, len(path) - 1, verify_s)

    def observe(
        self, row: Any, fed: list[int], logits: torch.Tensor, n_accepted: int, verify_s: float = 0.0
    ) -> None:
        """fed: [d+1] root + draft tokens; logits: [d+1, V] the verifier's outputs for them."""
        if self._drafter is None:
            return
        self._drafter.store.refresh(fed, [self._prev(row)] + fed[:-1], logits)
        self._count(len(fed) - 1, n_accepted, verify_s)

    def _prev(self, row: Any) -> int:
        """The token before the row's root (-1 when unknown): the root's parent in the store."""
        seq = self._ctx[row].seq if row in self._ctx else []
        return seq[-2] if len(seq) > 1 else -1

    def _count(self, drafted: int, accepted: int, verify_s: float) -> None:
        self.stats.steps += 1
        self.stats.drafted += drafted
        self.stats.accepted += accepted
        self.stats.verify_s += verify_s

    def forget(self, row: Any) -> None:
        self._ctx.pop(row, None)


def best_chain(tree: DraftTree) -> list[int]:
    """Tokens of the root-to-node path ending at the deepest best-scored leaf (root excluded)."""
    kids = tree.children()
    node, out = 0, []
    while kids[node]:
        node = max(kids[node], key=lambda i: tree.conf[i])
        out.append(tree.tokens[node])
    return out
