"""Lossless O2/O3 on the real SmolLM2 (fp32, greedy) and the counters that prove O3.

One scripted agent: the model must call ``get_weather`` (tool_choice=required), the client
runs it, twice. Reference = plain decoding with client-run tools (every call a miss). The
engine path with a full hit, with a partial hit (O2 rejects mid-call, O3 misses) and with a
miss must each give exactly the reference transcript.
"""

from __future__ import annotations

import json

import pytest

from .conftest import WEATHER_REQUEST, weather_tool
from .helpers import agent, normalized, run_request

pytestmark = pytest.mark.model

CALLS = 2  # assistant messages per transcript


def _agent(engine, speculate=None):
    engine.ctx.max_rounds = CALLS - 1  # the engine resolves at most as many calls as the client loop
    messages = list(WEATHER_REQUEST["messages"])
    finishes = []
    while sum(m["role"] == "assistant" for m in messages) < CALLS:
        msgs, fins = agent(
            engine, {**WEATHER_REQUEST, "messages": messages}, weather_tool, turns=1, speculate=speculate
        )
        messages, finishes = msgs, finishes + fins
    return messages, finishes


@pytest.fixture(scope="module")
def reference(smol):
    from spectool_serving.server import build_engine

    eng = build_engine(loaded=smol)
    messages, finishes = _agent(eng)
    return messages, finishes, eng.counters()


def test_reference_calls_the_tool(reference):
    messages, finishes, counters = reference
    calls = [m["tool_calls"][0]["function"] for m in messages if m.get("tool_calls")]
    assert len(calls) == CALLS and all(c["name"] == "get_weather" for c in calls)
    assert all(isinstance(json.loads(c["arguments"]).get("city"), str) for c in calls)
    # plain path: every call leaves the batch and the next request re-prefills the history
    assert counters["left_batch"] == len(finishes) == CALLS
    assert counters["reprefilled_tokens"] > 0
    assert counters["o3_hits"] == 0


def _post_reference_outputs(engine, messages):
    calls = [m["tool_calls"][0]["function"] for m in messages if m.get("tool_calls")]

    def speculate(rid, _history):
        items = [
            {
                "name": c["name"],
                "params": json.loads(c["arguments"]),
                "output": weather_tool(json.loads(c["arguments"])),
            }
            for c in calls
        ]
        assert engine.store.post(rid, "", items) == len(items)

    return speculate


def test_full_hit_is_lossless_and_stays_in_batch(engine, reference):
    ref_messages, ref_finishes, _ = reference
    messages, finishes = _agent(engine, _post_reference_outputs(engine, ref_messages))
    assert normalized(messages) == normalized(ref_messages)
    c = engine.counters()
    assert len(finishes) == 1 and c["o3_hits"] == 1
    # O3: only the first prompt was prefilled, nothing re-prefilled, one exit at the very end
    assert c["prefill_tokens"] == ref_finishes[0]["usage"]["prompt_tokens"]
    assert c["reprefilled_tokens"] == 0 and c["left_batch"] == 1
    # O2: the cached arguments were drafted and accepted
    assert c["o2_drafted"] > 0 and c["o2_accepted"] == c["o2_drafted"]


def test_partial_hit_rejects_mid_call_and_is_lossless(engine, reference):
    ref_messages, _, _ = reference
    city = json.loads(
        [m for m in ref_messages if m.get("tool_calls")][0]["tool_calls"][0]["function"]["arguments"]
    )["city"]
    wrong = "Rome" if city != "Rome" else "Oslo"

    def speculate(rid, _history):
        engine.store.post(rid, "", [{"name": "get_weather", "params": {"city": wrong}, "output": "x"}])

    messages, finishes = _agent(engine, speculate)
    assert normalized(messages) == normalized(ref_messages)
    c = engine.counters()
    assert 0 < c["o2_accepted"] < c["o2_drafted"]  # the draft matched up to the city, then diverged
    assert c["o3_hits"] == 0 and c["o3_misses"] >= 1


def test_miss_is_lossless(engine, reference):
    ref_messages, _, _ = reference

    def speculate(rid, _history):  # a speculation for another tool: no draft, no hit
        engine.store.post(rid, "", [{"name": "get_time", "params": {"city": "Paris"}, "output": "noon"}])

    messages, _ = _agent(engine, speculate)
    assert normalized(messages) == normalized(ref_messages)
    assert engine.counters()["o2_drafted"] == 0 and engine.counters()["o3_hits"] == 0


def test_streamed_content_equals_final_content(engine):
    fin = run_request(
        engine, {"messages": [{"role": "user", "content": "Say hello."}], "temperature": 0, "max_tokens": 12}
    )
    assert fin["reason"] in ("stop", "length") and fin["streamed"] == fin["content"]
    one = run_request(
        engine, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0}
    )
    assert one["reason"] == "length" and one["usage"]["completion_tokens"] == 1
    assert engine.kv.rows == [] and engine.scheduler.running == []  # it left the batch at once
