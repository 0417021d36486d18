"""SpeculativeChatModel streams: a LangGraph ToolNode graph streamed with
``stream_mode="messages"`` gets the inner model's chunks, tool calls are served from the drafts
(their ids noted from the chunks), and the final transcript equals the unwrapped run's."""

from __future__ import annotations

import asyncio
import threading

import pytest

from langchain_spectool import SpeculativeChatModel
from langchain_spectool.testing import ScriptedChatModel, transcript
from spectool.testing import ScriptedDrafter

from .test_langchain_wrap import CITIES, LATENCY, SCRIPT, make_tools, tool_node_graph


def streamed(graph, mode):
    """(message chunks seen, final messages) of a streamed run."""
    inputs = {"messages": [("user", "populations please")]}
    chunks, final = [], None

    def take(kind, data):
        nonlocal final
        if kind == "messages":
            chunks.append(data[0])
        else:
            final = data["messages"]

    if mode == "sync":
        for kind, data in graph.stream(inputs, stream_mode=["messages", "values"]):
            take(kind, data)
    else:

        async def go():
            async for kind, data in graph.astream(inputs, stream_mode=["messages", "values"]):
                take(kind, data)

        asyncio.run(go())
    return chunks, final


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_streamed_graph_same_transcript_with_hits(mode: str) -> None:
    lock = threading.Lock()
    plain_chunks, plain = streamed(
        tool_node_graph(ScriptedChatModel(script=SCRIPT, latency=LATENCY), make_tools([], lock)), mode
    )
    inner = ScriptedChatModel(script=SCRIPT, latency=LATENCY)
    model = SpeculativeChatModel(model=inner, drafter=ScriptedDrafter(inner.next_calls))
    log: list[str] = []
    try:
        chunks, final = streamed(tool_node_graph(model, model.wrap_tools(make_tools(log, lock))), mode)
        stats = model.stats()
    finally:
        model.close()
    assert transcript(final) == transcript(plain)
    model_chunks = [c for c in chunks if c.type == "AIMessageChunk"]
    # streamed in pieces, as the unwrapped model streams: the call chunks carry ids and halves
    assert len(model_chunks) == len([c for c in plain_chunks if c.type == "AIMessageChunk"]) > len(SCRIPT)
    assert sum(1 for c in model_chunks for t in c.tool_call_chunks if t.get("id")) == len(CITIES) + 1
    assert stats["hits"] + stats["joins"] == len(CITIES) and stats["misses"] == 0
