"""The suffix index (longest earlier match of the current suffix) and its drafts."""

from __future__ import annotations

import random

import numpy as np
import pytest

from spectool_serving.tree.suffix import MATCH_BUCKETS, SuffixIndex, match_bucket
from spectool_serving.tree.unispec import ContextIndex, NGramStore, TopG, TreeDrafter


def _brute(seq: list[int], max_match: int) -> list[tuple[int, int]]:
    """(position, match length) of every earlier occurrence of the last token, best first."""
    n, out = len(seq), []
    for p in range(n - 1):
        m = 0
        while m < max_match and p - m >= 0 and seq[p - m] == seq[n - 1 - m]:
            m += 1
        if m:
            out.append((p, m))
    return sorted(out, key=lambda x: (-x[1], -x[0]))


def test_longest_match_beats_a_more_recent_shorter_one():
    # the suffix 9 1 2 3 4 5 matched 6 tokens deep at the start, only 4 deep (2 3 4 5) later:
    # an n-gram lookup capped at 4 takes the later one (-> 8), the longest match the first (-> 7)
    seq = [9, 1, 2, 3, 4, 5, 7, 6, 2, 3, 4, 5, 8, 9, 1, 2, 3, 4, 5]
    conts = SuffixIndex(seq).continuations(depth=3, branches=2)
    assert conts == [(6, [7, 6, 2]), (4, [8, 9, 1])]


def test_ties_go_to_the_most_recent_occurrence():
    idx = ContextIndex([1, 2, 3, 4, 9, 2, 3, 5, 6, 2, 3])
    assert idx.continuations(depth=2, branches=3) == [(2, [5, 6]), (2, [4, 9])]


@pytest.mark.parametrize("seed", range(6))
def test_matches_equal_a_brute_force_search(seed):
    rng = random.Random(seed)
    seq = [rng.randrange(4) for _ in range(rng.randrange(2, 120))]
    idx = SuffixIndex(seq[:5], max_match=7)
    idx.extend(seq[5:])  # grown in pieces, as a decoding loop does
    pos, length = idx.matches()
    assert list(zip(pos.tolist(), length.tolist())) == _brute(seq, 7)


def test_candidates_are_the_latest_occurrences_and_limits_are_checked():
    idx = SuffixIndex([3] * 20, max_match=5, max_candidates=4)
    pos, length = idx.matches()
    assert pos.tolist() == [18, 17, 16, 15] and length.tolist() == [5, 5, 5, 5]
    assert SuffixIndex([1]).continuations(4, 2) == []
    with pytest.raises(ValueError):
        SuffixIndex([1, 2], max_match=0)


def test_match_buckets():
    assert [match_bucket(n) for n in (1, 4, 5, 7, 8, 31, 32, 500)] == [1, 4, 4, 6, 8, 24, 32, 32]
    assert match_bucket(0) == 1 and MATCH_BUCKETS[0] == 1


def test_drafter_scores_context_chains_by_their_match_bucket_and_learns_them():
    store = NGramStore(vocab=20, k=2)
    drafter = TreeDrafter(store, TopG(g=40, k=2, r=0.0), depth=2, use_next_next=False)
    seq = [9, 1, 2, 3, 4, 5, 7, 6, 2, 3, 4, 5, 8, 9, 1, 2, 3, 4, 5]
    tree = drafter.draft(ContextIndex(seq))
    kids = {tree.tokens[i]: i for i in range(1, len(tree)) if tree.parents[i] == 0}
    assert {t: tree.source[i] for t, i in kids.items()} == {7: "c6", 8: "c4"}
    assert tree.conf[kids[7]] > tree.conf[kids[8]]  # the longer match is the likelier (priors)
    # what is learned is learned per bucket: the c6 chain missed, the c4 one hit
    before = drafter.rates.rate("c6"), drafter.rates.rate("c4")
    drafter.learn(tree, [0, kids[8]])
    assert drafter.rates.rate("c6") < before[0] and drafter.rates.rate("c4") > before[1]
    assert np.isclose(drafter.rates.rate("c32"), drafter.rates.priors["c32"])
