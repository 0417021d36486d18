"""Pure parts of the engine, no model: sampling/verify math, the tool cache, prompt formats,
boundaries and drafting, KV masks, the scheduler."""

from __future__ import annotations

import json

import pytest
import torch

from spectool.errors import ToolCacheError
from spectool_serving.kv import BatchKV
from spectool_serving.sampling import SamplingParams, probs_from_logits
from spectool_serving.scheduler import Scheduler
from spectool_serving.store import ToolOutputStore
from spectool_serving.toolcalls import (
    FORMATS,
    draft_cached_call,
    held_back,
    parse_call,
    render_segments,
    tool_results_text,
)
from spectool_serving.verify import accept_greedy, accept_sampled

from .conftest import WEATHER


def test_accept_greedy_prefix():
    logits = torch.zeros(4, 10)
    for i, t in enumerate([3, 5, 7, 9]):
        logits[i, t] = 1.0
    assert accept_greedy(logits, [3, 5, 7]) == (3, 9)
    assert accept_greedy(logits, [3, 6, 7]) == (1, 5)
    assert accept_greedy(logits, []) == (0, 3)


def test_speculative_sampling_matches_target_distribution():
    p = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(3)
    for _ in range(6000):
        n, tok = accept_sampled(p, [1], g)
        counts[1 if n == 1 else tok] += 1
    assert torch.allclose(counts / counts.sum(), p[0], atol=0.02)  # first token ~ p, draft or not


def test_top_p_below_float32_keeps_the_top_token():
    """Found by the schemathesis fuzz: top_p=5e-324 rounded to 0 in float32, dropped every
    token, and the NaN draw failed the whole engine (500)."""
    probs = probs_from_logits(torch.log(torch.tensor([0.6, 0.3, 0.1])), 1.0, 5e-324)
    assert probs.tolist() == [1.0, 0.0, 0.0]


def test_top_p_keeps_the_nucleus():
    probs = probs_from_logits(torch.log(torch.tensor([0.6, 0.3, 0.1])), 1.0, 0.7)
    assert probs[2] == 0 and torch.isclose(probs.sum(), torch.tensor(1.0))
    assert SamplingParams(temperature=0).greedy


def test_store_keys_ttl_capacity_owner():
    now = [0.0]
    tc = ToolOutputStore(ttl=10, max_entries=2, clock=lambda: now[0])
    tc.open("r", "alice", [WEATHER])
    item = {"name": "get_weather", "params": {"city": "A"}, "output": 1, "keep_alive": 1, "effect": "pure"}
    assert tc.post("r", "alice", [item]) == 1
    assert tc.take("r", "alice", "get_weather", '{"city": "A"}').output == 1  # canonical key: string or dict
    now[0] = 2.0
    assert tc.take("r", "alice", "get_weather", {"city": "A"}) is None  # keep_alive elapsed
    tc.post("r", "alice", [{"name": "get_weather", "params": {"city": c}, "output": c} for c in "BCD"])
    assert [e.output for e in tc.by_name("r", "alice", "get_weather")] == [
        "D",
        "C",
    ]  # capacity 2, newest first
    with pytest.raises(ToolCacheError) as e:
        tc.post("r", "mallory", [])
    assert e.value.status_code == 404  # ids are per tenant: mallory has no "r"
    with pytest.raises(ToolCacheError) as e:
        tc.post("nope", "alice", [])
    assert e.value.status_code == 404
    tc.close("r", "alice")
    with pytest.raises(ToolCacheError) as e:
        tc.post("r", "alice", [])
    assert e.value.status_code == 410


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_tool_results_render_like_the_next_request(name):
    """O3 appends exactly what the next request's prompt holds after the assistant body."""
    fmt = FORMATS[name]
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "X"}'}}
    history = [{"role": "user", "content": "hi"}]
    first = "".join(t for t, _ in render_segments(fmt, history, [WEATHER]))
    body = fmt.render_call("get_weather", '{"city": "X"}')
    nxt = history + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "out"},
    ]
    segs = render_segments(fmt, nxt, [WEATHER])
    assert [b for _, b in segs] == [False, True, False] and segs[1][0] == body
    assert "".join(t for t, _ in segs) == first + body + fmt.eos + tool_results_text(fmt, ["out"])


