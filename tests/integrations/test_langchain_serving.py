"""A create_agent agent on the embedded serving engine (real SmolLM2 behind spectool serve's
OpenAI routes on a localhost port) through langchain-openai's ChatOpenAI: greedy decoding, so
the transcript with SpeculativeToolMiddleware must equal the one without it."""

from __future__ import annotations

import asyncio
import time

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import tool

from langchain_spectool import SpeculativeToolMiddleware, create_agent, speculable
from langchain_spectool.testing import transcript
from spectool import ToolCall
from spectool.testing import ScriptedDrafter
from tests.serving.helpers import uvicorn_server

pytestmark = pytest.mark.model

QUESTION = {"messages": [("user", "What is the weather in Paris?")]}


@pytest.fixture(scope="module")
def base_url():
    """The embedded engine on a free port, served by uvicorn in a thread (as `spectool serve`)."""
    from spectool_serving.server import build_server

    app = build_server(None)  # the embedded SmolLM2-135M-Instruct, fp32 on CPU
    try:
        with uvicorn_server(app) as url:
            yield f"{url}/v1"
    finally:
        app.state.engine.stop()


class FirstTurnCallsATool(AgentMiddleware):
    """A 135M model rarely calls a tool unprompted; the engine's `tool_choice="required"` makes
    the first turn a call. It acts the same with and without speculation."""

    def wrap_model_call(self, request, handler):
        return handler(self._force(request))

    async def awrap_model_call(self, request, handler):
        return await handler(self._force(request))

    @staticmethod
    def _force(request):
        first = all(m.type in ("human", "system") for m in request.messages)
        return request.override(tool_choice="required") if first else request


def build(base_url, middleware):
    from langchain_openai import ChatOpenAI

    runs: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather of a city."""
        runs.append(city)
        time.sleep(0.2)
        return f"{city}: 21C, clear"

    speculable(get_weather, effect="read_only")
    llm = ChatOpenAI(
        model="m",
        base_url=base_url,
        api_key="unused",
        temperature=0,
        max_tokens=32,
        max_retries=0,
        timeout=300,
    )
    agent = create_agent(llm, [get_weather], middleware=[FirstTurnCallsATool(), *middleware])
    return agent, runs


def same_up_to_ids(messages):
    """The transcript with the server's random tool-call ids replaced by their order."""
    ids: dict[str, str] = {}
    for m in messages:
        for c in getattr(m, "tool_calls", ()) or ():
            ids.setdefault(c["id"], f"id{len(ids)}")
    out = []
    for entry in transcript(messages):
        kind, content, calls, call_id, *rest = entry
        calls = tuple((n, a, ids.get(i, i)) for n, a, i in calls)
        out.append((kind, content, calls, ids.get(call_id, call_id), *rest))
    return out


def test_chat_openai_on_the_embedded_engine_transcript_unchanged(base_url):
    agent, _ = build(base_url, [])
    baseline = agent.invoke(QUESTION, {"recursion_limit": 8})["messages"]
    first = baseline[1].tool_calls
    assert first and first[0]["name"] == "get_weather"  # the engine really made a tool call

    # The drafter proposes, on the first turn, what the model is about to call there, so the
    # early run is what serves it.
    oracle = [ToolCall(c["name"], c["args"]) for c in first]

    def drafts(messages):
        return [] if any(m.get("role") == "tool" for m in messages) else oracle

    mw = SpeculativeToolMiddleware(ScriptedDrafter(drafts), samples=1)
    agent, runs = build(base_url, [mw])
    try:
        # Async hooks here (the sync ones are covered on the scripted model): two runs of a
        # real model are most of this test's time.
        speculative = asyncio.run(agent.ainvoke(QUESTION, {"recursion_limit": 8}))["messages"]
        stats = mw.stats()
    finally:
        mw.close()
    assert same_up_to_ids(speculative) == same_up_to_ids(baseline)
    assert stats["speculative_started"] == 1 and stats["hits"] + stats["joins"] == 1
    assert len(runs) == 1 + stats["misses"]  # the early run served the call; no second run
