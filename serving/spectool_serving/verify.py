"""Speculative acceptance math: greedy prefix match and standard speculative sampling.

A draft of ``d`` tokens is verified from ``d + 1`` target rows: row ``i`` predicts the token
after ``draft[:i]``. Both rules return ``(n_accepted, next_token)``; the output distribution
equals plain decoding (greedy: the very same tokens). Drafts here are deterministic (a cached
tool call), so the draft distribution ``q`` is one-hot and the residual is ``p`` without the
rejected token.
"""

from __future__ import annotations

import torch

__all__ = ["accept_greedy", "accept_sampled"]


def accept_greedy(logits: torch.Tensor, draft: list[int]) -> tuple[int, int]:
    """logits [d+1, V], draft [d] -> (longest prefix equal to the argmax path, token after it)."""
    target = torch.argmax(logits, dim=-1).tolist()  # [d+1]
    n = 0
    while n < len(draft) and draft[n] == target[n]:
        n += 1
    return n, int(target[n])


def accept_sampled(
    probs: torch.Tensor, draft: list[int], generator: torch.Generator | None
) -> tuple[int, int]:
    """probs [d+1, V] (already temperature/top-p processed), one-hot draft [d].

    Accept draft token x_i with probability p_i(x_i); on the first rejection draw from the
    residual max(p_i - q_i, 0) normalized, i.e. p_i with x_i removed; after a full accept draw
    the bonus token from p_d.
    """
    for i, x in enumerate(draft):
        u = torch.rand((), generator=generator)
        if u < probs[i, x]:
            continue
        residual = probs[i].clone()
        residual[x] = 0.0
        if float(residual.sum()) <= 0.0:  # p_i was one-hot on x yet u >= 1: float edge, accept
            continue
        return i, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
    return len(draft), int(torch.multinomial(probs[len(draft)], 1, generator=generator))
