"""LangGraph conversations are keyed by ``thread_id`` when the run has one: the model and tool
nodes of one graph share the key, a subgraph on the same thread has its own, and a thread that
a middleware trims (its first message removed mid-run) keeps its session and its hits."""

from __future__ import annotations

import asyncio

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from langchain_spectool import SpeculativeToolMiddleware, create_agent
from langchain_spectool._convert import conversation_key, session_key
from langchain_spectool.testing import ScriptedChatModel, call, reply, transcript
from spectool import ToolCall
from spectool.testing import ScriptedDrafter

from .test_langchain_middleware import World


def test_key_follows_the_thread_and_the_graph() -> None:
    seen: list[tuple[str, str]] = []

    def node(name):
        def run(state):
            seen.append((name, session_key(state["messages"])))
            return {}

        return run

    inner = StateGraph(MessagesState)
    inner.add_node("inner", node("inner"))
    inner.add_edge(START, "inner")
    inner.add_edge("inner", END)
    outer = StateGraph(MessagesState)
    outer.add_node("a", node("a"))
    outer.add_node("b", node("b"))
    outer.add_node("sub", inner.compile())
    outer.add_edge(START, "a")
    outer.add_edge("a", "b")
    outer.add_edge("b", "sub")
    outer.add_edge("sub", END)
    msg = HumanMessage("hi", id="m1")
    outer.compile(checkpointer=InMemorySaver()).invoke(
        {"messages": [msg]}, {"configurable": {"thread_id": "t9"}}
    )
    keys = dict(seen)
    assert keys["a"] == keys["b"] == "thread:t9:"
    assert keys["inner"].startswith("thread:t9:sub:") and keys["inner"] != keys["a"]
    seen.clear()
    outer.compile().invoke({"messages": [msg]})  # no checkpointer, no thread: the first message
    assert dict(seen)["a"] == conversation_key([msg]) == "id:m1"


class TrimFirst(AgentMiddleware):
    """Drops the first message before the second model call (as summarizing middleware does)."""

    def before_model(self, state, runtime):
        msgs = state["messages"]
        if len([m for m in msgs if m.type == "ai"]) == 1:
            return {"messages": [RemoveMessage(id=msgs[0].id)]}
        return None

    async def abefore_model(self, state, runtime):
        return self.before_model(state, runtime)


def test_trimmed_thread_keeps_its_session_and_hits() -> None:
    world = World()  # get_stock: read-only, 0.1 s
    script = [
        reply("", call("get_stock", {"item": "apple"}, "c1")),
        reply("", call("get_stock", {"item": "pear"}, "c2")),
        reply("done"),
    ]

    def run(drafter):
        mw = SpeculativeToolMiddleware(drafter, draft_timeout=1.0) if drafter else None
        agent = create_agent(
            ScriptedChatModel(script=script, latency=0.15),
            [world.tools[0]],
            middleware=[TrimFirst(), *([mw] if mw else [])],
            checkpointer=InMemorySaver(),
        )
        out = asyncio.run(
            agent.ainvoke({"messages": [("user", "stock?")]}, {"configurable": {"thread_id": "t1"}})
        )
        return transcript(out["messages"]), mw

    def first_turn_only(messages):  # drafts both calls at the first turn, nothing after
        if any(m.get("role") == "assistant" for m in messages):
            return []
        return [ToolCall("get_stock", {"item": "apple"}), ToolCall("get_stock", {"item": "pear"})]

    base, _ = run(None)
    world.log.clear()
    fast, mw = run(ScriptedDrafter(first_turn_only))
    assert fast == base
    stats = mw.stats()
    # pear was drafted in the first turn and served in the second, after the first message was
    # trimmed away: one session across the trim (keyed by the first message, it would be two)
    assert stats["hits"] + stats["joins"] == 2 and world.runs("get_stock").count({"item": "pear"}) == 1
    assert not mw._spec.sessions._async
