"""Wrapping the model and the tools of graphs that are already built (no middleware slot):
LangGraph's prebuilt ReAct agent and a hand-built StateGraph with a ToolNode."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings

import pytest
from langchain_core.tools import StructuredTool, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from langchain_spectool import SpeculativeChatModel, SpeculativeTool, speculable
from langchain_spectool.testing import ScriptedChatModel, call, reply, transcript
from spectool.testing import ScriptedDrafter

LATENCY = 0.1


def make_tools(log: list[str], lock: threading.Lock):
    def lookup(city: str) -> str:
        """Population of a city."""
        with lock:
            log.append(f"lookup:{city}:{threading.current_thread().name}")
        time.sleep(LATENCY)
        return f"{city}: {len(city)} million"

    population = speculable(StructuredTool.from_function(lookup), effect="pure")

    @tool
    def note(text: str) -> str:
        """Write a note (mutating)."""
        with lock:
            log.append(f"note:{text}")
        return "noted"

    return [population, note]


CITIES = ["Paris", "Oslo", "Lima", "Rome", "Quito", "Doha"]
SCRIPT = [
    reply("", *[call("lookup", {"city": c}, f"l{i}") for i, c in enumerate(CITIES)]),
    reply("", call("note", {"text": "done"}, "n1")),
    reply("Six cities looked up."),
]


def tool_node_graph(model, tools, **compile_options):
    """An agent node calling ``model`` and a ToolNode running ``tools``, in a loop, compiled
    with ``compile_options`` (a checkpointer, ``interrupt_before``)."""
    bound = model.bind_tools(tools)

    def agent(state: MessagesState):
        return {"messages": [bound.invoke(state["messages"])]}

    async def aagent(state: MessagesState):
        return {"messages": [await bound.ainvoke(state["messages"])]}

    from langchain_core.runnables import RunnableLambda

    g = StateGraph(MessagesState)
    g.add_node("agent", RunnableLambda(agent, afunc=aagent))
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(**compile_options)


def react_graph(model, tools):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        return create_react_agent(model, tools)


def run(graph, mode):
    inputs = {"messages": [("user", "populations please")]}
    if mode == "sync":
        return graph.invoke(inputs)["messages"]
    return asyncio.run(graph.ainvoke(inputs))["messages"]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("build", [tool_node_graph, react_graph], ids=["toolnode", "react"])
def test_wrapped_graph_same_transcript_served_from_cache(build, mode):
    log: list[str] = []
    lock = threading.Lock()
    plain = ScriptedChatModel(script=SCRIPT, latency=LATENCY)
    baseline = transcript(run(build(plain, make_tools(log, lock)), mode))
    plain_log = sorted(x.split(":")[1] for x in log if x.startswith("lookup"))
    log.clear()

    inner = ScriptedChatModel(script=SCRIPT, latency=LATENCY)
    model = SpeculativeChatModel(model=inner, drafter=ScriptedDrafter(inner.next_calls))
    tools = model.wrap_tools(make_tools(log, lock))
    assert isinstance(tools[0], SpeculativeTool)
    try:
        assert transcript(run(build(model, tools), mode)) == baseline
        stats = model.stats()
    finally:
        model.close()
    # Every lookup ran once, early; ToolNode's parallel calls all found their entry.
    assert sorted(x.split(":")[1] for x in log if x.startswith("lookup")) == plain_log
    assert stats["hits"] + stats["joins"] == len(CITIES)
    assert stats["misses"] == 0 and stats["speculative_started"] == len(CITIES)
    assert log.count("note:done") == 1


def test_unwrapped_calls_pass_through():
    log: list[str] = []
    tools = make_tools(log, threading.Lock())
    model = SpeculativeChatModel(model=ScriptedChatModel(script=SCRIPT))
    wrapped = model.wrap_tools(tools)
    try:
        # A direct call without a tool-call id is not the model's: it runs as usual.
        assert wrapped[0].invoke({"city": "Bern"}) == "Bern: 4 million"
        msg = wrapped[0].invoke(
            {"type": "tool_call", "name": "lookup", "id": "unknown", "args": {"city": "Bern"}}
        )
        assert msg.content == "Bern: 4 million" and msg.tool_call_id == "unknown"
    finally:
        model.close()
    assert len(log) == 2
