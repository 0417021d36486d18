"""A per-server decoding policy for ordinary text: the one tree-decoding loop is the engine's.

The serving engine verifies one draft per row: O2 tool-call drafts are chains; text drafts
from this object are trees for greedy rows (:meth:`draft_tree`, verified with ancestor masks
in the same batched forward) and the tree's best chain otherwise (:meth:`draft`). After the
forward the engine hands back the verifier's logits so the n-gram store stays fresh. Tool-cache
(O2) drafts take precedence: the policy drafts only rows the tool cache left without one.

Per engine step (the engine's side)::

    policy.warm(tokens, prefill_logits)        # at admission: the prompt's last positions
    if policy.should_draft(): ...draft_tree / draft per text row, fit_batch...
    policy.observe_tree(...) / policy.observe(...)   # per text row, after the forward
    policy.end_step(tokens, seconds, forward_s)      # the step's text tokens and wall time

``gate``: a :class:`~.gate.DraftGate` turns drafting off while plain steps deliver more
tokens per second (text the model writes fresh), and probes now and then whether it pays again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .cast import CastShaper, CostTable
from .gate import DraftGate
from .tree import DraftTree
from .unispec import ContextIndex, NGramStore, Shaper, TopG, TreeDrafter

__all__ = ["MODES", "DecodingPolicy", "PolicyStats"]

MODES = ("off", "unispec", "cast", "both")
# prompt positions whose verifier top-k seeds the store (they come with the prefill). Each row
# costs an lm_head row and a top-k, about a decode step per 30 rows on 2 AVX-512 cores; 16
# drafted as well as 64 (the quick set, gate off: 156 vs 155 steps unispec, 159 vs 163 both)
WARM_ROWS = 16
# nodes (root included) a probe of a closed gate verifies: whether drafting pays again shows
# in a few best nodes at a fraction of a full tree's forward (cost table, SmolLM2-135M fp32,
# 2 AVX-512 cores: 4 tokens +18 % over 1, 8 tokens +50 %), and text that copies again still
# wins by far on them, so the gate reopens as before
PROBE_NODES = 4


@dataclass
class PolicyStats:
    """Per text row-step: ``steps`` verifications, ``drafted`` nodes, ``accepted`` drafts;
    ``plain_steps``: engine steps the gate decoded without drafting (probes included)."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    verify_s: float = 0.0
    plain_steps: int = 0

    @property
    def tau(self) -> float:
        """Mean tokens emitted per verification (accepted drafts + 1)."""
        return (self.accepted + self.steps) / self.steps if self.steps else 0.0

    @property
    def mean_draft(self) -> float:
        return self.drafted / self.steps if self.steps else 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "tree_steps": self.steps,
            "tree_drafted": self.drafted,
            "tree_accepted": self.accepted,
            "tree_tau": self.tau,
            "tree_mean_draft": self.mean_draft,
            "tree_verify_s": self.verify_s,
        }


@dataclass
class DecodingPolicy:
    """``mode``: unispec | cast | both (``off`` drafts nothing); one store per server, shared
    by its rows. ``table``: the measured forward costs CAST shapes trees by (cast, both)."""

    mode: str
    vocab: int
    g: int = 8
    table: CostTable | None = None
    gate: bool = True
    stats: PolicyStats = field(default_factory=PolicyStats)
    _drafter: TreeDrafter | None = field(default=None, init=False, repr=False)
    _gate: DraftGate | None = field(default=None, init=False, repr=False)
    _ctx: dict[Any, ContextIndex] = field(default_factory=dict, init=False, repr=False)
    _step: bool | None = field(default=None, init=False, repr=False)  # this step drafts
    _step_nodes: int = field(default=0, init=False, repr=False)  # nodes it drafted (all rows)

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
        self._gate = DraftGate() if self.gate else None

    @property
    def warm_rows(self) -> int:
        """Prompt positions whose logits :meth:`warm` wants from the prefill."""
        return WARM_ROWS if self._drafter is not None else 1

    def warm(self, tokens: list[int], logits: torch.Tensor) -> None:
        """Seed the store from a prefill: ``logits`` [m, V] of the last m of ``tokens``."""
        if self._drafter is None or logits.dim() != 2:
            return
        n, m = len(tokens), logits.shape[0]
        parents = [tokens[i - 1] if i else -1 for i in range(n - m, n)]
        self._drafter.store.refresh(tokens[n - m :], parents, logits)

    def should_draft(self) -> bool:
        """Whether this engine step drafts its text rows (the gate's call); one per step."""
        self._step = self._drafter is not None and (self._gate is None or self._gate.should_draft())
        self._step_nodes = 0
        return self._step

    def end_step(self, tokens: int, seconds: float, forward_s: float) -> None:
        """The step's text rows emitted ``tokens`` in ``seconds`` of wall time, ``forward_s``
        of it in the forward: the gate's and CAST's measure of what drafting costs."""
        drafted, self._step = self._step, None
        if drafted is None or self._drafter is None:
            return
        self.stats.plain_steps += not drafted
        if drafted and hasattr(self._drafter.shaper, "note_overhead"):
            self._drafter.shaper.note_overhead(max(seconds - forward_s, 0.0))
        if self._gate is not None:
            self._gate.observe(drafted, tokens, seconds, empty=drafted and not self._step_nodes)

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
        tree = self._drafter.draft(ctx)
        return tree if self._gate is None or self._gate.on else tree.top(PROBE_NODES)

    def fit_batch(self, trees: list[DraftTree]) -> list[DraftTree]:
        """Trees of the rows verified in one step, cut to the width that pays for the batch
        as a whole (CAST's :meth:`~.cast.CastShaper.batch_width`, running-batch form)."""
        shaper = self._drafter.shaper if self._drafter is not None else None
        if len(trees) < 2 or shaper is None or not hasattr(shaper, "batch_width"):
            return trees
        width = shaper.batch_width(trees)
        return [t.top(width) for t in trees]

    def observe_tree(
        self, prev: int, tree: DraftTree, logits: torch.Tensor, path: list[int], verify_s: float = 0.0
    ) -> None:
        """After a tree row was verified: ``prev`` the token before the root, logits
        [len(tree), V], ``path`` the accepted node ids (root first). Refreshes the store at
        every node and learns the edge rates."""
        if self._drafter is None:
            return
        parents = [prev] + [tree.tokens[p] for p in tree.parents[1:]]
        self._drafter.store.refresh(tree.tokens, parents, logits)
        self._drafter.learn(tree, path)
        if hasattr(self._drafter.shaper, "observe"):
            self._drafter.shaper.observe(tree, path)
        self._count(len(tree) - 1, len(path) - 1, verify_s)

    def observe(
        self, prev: int, fed: list[int], logits: torch.Tensor, n_accepted: int, verify_s: float = 0.0
    ) -> None:
        """fed: [d+1] root + draft tokens (``prev`` the token before the root); logits:
        [d+1, V] the verifier's outputs for them."""
        if self._drafter is None:
            return
        if self._step is not False:
            # a step the gate left plain skips the refresh: its softmax top-k over the whole
            # vocabulary costs about what the verifier's own argmax does (~0.1 ms of a 20 ms
            # step on 2 AVX-512 cores), while only the root's entry would change
            self._drafter.store.refresh(fed, [prev] + fed[:-1], logits)
        self._count(len(fed) - 1, n_accepted, verify_s)

    def _count(self, drafted: int, accepted: int, verify_s: float) -> None:
        self._step_nodes += drafted
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
