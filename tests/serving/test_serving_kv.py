"""The block-table KV: rows join and leave a preallocated pool without moving anyone else.

A tiny random Llama (no weights travel in tests) provides real prefill caches."""

from __future__ import annotations

import torch

from spectool_serving.kv import BatchKV
from spectool_serving.runner import Runner
from tests.tree_fixtures import tiny_llama


def _runner():
    return Runner(tiny_llama(4, 2, seed=5), "cpu")


def _snapshot(kv, seq_id):
    """Row ``seq_id``'s KV: (row index, its storage address, a copy of its valid slots)."""
    r = kv.row_of(seq_id)
    keys = kv.cache.layers[0].keys
    return r, keys[r].data_ptr(), keys[r][:, kv.valid[r]].clone()


def test_join_and_leave_neither_reallocate_nor_move_other_rows():
    runner = _runner()
    kv = BatchKV(rows=4, slots=64)
    for seq_id, n in ((1, 9), (2, 5), (3, 7)):
        kv.join(seq_id, runner.prefill(list(range(1, n + 1)))[1])
    pools = [(k.data_ptr(), v.data_ptr()) for k, v in kv._pool]
    reserved = kv.memory()["reserved"]
    before = _snapshot(kv, 2)

    kv.leave({1})  # row 0 becomes free: row 2 stays where it is
    assert kv.rows == [None, 2, 3]
    kv.join(4, runner.prefill(list(range(20, 31)))[1])  # a longer prompt takes the free row
    assert kv.rows == [4, 2, 3] and kv.length(4) == 11
    kv.leave({3})  # the last row: the live span shrinks
    assert kv.rows == [4, 2]

    after = _snapshot(kv, 2)
    assert after[:2] == before[:2] and torch.equal(after[2], before[2])
    assert [(k.data_ptr(), v.data_ptr()) for k, v in kv._pool] == pools
    assert kv.reallocations == 0 and kv.memory()["reserved"] == reserved
    # the cache the forward sees is a view of the pool, not a copy
    assert kv.cache.layers[0].keys.data_ptr() == kv._pool[0][0].data_ptr()


def test_outgrowing_the_pool_reallocates_once_and_keeps_the_rows():
    """Negative control for the test above: past the preallocated rows the pool does move."""
    runner = _runner()
    kv = BatchKV(rows=1, slots=64)
    kv.join(1, runner.prefill([1, 2, 3])[1])
    ptr = kv._pool[0][0].data_ptr()
    before = _snapshot(kv, 1)[2]
    kv.join(2, runner.prefill([4, 5])[1])
    assert kv.reallocations == 1 and kv._pool[0][0].data_ptr() != ptr
    assert torch.equal(_snapshot(kv, 1)[2], before)


def test_a_step_over_a_free_row_matches_the_batch_without_it():
    """A free row inside the live span is fed padding that sees only itself: the other rows'
    logits equal a batch that never had it."""
    runner = _runner()
    prompts = {1: [5, 6, 7, 8], 2: [9, 10, 11], 3: [12, 13, 14, 15, 16]}

    def step(kv, rows):
        counts = [1 if r is not None else 0 for r in kv.rows]
        ids = torch.tensor([[prompts[r][-1] if r is not None else 0] for r in kv.rows])
        pos, mask = kv.step_inputs(counts, runner.dtype)
        logits = runner.forward(ids, pos, mask, kv.cache)
        return {r: logits[b, 0] for b, r in enumerate(kv.rows) if r in rows}

    holed = BatchKV()
    for i in (1, 2, 3):
        holed.join(i, runner.prefill(prompts[i][:-1])[1])
    holed.leave({2})
    dense = BatchKV()
    for i in (1, 3):
        dense.join(i, runner.prefill(prompts[i][:-1])[1])
    a, b = step(holed, {1, 3}), step(dense, {1, 3})
    assert holed.rows == [1, None, 3] and dense.rows == [1, 3]
    for i in (1, 3):
        torch.testing.assert_close(a[i], b[i], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(a[1], a[3])  # different rows do differ (the check can fail)


def test_memory_reports_reserved_and_used_bytes():
    runner = _runner()
    kv = BatchKV()
    assert kv.memory() == {"reserved": 0, "in_use": 0, "rows": 0, "slots": 0}
    kv.join(1, runner.prefill([1, 2, 3, 4])[1])
    m = kv.memory()
    per_slot = 2 * 3 * 2 * 12 * 4  # K and V, 3 layers, 2 KV heads, head dim 12, fp32
    assert m["in_use"] == 4 * per_slot and m["reserved"] == m["rows"] * m["slots"] * per_slot
    kv.leave({1})
    assert kv.memory()["in_use"] == 0 and kv.memory()["reserved"] == m["reserved"]
