"""A scripted chat model that supports ``bind_tools``, for tests, examples and benchmarks.

LangChain's built-in fake chat models do not implement ``bind_tools`` (``BaseChatModel``
raises ``NotImplementedError``), so ``create_agent`` cannot drive them. This one answers
turn ``k`` of a conversation (``k`` = AI messages already in it) with the ``k``-th scripted
reply, after an optional delay that stands in for generation time. It keeps no per-run
state, so concurrent and repeated runs see the same script.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field, PrivateAttr

from spectool import ToolCall

__all__ = ["ScriptedChatModel", "call", "reply", "transcript"]


def call(name: str, args: Mapping[str, Any] | None = None, id: str | None = None) -> dict[str, Any]:
    """One scripted tool call (LangChain tool-call dict)."""
    return {"name": name, "args": dict(args or {}), "id": id or f"call_{name}", "type": "tool_call"}


def reply(content: str = "", *calls: Mapping[str, Any]) -> AIMessage:
    """One scripted model turn: text and/or tool calls."""
    return AIMessage(content=content, tool_calls=[dict(c) for c in calls])


def transcript(messages: Sequence[BaseMessage]) -> list[tuple[Any, ...]]:
    """What an agent run said, without message ids: for comparing two runs."""
    out = []
    for m in messages:
        calls = tuple((c["name"], repr(c["args"]), c["id"]) for c in getattr(m, "tool_calls", ()) or ())
        out.append(
            (
                m.type,
                repr(m.content),
                calls,
                getattr(m, "tool_call_id", None),
                getattr(m, "status", None),
                getattr(m, "name", None),
                repr(getattr(m, "artifact", None)),
            )
        )
    return out


class ScriptedChatModel(BaseChatModel):
    """Answers each turn from ``script``; ``latency`` seconds per answer (sleeping)."""

    script: list[AIMessage] = Field(default_factory=list)
    latency: float = 0.0
    #: Optional hook run on every request (e.g. to fail or to check what the model sees).
    on_request: Callable[[Sequence[BaseMessage]], None] | None = None
    _requests: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "spectool-scripted"

    @property
    def requests(self) -> list[list[BaseMessage]]:
        """Every message list this model was asked to answer, in arrival order."""
        with self._lock:
            return [list(r) for r in self._requests]

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Runnable:
        formatted = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    def next_calls(self, messages: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
        """The calls the model makes next, given OpenAI chat dicts (an oracle for drafters)."""
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn >= len(self.script):
            return []
        return [ToolCall(c["name"], dict(c["args"])) for c in self.script[turn].tool_calls]

    def _answer(self, messages: Sequence[BaseMessage]) -> ChatResult:
        with self._lock:
            self._requests.append(list(messages))
        if self.on_request is not None:
            self.on_request(messages)
        turn = sum(1 for m in messages if isinstance(m, AIMessage))
        if turn >= len(self.script):
            raise IndexError(f"ScriptedChatModel has {len(self.script)} turns; asked for turn {turn}")
        message = self.script[turn].model_copy(deep=True)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        if self.latency:
            time.sleep(self.latency)
        return self._answer(messages)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        if self.latency:
            await asyncio.sleep(self.latency)
        return self._answer(messages)

    # Streaming: text in word pieces, each tool call as chunks (id and name first, then the
    # arguments in two halves), as providers stream them.
    def _chunks(self, result: ChatResult) -> list[Any]:
        from langchain_core.messages import AIMessageChunk
        from langchain_core.messages.tool import tool_call_chunk
        from langchain_core.outputs import ChatGenerationChunk

        message = result.generations[0].message
        text = message.content if isinstance(message.content, str) else ""
        words = [w for w in text.split(" ") if w]
        pieces = [AIMessageChunk(content=(" " if i else "") + w) for i, w in enumerate(words)]
        for i, c in enumerate(getattr(message, "tool_calls", None) or ()):
            args = json.dumps(c["args"])
            half = len(args) // 2
            for cid, name, part in ((c["id"], c["name"], args[:half]), (None, None, args[half:])):
                chunk = tool_call_chunk(name=name, args=part, id=cid, index=i)
                pieces.append(AIMessageChunk(content="", tool_call_chunks=[chunk]))
        return [ChatGenerationChunk(message=p) for p in pieces or [AIMessageChunk(content="")]]

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        if self.latency:
            time.sleep(self.latency)
        yield from self._chunks(self._answer(messages))

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        if self.latency:
            await asyncio.sleep(self.latency)
        for chunk in self._chunks(self._answer(messages)):
            yield chunk
