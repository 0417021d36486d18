"""One engine step as a plan: which rows run, what each feeds, and how each is verified.

nano-vllm's shape, ``schedule -> run -> postprocess``: the engine first decides which rows fit
(preemption included), then builds one :class:`StepPlan` — per KV row the sequence, its
pending tokens and its draft (an O2 cached-call chain, a text chain or a text tree), sized to
what the budget leaves — runs one forward over it, and verifies each row with :func:`verify`,
which returns an :class:`Accepted` saying which tokens were chosen and of which kind the
draft was. Nothing here touches the model or the KV; the engine does.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch

from .sampling import probs_from_logits
from .sequence import Phase, Sequence
from .tree.accept import greedy_tree_accept
from .verify import accept_greedy, accept_sampled

__all__ = ["Accepted", "Kind", "RowPlan", "StepPlan", "choose", "verify"]


class Kind(Enum):
    """Where a row's draft came from (what its acceptance is counted as)."""

    PLAIN = "plain"  # no draft: the pending tokens only
    O2 = "o2"  # a cached call's remaining text
    TEXT = "text"  # the decoding policy's chain
    TREE = "tree"  # the decoding policy's tree (greedy rows)


@dataclass
class RowPlan:
    """One KV row of the step. ``seq`` None: a free row of the KV, fed one padding token."""

    seq: Sequence | None
    kind: Kind = Kind.PLAIN
    draft: list[int] | None = None  # chain drafts; a tree's are ``tree.tokens[1:]``
    tree: Any = None  # tree.DraftTree rooted at the (single) pending token

    @property
    def pending(self) -> list[int]:
        return self.seq.pending if self.seq is not None else []

    @property
    def fed(self) -> list[int]:
        """Token ids this row feeds: pending tokens, then the draft (a tree's nodes)."""
        return [*self.pending, *(self.draft or ())]

    @property
    def parents(self) -> list[int] | None:
        return self.tree.parents if self.tree is not None else None


@dataclass
class StepPlan:
    """The rows of one step, in KV row order; what each feeds is fixed when the plan is
    built (verification then advances the sequences)."""

    rows: list[RowPlan]

    def __post_init__(self) -> None:
        self.fed = [r.fed for r in self.rows]
        self.counts = [len(f) for f in self.fed]
        self.width = max([1, *self.counts])

    def input_ids(self) -> torch.Tensor:
        ids = torch.zeros(len(self.rows), self.width, dtype=torch.long)
        for b, fed in enumerate(self.fed):
            if fed:
                ids[b, : len(fed)] = torch.tensor(fed)
        return ids


@dataclass(frozen=True)
class Accepted:
    """A verified row: ``tokens`` are the accepted draft tokens then the bonus token;
    ``path`` the accepted node ids of a tree row (root first), else None."""

    tokens: list[int]
    kind: Kind
    drafted: int
    path: list[int] | None = None

    @property
    def n_draft(self) -> int:
        return len(self.tokens) - 1


def verify(row: RowPlan, logits: torch.Tensor, grammar: Any) -> Accepted:
    """Verify one row from its logits [G, V] (the step's row ``b``): greedy or sampled chain
    acceptance, or the greedy path of a tree; inside a call the grammar masks every row read."""
    seq = row.seq
    assert seq is not None
    p = len(seq.pending)
    path = None
    if row.tree is not None:
        tree = row.tree
        path, _ = greedy_tree_accept(tree.parents, tree.tokens, logits[: len(tree)].argmax(-1).tolist())
        rows, draft = logits[path], [tree.tokens[i] for i in path[1:]]
    else:
        draft = row.draft or []
        rows = logits[p - 1 : p + len(draft)]
    n_acc, nxt, offered = choose(seq, rows, draft, grammar)
    drafted = len(row.tree) - 1 if row.tree is not None else offered
    return Accepted([*draft[:n_acc], nxt], row.kind, drafted, None if path is None else path[: 1 + n_acc])


def choose(seq: Sequence, logits: torch.Tensor, draft: list[int], grammar: Any) -> tuple[int, int, int]:
    """(accepted draft tokens, next token, draft tokens the grammar let through) from logits
    [d+1, V] for ``draft`` [d]."""
    logits = logits.cpu()  # the d+1 rows sampling reads; the rest stays on the device
    if seq.phase is Phase.CALL:
        allowed, k = grammar.masks(seq.matcher, draft)
        draft, logits = draft[:k], logits[: k + 1].masked_fill(~allowed, float("-inf"))
    if seq.params.greedy:
        n, nxt = accept_greedy(logits, draft)
    else:
        probs = probs_from_logits(logits, seq.params.temperature, seq.params.top_p)
        n, nxt = accept_sampled(probs, draft, seq.generator)
    return n, nxt, len(draft)
