"""Longest suffix matches over one growing token sequence (prompt + output).

SuffixDecoding's idea without its suffix tree: what follows the *longest* earlier match of
the current suffix is the best guess of what comes next, and the longer the match, the
likelier the copy goes on (a tool call's JSON repeating an earlier one, a quoted file name).
Prompt lookup fixes the n-gram size (vLLM: 2-4); here every earlier occurrence of the last
token is a candidate and its match length is measured backwards, vectorised over candidates,
up to ``max_match``. Ties go to the most recent occurrence (the latest turn is the likeliest
to be repeated).

Pure numpy, no model: the drafter turns each ``(match length, continuation)`` into a chain of
the draft tree, scored by acceptance rates learned per match-length bucket.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MATCH_BUCKETS", "SuffixIndex", "match_bucket"]

# match lengths are pooled into these buckets for their learned acceptance rates
MATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def match_bucket(n: int) -> int:
    """The largest bucket ≤ ``n`` (n ≥ 1)."""
    return max(b for b in MATCH_BUCKETS if b <= max(n, 1))


class SuffixIndex:
    """Token -> its positions, over a growing sequence; longest-match continuations.

    ``seq`` is the sequence as a list (the drafter reads its last tokens); a numpy copy is
    kept alongside for the vectorised match.
    """

    def __init__(self, tokens: list[int], max_match: int = 32, max_candidates: int = 256) -> None:
        if max_match < 1 or max_candidates < 1:
            raise ValueError("max_match and max_candidates must be >= 1")
        self.seq: list[int] = []
        self.max_match = max_match
        self.max_candidates = max_candidates
        self._buf = np.zeros(max(64, 2 * len(tokens)), dtype=np.int64)
        self._where: dict[int, list[int]] = {}
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        n = len(self.seq)
        if n + len(tokens) > len(self._buf):
            self._buf = np.concatenate([self._buf, np.zeros(n + len(tokens), dtype=np.int64)])
        for i, t in enumerate(tokens):
            t = int(t)
            self.seq.append(t)
            self._buf[n + i] = t
            self._where.setdefault(t, []).append(n + i)

    def matches(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions p, match lengths) of earlier occurrences of the current suffix, best
        first: longest match, then most recent. ``seq[p + 1:]`` is what followed there."""
        n = len(self.seq)
        if n < 2:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        occ = self._where[self.seq[-1]]
        # the last occurrence is the suffix itself; keep the most recent earlier ones
        cand = np.asarray(occ[-1 - self.max_candidates : -1], dtype=np.int64)
        length = np.ones(len(cand), dtype=np.int64)
        alive = np.ones(len(cand), dtype=bool)
        buf = self._buf
        for back in range(1, min(self.max_match, n - 1)):
            idx = cand - back
            alive &= idx >= 0
            alive[alive] = buf[idx[alive]] == buf[n - 1 - back]
            if not alive.any():
                break
            length += alive
        order = np.lexsort((-cand, -length))  # primary: longer match; then: later position
        return cand[order], length[order]

    def continuations(self, depth: int, branches: int) -> list[tuple[int, list[int]]]:
        """Up to ``branches`` distinct (match length, following tokens) pairs, best first."""
        out: list[tuple[int, list[int]]] = []
        seen: set[tuple[int, ...]] = set()
        pos, length = self.matches()
        for p, m in zip(pos.tolist(), length.tolist()):
            cont = tuple(self.seq[p + 1 : p + 1 + depth])
            if cont and cont not in seen:
                seen.add(cont)
                out.append((m, list(cont)))
                if len(out) >= branches:
                    break
        return out
