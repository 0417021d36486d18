"""The decoding loop: autoregressive or tree speculative decoding, batch size 1 or more.

Policies: ``ar`` (a root-only tree: plain decoding through the same code path), ``unispec``
(store + next-next + context drafting, top-g* nodes), ``cast`` (store drafting shaped by
CAST's cost-aware breadth/depth pruning and reranking), ``both`` (UniSpec drafting shaped by
CAST). Greedy when ``temperature == 0``, otherwise multi-draft speculative sampling.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .accept import greedy_tree_accept, sample_tree_accept
from .gate import DraftGate
from .tree import DraftTree
from .unispec import ContextIndex, NGramStore, TopG, TreeDrafter
from .verifier import TreeVerifier

__all__ = ["POLICIES", "DecodeResult", "decode", "make_drafter"]

POLICIES = ("ar", "unispec", "cast", "both")
WARM_POSITIONS = 64  # prompt positions whose verifier top-k seeds the store


@dataclass
class DecodeResult:
    outputs: list[list[int]]  # generated tokens per row (EOS included when hit)
    steps: int = 0
    accepted: list[int] = field(default_factory=list)  # tokens emitted per row-step
    draft_sizes: list[int] = field(default_factory=list)  # nodes verified per row-step
    verify_s: float = 0.0  # time in tree forwards
    draft_s: float = 0.0
    total_s: float = 0.0
    prefill_s: float = 0.0  # the prompt's forward (and the store's warm-up rows with it)
    plain_steps: int = 0  # steps the gate decoded without drafting (probes included)

    @property
    def tau(self) -> float:
        """Mean tokens emitted per verification (accepted drafts + the bonus token)."""
        return float(np.mean(self.accepted)) if self.accepted else 0.0

    @property
    def mean_draft(self) -> float:
        return float(np.mean(self.draft_sizes)) if self.draft_sizes else 0.0


def make_drafter(
    policy: str, vocab: int, *, g: int = 16, cast: Any = None, k: int = 10, depth: int = 10, r: float = 0.05
) -> TreeDrafter | None:
    """The drafter for a policy; ``cast`` is a :class:`~.cast.CastShaper` for cast/both."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}; got {policy!r}")
    if policy == "ar":
        return None
    store = NGramStore(vocab, k)
    full = policy in ("unispec", "both")
    shaper = cast if policy in ("cast", "both") else TopG(g=g, k=k, r=r)
    if shaper is None:
        raise ValueError(f"policy {policy!r} needs a CAST shaper (cost tables)")
    return TreeDrafter(store, shaper, depth=depth, use_context=full, use_next_next=full)


def _store_update(
    drafter: TreeDrafter, logits: torch.Tensor, trees: list[DraftTree], prev: list[int]
) -> None:
    """Refresh the store from the verifier's top-k at every real node (one top-k call)."""
    rows, toks, pars = [], [], []
    for b, t in enumerate(trees):
        for i, (tok, par) in enumerate(zip(t.tokens, t.parents)):
            rows.append((b, i))
            toks.append(tok)
            pars.append(t.tokens[par] if par >= 0 else prev[b])
    idx_b = torch.tensor([r[0] for r in rows])
    idx_i = torch.tensor([r[1] for r in rows])
    drafter.store.refresh(toks, pars, logits[idx_b, idx_i])


def _warm_store(drafter: TreeDrafter, logits: list[torch.Tensor], prompts: list[list[int]]) -> None:
    """Seed the store from the prefill's logits of the last prompt positions (they come
    almost free with the prompt)."""
    for b, p in enumerate(prompts):
        n = len(p) - 1  # prefix length (the last prompt token is the first root)
        m = logits[b].shape[0]  # logits cover the last m positions of the prefix
        pars = [p[i - 1] if i else -1 for i in range(n - m, n)]
        drafter.store.refresh(p[n - m : n], pars, logits[b])


def decode(
    model: Any,
    prompts: list[list[int]],
    max_new_tokens: int,
    policy: str = "unispec",
    *,
    drafter: TreeDrafter | None = None,
    g: int = 16,
    cast: Any = None,
    temperature: float = 0.0,
    eos: int | set[int] | None = None,
    generator: torch.Generator | None = None,
    on_step: Any = None,
    gate: bool = True,
) -> DecodeResult:
    """Decode ``max_new_tokens`` per prompt with ``policy``; returns outputs and metrics.

    ``cast`` (a :class:`~.cast.CastShaper`) shapes the ``cast``/``both`` trees, and its cost
    table also pads every forward to the cheapest width that holds the tree (CPU math
    libraries change kernels with the row count). ``gate``: a :class:`~.gate.DraftGate`
    turns drafting off while plain steps deliver more tokens per second.
    """
    from ..backends import verify_kernels

    t_start = time.perf_counter()
    with verify_kernels(model):  # once for the whole loop rather than per forward
        res = _decode(
            model,
            prompts,
            max_new_tokens,
            policy,
            drafter,
            g,
            cast,
            temperature,
            eos,
            generator,
            on_step,
            gate,
        )
    res.total_s = time.perf_counter() - t_start
    return res


