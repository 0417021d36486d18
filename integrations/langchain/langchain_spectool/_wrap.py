"""Speculation for graphs that are already built: wrap the chat model and the tools.

For a prebuilt ReAct agent or a LangGraph graph with a ``ToolNode`` there is no middleware
slot, so the two ends are wrapped instead::

    model = SpeculativeChatModel(model=llm, drafter=drafter)
    tools = model.wrap_tools(tools)
    graph = create_react_agent(model, tools)      # or ToolNode(tools) + model.bind_tools(tools)

The model wrapper drafts from the messages it is asked to answer and remembers which
conversation each returned tool-call id belongs to; a wrapped tool, handed a tool call by the
ToolNode, looks its id up and is served from that conversation's cache. What the wrappers
cannot see: the graph's state (only the messages sent to the model), the end of a run (a
conversation's session is closed when it falls out of the ``max_sessions`` window or on
``close()``), tools that were not wrapped (they run normally and are never speculated, and
mutating ones among them do not invalidate read_only results), and direct tool invocations
without a tool-call id (passed straight through).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, PrivateAttr

from ._compose import Composition
from ._convert import session_key
from ._effects import copy_declaration, has_injected_args
from ._fields import stand_in_fields
from ._policy import Plan
from ._speculation import Speculation, Turn, end_turn

__all__ = ["SpeculativeChatModel", "SpeculativeTool"]


class _Owners:
    """tool-call id → conversation key, for the most recent ``size`` calls."""

    def __init__(self, size: int = 4096) -> None:
        self._map: OrderedDict[str, str] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def note(self, key: str, outputs: Iterable[Any], calls: str = "tool_calls") -> None:
        """The ids of the tool calls (or, streaming, ``tool_call_chunks``) in ``outputs``'
        messages (ChatGenerations or chunks) belong to conversation ``key``."""
        messages = [getattr(out, "message", None) for out in outputs]
        ids = [c.get("id") for m in messages for c in getattr(m, calls, None) or () if c.get("id")]
        with self._lock:
            self._map.update(dict.fromkeys(ids, key))
            while len(self._map) > self._size:
                self._map.popitem(last=False)

    def key(self, call_id: str | None) -> str | None:
        with self._lock:
            return self._map.get(call_id) if call_id else None


class SpeculativeChatModel(BaseChatModel):
    """A chat model that drafts tool calls while ``model`` answers; see :meth:`wrap_tools`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: BaseChatModel
    drafter: Any = None
    samples: int = 3
    draft_timeout: float = 5.0
    max_sessions: int = 64
    _spec: Speculation = PrivateAttr()
    _owners: _Owners = PrivateAttr(default_factory=_Owners)
    _tools: dict[str, BaseTool] = PrivateAttr(default_factory=dict)
    _composition: Composition = PrivateAttr(default_factory=Composition)

    def model_post_init(self, context: Any) -> None:
        options = {"samples": self.samples, "draft_timeout": self.draft_timeout}
        self._spec = Speculation(self.drafter, options, self.max_sessions)

    @property
    def _llm_type(self) -> str:
        return f"speculative-{self.model._llm_type}"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        # Tracing sees the wrapped model's provider and name: the wrapper adds no model of its own.
        params = dict(self.model._get_ls_params(stop=stop, **kwargs))
        params.setdefault("ls_model_name", getattr(self.model, "model_name", None) or self.model._llm_type)
        return params

    def wrap_tools(self, tools: Sequence[BaseTool]) -> list[BaseTool]:
        """The tools, each served from this model's drafts when the model calls it."""
        wrapped = []
        for t in tools:
            if not isinstance(t, BaseTool):
                raise TypeError(f"wrap_tools needs LangChain BaseTool objects; got {t!r}")
            if has_injected_args(t):  # sees graph state: never speculable, left as it is
                wrapped.append(t)
                continue
            self._tools[t.name] = t
            wrapped.append(SpeculativeTool.around(t, self))
        return wrapped

    def watch(self, graph: Any) -> Any:
        """Tell the wrappers the compiled graph they run in; returns it. A graph compiled with
        ``interrupt_before`` / ``interrupt_after`` pauses before (or after) a node that may be
        the review of the model's calls: no tool runs early in it."""
        before = getattr(graph, "interrupt_before_nodes", None)
        after = getattr(graph, "interrupt_after_nodes", None)
        self._composition = Composition.of((), interrupt_before=before, interrupt_after=after)
        return graph

    def _plan(self, policy: Any) -> Plan:
        return Plan(composition=self._composition)

    def _turn(self, messages: list[BaseMessage]) -> Turn:
        return Turn(messages, None, list(self._tools.values()), self._plan)

    def stats(self) -> dict[str, Any]:
        """spectool's counters summed over every conversation so far."""
        return self._spec.sessions.stats()

    def close(self) -> None:
        """Close every conversation and the background loop."""
        self._spec.sessions.close()

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable:
        # The inner model formats tools for its provider; the wrapper passes them through.
        inner = [t.inner if isinstance(t, SpeculativeTool) else t for t in tools]
        bound = self.model.bind_tools(inner, **kwargs)
        return self.bind(**getattr(bound, "kwargs", {}))

    # -- generation ------------------------------------------------------------------------

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        key = session_key(messages)
        session = self._spec.start(key, self._turn(messages))
        try:
            result = self.model._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        finally:
            end_turn(session)
        self._owners.note(key, result.generations)
        return result

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        key = session_key(messages)
        session = await self._spec.astart(key, self._turn(messages))
        try:
            result = await self.model._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        finally:
            end_turn(session)
        self._owners.note(key, result.generations)
        return result

    # Streaming: drafts run for the whole generation; each tool call's id is noted from the
    # chunk that carries it, before the chunk is handed on (the ToolNode runs after the stream).

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Iterator[Any]:
        key = session_key(messages)
        session = self._spec.start(key, self._turn(messages))
        try:
            for chunk in self.model._stream(messages, stop=stop, run_manager=run_manager, **kwargs):
                self._owners.note(key, [chunk], "tool_call_chunks")
                yield chunk
        finally:
            end_turn(session)

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        key = session_key(messages)
        session = await self._spec.astart(key, self._turn(messages))
        try:
            async for chunk in self.model._astream(messages, stop=stop, run_manager=run_manager, **kwargs):
                self._owners.note(key, [chunk], "tool_call_chunks")
                yield chunk
        finally:
            end_turn(session)


