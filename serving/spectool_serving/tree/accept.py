"""Acceptance rules, one small pure function each (notation of the speculative-sampling papers).

``p`` is the target (verifier) distribution at a node, ``q_i`` the distribution the i-th child
draft ``x_i`` was drawn from. Deterministic drafters (n-gram store, context match) have
``q_i = onehot(x_i)``.
"""

from __future__ import annotations

import torch

__all__ = ["greedy_tree_accept", "recursive_rejection", "sample_tree_accept"]


def greedy_tree_accept(parents: list[int], tokens: list[int], target: list[int]) -> tuple[list[int], int]:
    """Greedy: follow the child whose token equals ``target[node]`` (the verifier's argmax).

    parents, tokens, target: [g]. Returns (accepted path of node ids starting at the root 0,
    bonus token = target at the path's last node). Lossless: the emitted tokens are exactly
    what step-by-step argmax decoding would produce.
    """
    kids: dict[tuple[int, int], int] = {}
    for i in range(1, len(parents)):
        kids.setdefault((parents[i], tokens[i]), i)
    path = [0]
    while (nxt := kids.get((path[-1], target[path[-1]]))) is not None:
        path.append(nxt)
    return path, int(target[path[-1]])


def recursive_rejection(
    p: torch.Tensor, drafts: list[int], q: torch.Tensor, u: torch.Tensor
) -> tuple[int, torch.Tensor]:
    """Multi-draft speculative sampling at one node (recursive rejection, SpecInfer-style).

    p: [V] target probs; drafts: [m] child tokens x_1..x_m; q: [m, V] their draft
    distributions; u: [m] uniforms in [0, 1). Child i is tried against the current residual
    p_i: accept iff u_i < p_i(x_i) / q_i(x_i); otherwise p_{i+1} = norm(max(0, p_i - q_i)).
    Returns (index of the accepted child or -1, the residual after all rejections [V]).
    Whatever happens, the token that leaves this node is distributed exactly as p.
    """
    r = p.clone()
    for i, x in enumerate(drafts):
        qx = float(q[i, x])
        if qx > 0 and float(u[i]) < min(1.0, float(r[x]) / qx):
            return i, r
        r = torch.clamp(r - q[i], min=0.0)
        total = float(r.sum())
        if total <= 0:  # p == q_i exactly: q_i was certain to be accepted; keep p as fallback
            r = p.clone()
        else:
            r = r / total
    return -1, r


def sample_tree_accept(
    parents: list[int], tokens: list[int], probs: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[list[int], int]:
    """Stochastic tree acceptance for deterministic drafts; probs: [g, V] target distributions.

    Walk from the root: at each node run :func:`recursive_rejection` over its children
    (one-hot ``q``); descend into the accepted child, or stop and sample the bonus token from
    the residual. Returns (accepted path of node ids from 0, bonus token).
    """
    kids: list[list[int]] = [[] for _ in parents]
    for i in range(1, len(parents)):
        kids[parents[i]].append(i)
    vocab = probs.shape[-1]
    path = [0]
    while True:
        node = path[-1]
        drafts = [tokens[c] for c in kids[node]]
        q = torch.zeros(len(drafts), vocab, dtype=probs.dtype)
        if drafts:
            q[torch.arange(len(drafts)), torch.tensor(drafts)] = 1.0
        u = torch.rand(len(drafts), generator=generator)
        hit, residual = recursive_rejection(probs[node], drafts, q, u)
        if hit < 0:
            return path, int(torch.multinomial(residual, 1, generator=generator))
        path.append(kids[node][hit])
