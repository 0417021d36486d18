"""Greedy tree acceptance: the engine verifies greedy rows' trees with it (sampled rows
verify the tree's best chain, :mod:`spectool_serving.verify`)."""

from __future__ import annotations

__all__ = ["greedy_tree_accept"]


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
