"""Approval gates with the real LangChain ``HumanInTheLoopMiddleware`` and LangGraph's
``interrupt_before``: a call behind a gate has not run (not even early) when the interrupt
arrives. Controls: the same agent with the gate on another tool, or none, does run it early.

The chat model is scripted (ScriptedChatModel: LangChain's own fakes cannot bind tools); the
agent, the middleware, the checkpointer and the interrupts are the real thing.
"""

from __future__ import annotations

import asyncio

import pytest
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langchain_spectool import SpeculativeToolMiddleware, create_agent
from spectool.testing import ScriptedDrafter

from .test_langchain_middleware import MODEL_LATENCY, SCRIPT, World, oracle

from langchain_spectool.testing import ScriptedChatModel  # isort: skip


@pytest.fixture(params=["sync", "async"])
def mode(request):
    return request.param


def _agent(world: World, *, interrupt_on=None, interrupt_before=None):
    model = ScriptedChatModel(script=SCRIPT, latency=MODEL_LATENCY)
    spec = SpeculativeToolMiddleware(ScriptedDrafter(oracle()), draft_timeout=1.0)
    middleware = [spec]
    if interrupt_on is not None:
        middleware.insert(0, HumanInTheLoopMiddleware(interrupt_on=interrupt_on))
    agent = create_agent(
        model,
        world.tools,
        middleware=middleware,
        checkpointer=InMemorySaver(),
        interrupt_before=interrupt_before,
    )
    return agent, spec


def _invoke(agent, inputs, mode: str, thread: str = "t1"):
    config = {"configurable": {"thread_id": thread}}
    if mode == "sync":
        return agent.invoke(inputs, config)
    return asyncio.run(agent.ainvoke(inputs, config))


INPUT = {"messages": [("user", "buy two apples if in stock")]}


def test_interrupt_on_a_read_only_tool_stops_it_running_early(mode):
    world = World()
    agent, spec = _agent(world, interrupt_on={"get_stock": True})
    try:
        result = _invoke(agent, INPUT, mode)
        assert result.get("__interrupt__"), "the first turn's get_stock calls need approval"
        assert world.runs("get_stock") == []  # drafted, declared read_only, yet not run
        stats = spec.stats()
        assert stats["hits"] + stats["joins"] == 0 and stats["admitted"] == 0
        if mode == "sync":  # approved: now they run, through LangChain, once each
            decisions = [{"type": "approve"}, {"type": "approve"}]
            _invoke(agent, Command(resume={"decisions": decisions}), mode)
            ran = sorted(r["item"] for r in world.runs("get_stock")[:2])  # ToolNode: parallel
            assert ran == ["apple", "pear"]
    finally:
        spec.close()


def test_control_the_same_agent_with_the_gate_on_another_tool_runs_reads_early(mode):
    world = World()
    agent, spec = _agent(world, interrupt_on={"buy": True})
    try:
        result = _invoke(agent, INPUT, mode)
        assert result.get("__interrupt__")  # at buy, the third turn
        assert world.runs("buy") == []
        assert len(world.runs("get_stock")) == 2 and len(world.runs("audit")) == 1
        stats = spec.stats()
        assert stats["hits"] + stats["joins"] == 3  # the reads before the gate ran early
    finally:
        spec.close()


def test_interrupt_before_tools_gates_every_tool(mode):
    world = World()
    agent, spec = _agent(world, interrupt_before=["tools"])
    try:
        result = _invoke(agent, INPUT, mode)
        assert result["messages"][-1].tool_calls  # paused before the first tool node
        assert world.runs("get_stock") == []
        assert spec.stats()["admitted"] == 0
    finally:
        spec.close()