class SpeculativeTool(BaseTool):
    """A LangChain tool served from the drafts of a :class:`SpeculativeChatModel`."""

    _inner: BaseTool = PrivateAttr()
    _owner: SpeculativeChatModel = PrivateAttr()

    @classmethod
    def around(cls, inner: BaseTool, owner: SpeculativeChatModel) -> SpeculativeTool:
        tool = cls(**stand_in_fields(inner, runs_as_the_tool=False))
        tool._inner, tool._owner = inner, owner
        copy_declaration(inner, tool)
        return tool

    @property
    def inner(self) -> BaseTool:
        return self._inner

    @property
    def tool_call_schema(self) -> Any:
        return self._inner.tool_call_schema

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # only reached if invoke is bypassed
        return self._inner._run(*args, **kwargs)

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        key = self._key(input)
        if key is None:
            return self._inner.invoke(input, config, **kwargs)
        return self._owner._spec.run_tool(
            key, input, self._inner, lambda tool: tool.invoke(input, config, **kwargs)
        )

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        key = self._key(input)
        if key is None:
            return await self._inner.ainvoke(input, config, **kwargs)
        return await self._owner._spec.arun_tool(
            key, input, self._inner, lambda tool: tool.ainvoke(input, config, **kwargs)
        )

    def _key(self, input: Any) -> str | None:
        if isinstance(input, dict) and input.get("type") == "tool_call" and "args" in input:
            return self._owner._owners.key(input.get("id"))
        return None