def test_boundaries_drafts_and_parsing():
    fmt = FORMATS["chatml"]
    assert held_back("hello <tool_", ["<tool_call>"]) == 6 and held_back("hello", ["<tool_call>"]) == 0
    assert fmt.call_start_in("Sure. <tool_call>\n{") == len("Sure. <tool_call>")
    entries = [("get_weather", {"city": "Paris"})]
    assert draft_cached_call(fmt, '\n{"name": "get_', entries) is None  # name not written yet
    rest = draft_cached_call(fmt, '\n{"name": "get_weather", "arguments": ', entries)
    assert rest == '{"city": "Paris"}}\n</tool_call>'
    assert draft_cached_call(fmt, '\n{"name": "get_weather", "arguments": {"city": "R', entries) is None
    assert parse_call(fmt, '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>') == (
        "get_weather",
        '{"city": "Paris"}',
    )
    assert json.loads(parse_call(FORMATS["xlam"], '{"name": "f", "arguments": {}}]')[1]) == {}


def test_kv_mask_sees_valid_slots_and_own_new_tokens():
    kv = BatchKV()
    kv.valid = torch.tensor([[True, False, True], [True, True, False]])
    kv.rows = [1, 2]
    pos, mask = kv.step_inputs([2, 1], torch.float32)
    assert pos.tolist() == [[2, 3], [2, 3]]
    seen = mask[:, 0] == 0
    assert seen[0, 0].tolist() == [True, False, True, True, False]
    assert seen[0, 1].tolist() == [True, False, True, True, True]
    assert seen[1, 0].tolist() == [True, True, False, True, False]
    assert seen[1, 1].tolist() == [False, False, False, False, True]  # padding sees only itself


def test_scheduler_admits_within_budget_and_preempts_newest():
    class S:  # the scheduler reads only tokens/status
        def __init__(self, n):
            self.tokens, self.status = [0] * n, None

    sch = Scheduler(max_batch=2, max_slots=100, prefills_per_step=4)
    a, b, c = S(10), S(10), S(10)
    for s in (a, b, c):
        sch.add(s)
    assert sch.admit(width=0) == [a, b] and list(sch.waiting) == [c]
    assert sch.preempt(slots_after_step=2 * 60, width_after_step=60) == [b]
    assert list(sch.waiting) == [b, c] and sch.running == [a]


def test_kv_tree_row_sees_only_its_ancestors_at_depth_positions_and_keeps_its_path():
    """A text row verified as a tree: node j attends to its ancestors only, sits at position
    valid-count + depth, and after acceptance only the path's slots stay valid."""
    kv = BatchKV()
    kv.valid = torch.tensor([[True, True], [True, False]])
    kv.rows = [1, 2]
    # row 0: root(0) -> a(1) -> b(3); root -> c(2); row 1: a chain of 2
    pos, mask = kv.step_inputs([4, 2], torch.float32, [[-1, 0, 0, 1], None])
    assert pos.tolist() == [[2, 3, 3, 4], [1, 2, 3, 4]]
    seen = mask[:, 0] == 0  # [B, G, C+G]
    assert seen[0, 3].tolist() == [True, True, True, True, False, True]  # b: root, a, itself
    assert seen[0, 2].tolist() == [True, True, True, False, True, False]  # c: root, itself
    assert seen[1, 1].tolist() == [True, False, True, True, False, False]
    kv.cache = None  # commit's compaction needs no tensors when there is no cache
    kv.commit([[0, 1, 3], [0]], 4)
    assert kv.valid.tolist() == [
        [True, True, True, True, False, True],
        [True, False, True, False, False, False],
    ]
    assert kv.step_inputs([1, 1], torch.float32)[0].tolist() == [[5], [2]]


def test_assistant_content_parts_render_as_text():
    """Found by the schemathesis fuzz: list content in an assistant message reached the
    prompt memo unhashed (TypeError → 500)."""
    from spectool_serving.toolcalls import assistant_body

    assert (
        assistant_body(
            FORMATS["chatml"], {"role": "assistant", "content": [{}, {"type": "text", "text": "hi"}]}
        )
        == "hi"
    )


def test_advance_keeps_no_draft_token_after_an_o3_append(monkeypatch):
    """rounds.advance reports how many tokens it kept and stops after the token whose call
    was answered from the store. The per-token step is replaced by a fake that plays that
    append (a real one needs a text draft holding a whole call, which no test model writes)."""
    from types import SimpleNamespace

    import spectool_serving.rounds as rounds

    def one(seq, token, ctx):
        seq.tokens.append(token)
        if token == 7:  # a call ended here and its result was appended
            seq.tokens.extend([100, 101])
        return token != 0  # 0: the sequence finished

    monkeypatch.setattr(rounds, "_advance_one", one)
    seq = SimpleNamespace(tokens=[1])
    assert rounds.advance(seq, [5, 7, 9], None) == 2 and seq.tokens == [1, 5, 7, 100, 101]
    assert rounds.advance(seq, [3, 0, 4], None) == 2 and seq.tokens[-2:] == [3, 0]
    assert rounds.advance(seq, [3, 4], None) == 2