@pytest.mark.parametrize("gate", [True, False])
def test_a_built_graph_with_interrupt_before_tools_runs_nothing_early(mode, gate):
    """SpeculativeChatModel in a hand-built StateGraph compiled with ``interrupt_before``:
    the pure lookups are not run before the pause. Control: the same graph without the gate
    runs them early."""
    import threading

    from langchain_spectool import SpeculativeChatModel

    from .test_langchain_wrap import SCRIPT as CITY_SCRIPT
    from .test_langchain_wrap import make_tools, tool_node_graph

    log: list[str] = []
    inner = ScriptedChatModel(script=CITY_SCRIPT, latency=MODEL_LATENCY)
    model = SpeculativeChatModel(model=inner, drafter=ScriptedDrafter(inner.next_calls))
    tools = model.wrap_tools(make_tools(log, threading.Lock()))
    gated = tool_node_graph(
        model, tools, checkpointer=InMemorySaver(), interrupt_before=["tools"] if gate else None
    )
    graph = model.watch(gated)  # the wrappers read the graph's interrupt_before (a public attribute)
    try:
        _invoke(graph, {"messages": [("user", "populations please")]}, mode)
        lookups = [x for x in log if x.startswith("lookup")]
        if gate:
            assert lookups == [] and model.stats()["admitted"] == 0
        else:
            assert len(lookups) == 6 and model.stats()["hits"] + model.stats()["joins"] == 6
    finally:
        model.close()


def test_an_agent_whose_middleware_spectool_was_not_told_runs_nothing_early(caplog):
    """Built with LangChain's own create_agent, spectool does not know what else stands
    between the model's calls and the tools (a gate may): no tool runs early, no draft is
    made, and a WARNING says how to tell it. Control: the same agent built with
    langchain_spectool.create_agent speculates."""
    import logging

    from langchain.agents import create_agent as plain_create_agent

    for told in (False, True):
        world = World()
        model = ScriptedChatModel(script=SCRIPT, latency=MODEL_LATENCY)
        spec = SpeculativeToolMiddleware(ScriptedDrafter(oracle()), draft_timeout=1.0)
        build = create_agent if told else plain_create_agent
        agent = build(model, world.tools, middleware=[spec])
        try:
            with caplog.at_level(logging.WARNING, logger="langchain_spectool"):
                _invoke(agent, INPUT, "sync")
            stats = spec.stats()
        finally:
            spec.close()
        warned = [r for r in caplog.records if "does not know this agent's middleware" in r.getMessage()]
        if told:
            assert stats["hits"] + stats["joins"] == 4 and len(warned) == 1  # (the earlier one)
        else:
            assert stats["drafts"] == 0 and stats["speculative_started"] == 0 and len(warned) == 1
            assert len(world.runs("get_stock")) == 3  # each read once, by the model's call


def test_a_tool_that_asks_for_approval_with_interrupt_is_never_run_early(mode):
    """LangGraph's dynamic interrupt: the tool asks inside its body. Declared read_only (what
    it reads after the approval is safe), it must still not run before the model asks: its
    first part would run early, and its interrupt() would fail outside the graph."""
    from langchain_core.tools import tool
    from langgraph.types import interrupt

    from langchain_spectool import speculable
    from langchain_spectool.testing import call, reply

    asked: list[str] = []

    @tool
    def read_file(path: str) -> str:
        """Read a file, after the user allows it."""
        asked.append(path)
        if interrupt({"allow": path}) != "yes":
            return "denied"
        return f"contents of {path}"

    speculable(read_file, effect="read_only")
    script = [reply("", call("read_file", {"path": "/etc/motd"}, "r1")), reply("done")]
    model = ScriptedChatModel(script=script, latency=MODEL_LATENCY)
    spec = SpeculativeToolMiddleware(ScriptedDrafter(model.next_calls), draft_timeout=1.0)
    agent = create_agent(model, [read_file], middleware=[spec], checkpointer=InMemorySaver())
    try:
        result = _invoke(agent, INPUT, mode)
        assert result.get("__interrupt__")  # the tool's own question reached the user
        assert asked == ["/etc/motd"]  # once, up to its interrupt
        stats = spec.stats()  # without the gate the early run is that one: started, then served
        assert stats["admitted"] == 0 and stats["speculative_started"] == 0 and stats["hits"] == 0
    finally:
        spec.close()