def _decode(
    model: Any,
    prompts: list[list[int]],
    max_new_tokens: int,
    policy: str,
    drafter: TreeDrafter | None,
    g: int,
    cast: Any,
    temperature: float,
    eos: int | set[int] | None,
    generator: torch.Generator | None,
    on_step: Any,
    gate: bool,
) -> DecodeResult:
    stops = {eos} if isinstance(eos, int) else set(eos or ())
    if drafter is None and policy != "ar":
        drafter = make_drafter(policy, model.config.vocab_size, g=g, cast=cast)
    table = getattr(cast, "table", None)
    verifier = TreeVerifier(model)
    t_pre = time.perf_counter()
    pre_logits, _ = verifier.prefill(prompts, WARM_POSITIONS if drafter else 1)
    prefill_s = time.perf_counter() - t_pre
    if drafter is not None:
        _warm_store(drafter, pre_logits, prompts)
    seqs = [ContextIndex(p) for p in prompts]
    outs: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    res = DecodeResult(outs, prefill_s=prefill_s)
    gated = DraftGate() if gate and drafter is not None else None
    while not all(done):
        t0 = time.perf_counter()
        drafting = drafter is not None and (gated is None or gated.should_draft())
        if drafter is not None and drafting:
            left = [max_new_tokens - len(o) for o in outs]
            trees = _draft(drafter, seqs, done, left, verifier.length, cast is not None)
        else:
            trees = [DraftTree.root(s.seq[-1]) for s in seqs]
        t1 = time.perf_counter()
        width = max(len(t) for t in trees)
        if table is not None:
            width = table.best_width(len(prompts), verifier.length, width)
        logits = verifier.forward(trees, width)
        t2 = time.perf_counter()
        paths, bonus = _accept(trees, logits, temperature, generator)
        verifier.commit(paths)
        if drafter is not None:
            _store_update(drafter, logits, trees, [s.seq[-2] for s in seqs])
            for t, p, d in zip(trees, paths, done):
                if not d and drafting:  # a plain step tests no edge: nothing to learn
                    drafter.learn(t, p)
                    if hasattr(drafter.shaper, "observe"):
                        drafter.shaper.observe(t, p)
                    if on_step is not None:
                        on_step(t, p)
        res.steps += 1
        res.verify_s += t2 - t1
        res.draft_s += t1 - t0
        if drafter is not None and drafting and hasattr(drafter.shaper, "note_overhead"):
            drafter.shaper.note_overhead(time.perf_counter() - t0 - (t2 - t1))
        res.plain_steps += drafter is not None and not drafting
        emitted = len(res.accepted)
        for b, (t, p) in enumerate(zip(trees, paths)):
            if done[b]:
                continue
            new = [t.tokens[i] for i in p[1:]] + [bonus[b]]
            res.accepted.append(len(new))
            res.draft_sizes.append(len(t))
            seqs[b].extend(new)
            for tok in new:
                outs[b].append(tok)
                if tok in stops or len(outs[b]) >= max_new_tokens:
                    done[b] = True
                    break
        if gated is not None:
            gated.observe(drafting, sum(res.accepted[emitted:]), time.perf_counter() - t0)
    return res


def _draft(
    drafter: TreeDrafter, seqs: list[ContextIndex], done: list[bool], left: list[int], ctx: int, cast: bool
) -> list[DraftTree]:
    """One tree per row (a bare root for finished rows), cut to one width for a batch."""
    if cast and hasattr(drafter.shaper, "begin_step"):
        drafter.shaper.begin_step(len(seqs), ctx)
    trees = [DraftTree.root(s.seq[-1]) if d else drafter.draft(s) for s, d in zip(seqs, done)]
    if len(trees) > 1 and hasattr(drafter.shaper, "batch_width"):
        live = [b for b, d in enumerate(done) if not d]  # a fixed batch: see batch_width
        w = drafter.shaper.batch_width([trees[b] for b in live], [left[b] for b in live])
        trees = [t.top(w) for t in trees]
    return trees


def _accept(
    trees: list[DraftTree], logits: torch.Tensor, temperature: float, generator: torch.Generator | None
) -> tuple[list[list[int]], list[int]]:
    paths, bonus = [], []
    if temperature <= 0:
        target = logits.argmax(-1).tolist()  # [B, G]
        for b, t in enumerate(trees):
            p, x = greedy_tree_accept(t.parents, t.tokens, target[b][: len(t)])
            paths.append(p)
            bonus.append(x)
        return paths, bonus
    for b, t in enumerate(trees):
        probs = torch.softmax(logits[b, : len(t)].float() / temperature, dim=-1)
        p, x = sample_tree_accept(t.parents, t.tokens, probs, generator)
        paths.append(p)
        bonus.append(x)
    return paths, bonus
