"""Engine mode with a write on the real SmolLM2 (fp32, greedy): issue 18 items 1 (server half)
and 6.

The agent's world changes between calls: after every tool result it sees, the client writes
a new value (what ``write_file`` would do), so a read served twice from one posted entry
would be stale. The reference runs every call on the client; the engine path posts each
turn's read-only output to that turn's response and must give the same transcript."""

from __future__ import annotations

import json

import pytest

from .conftest import WEATHER_REQUEST
from .helpers import normalized, run_request, transcript_of

pytestmark = pytest.mark.model

CALLS = 3


def _world_agent(engine, speculate: bool, effect: str = "read_only"):
    """Client loop over a mutable world: every tool result the client sees is followed by a
    write; the speculating client posts the world's current value to each new response."""
    world = {"version": 0}
    engine.ctx.max_rounds = CALLS
    messages = list(WEATHER_REQUEST["messages"])

    def read(args):
        return json.dumps({"city": args.get("city"), "version": world["version"]})

    def post_now(rid):
        for city in ("Paris", "paris"):
            engine.store.post(
                rid,
                "",
                [
                    {
                        "name": "get_weather",
                        "params": {"city": city},
                        "output": read({"city": city}),
                        "effect": effect,
                    }
                ],
            )

    while sum(m["role"] == "assistant" for m in messages) < CALLS:
        fin = run_request(
            engine, {**WEATHER_REQUEST, "messages": messages}, before=post_now if speculate else None
        )
        new = transcript_of(fin)
        for _ in fin["resolved"]:
            world["version"] += 1  # the client acts on each result it is shown
        messages += new
        call = fin["tool_call"]
        if call is None:
            break
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": read(json.loads(call["function"]["arguments"])),
            }
        )
        world["version"] += 1
    return messages[: 1 + 2 * CALLS]


def test_engine_never_serves_a_read_across_a_write(engine):
    reference = _world_agent(engine, speculate=False)
    assert sum(m["role"] == "tool" for m in reference) == CALLS
    assert len({m["content"] for m in reference if m["role"] == "tool"}) == CALLS  # each read saw a write
    hits = engine.counters()["o3_hits"]
    served = _world_agent(engine, speculate=True)
    assert normalized(served) == normalized(reference)
    assert engine.counters()["o3_hits"] > hits  # the engine did resolve calls from the store


def test_forced_choice_splices_a_read_only_entry_once_and_a_pure_one_again(engine):
    engine.ctx.max_rounds = 4
    args = {}

    def post(effect):
        def before(rid):
            engine.store.post(
                rid, "", [{"name": "get_weather", "params": args, "output": "sunny", "effect": effect}]
            )

        return before

    first = run_request(engine, WEATHER_REQUEST)
    args.update(json.loads(first["tool_call"]["function"]["arguments"]))
    once = run_request(engine, WEATHER_REQUEST, before=post("read_only"))
    assert len(once["resolved"]) == 1 and once["tool_call"] is not None
    again = run_request(engine, WEATHER_REQUEST, before=post("pure"))
    assert len(again["resolved"]) > 1  # the model repeats the call; a pure result may be reused


def test_a_call_cut_off_by_max_tokens_leaks_no_marker(engine):
    for max_tokens in (3, 6, 10):
        fin = run_request(engine, {**WEATHER_REQUEST, "max_tokens": max_tokens})
        assert fin["reason"] == "length" and fin["tool_call"] is None
        assert "<tool_call>" not in (fin["content"] or "") and "<tool_call>" not in fin["streamed"]
