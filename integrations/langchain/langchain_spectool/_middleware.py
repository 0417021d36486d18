"""``SpeculativeToolMiddleware``: speculative tool calls for ``langchain.agents.create_agent``.

The model hook starts λ drafts from the request's messages and tools, then calls the model.
The tool hook serves a call the drafts already ran by replaying its recorded outcome through
the real tool (see ``_replay``); every other call runs exactly as without the middleware.
Sync hooks (``invoke``) and async hooks (``ainvoke``) share the same spectool core.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ToolCallRequest
from langchain_core.tools import BaseTool

from spectool import Drafter, Speculator, SyncSpeculator, ToolSpec, resolve_drafter

from ._convert import draft_messages, draft_tools, session_key, to_spectool_call
from ._effects import to_tool_spec
from ._gates import graph_gates, is_gated
from ._replay import ReplayTool, body_runner
from ._run_stats import SpectoolState, apublish, publish
from ._session import Sessions

__all__ = ["SpeculativeToolMiddleware"]

log = logging.getLogger("langchain_spectool")


def tool_specs(tools: Sequence[Any], *, asynchronous: bool) -> list[ToolSpec]:
    """spectool specs of the LangChain tools in ``tools`` (provider dict tools skipped); the
    ones the running graph puts behind an approval are gated (never run early)."""
    gates = graph_gates()
    return [
        to_tool_spec(t, body_runner(t, asynchronous=asynchronous), gated=is_gated(gates, t.name))
        for t in tools
        if isinstance(t, BaseTool)
    ]


class _Speculation:
    """What the middleware and the wrappers share: options, sessions, the two paths."""

    def __init__(self, drafter: Drafter | str | None, options: Mapping[str, Any], max_sessions: int):
        self.drafter = resolve_drafter(drafter)  # once: one model for every conversation
        self.options = dict(options)
        self.sessions = Sessions(self._speculator, self._sync_speculator, max_sessions)

    def _speculator(self, tools: list[ToolSpec]) -> Speculator:
        return Speculator(tools, self.drafter, **self.options)

    def _sync_speculator(self, tools: list[ToolSpec]) -> SyncSpeculator:
        return SyncSpeculator(tools, self.drafter, **self.options)

    # -- sync -------------------------------------------------------------------------------

    def start(self, key: str, messages: Sequence[Any], system: Any, tools: Sequence[Any]) -> Any:
        """Open the conversation's session and start drafting; None if that failed."""
        try:
            session = self.sessions.open_sync(key, tool_specs(tools, asynchronous=False))
            session.start_turn(draft_messages(messages, system), draft_tools(tools))
            return session
        except Exception:  # speculation must never break the main path
            log.warning("spectool: could not start drafts", exc_info=True)
            return None

    def run_tool(
        self, key: str, call: Mapping[str, Any], tool: BaseTool | None, run: Callable[[BaseTool | None], Any]
    ) -> Any:
        """Run one tool call; ``run(tool)`` is LangChain's own execution of it."""
        session = self.sessions.find_sync(key) if tool is not None else None
        if session is None:
            return run(tool)
        spec = session.spec(tool.name) or to_tool_spec(tool)
        if not spec.speculable:
            with session.mutating(spec.scope):
                return run(tool)
        try:
            outcome = session.lookup(to_spectool_call(call))
        except Exception:
            log.warning("spectool: cache lookup failed; running the tool", exc_info=True)
            outcome = None
        return run(tool if outcome is None else ReplayTool.of(tool, outcome))

    # -- async ------------------------------------------------------------------------------

    async def astart(self, key: str, messages: Sequence[Any], system: Any, tools: Sequence[Any]) -> Any:
        try:
            session = await self.sessions.open_async(key, tool_specs(tools, asynchronous=True))
            session.start_turn(draft_messages(messages, system), draft_tools(tools))
            return session
        except Exception:
            log.warning("spectool: could not start drafts", exc_info=True)
            return None

    async def arun_tool(
        self,
        key: str,
        call: Mapping[str, Any],
        tool: BaseTool | None,
        run: Callable[[BaseTool | None], Awaitable[Any]],
    ) -> Any:
        session = self.sessions.find_async(key) if tool is not None else None
        if session is None:
            return await run(tool)
        spec = session.spec(tool.name) or to_tool_spec(tool)
        if not spec.speculable:
            with session.mutating(spec.scope):
                return await run(tool)
        try:
            outcome = await session.lookup(to_spectool_call(call))
        except Exception:
            log.warning("spectool: cache lookup failed; running the tool", exc_info=True)
            outcome = None
        return await run(tool if outcome is None else ReplayTool.of(tool, outcome))


def _end_turn(session: Any) -> None:
    if session is not None:
        try:
            session.end_turn()
        except Exception:
            log.warning("spectool: could not end the draft turn", exc_info=True)


def _messages(state: Any) -> Sequence[Any]:
    if isinstance(state, Mapping):
        return state.get("messages") or ()
    return getattr(state, "messages", ()) or ()


class SpeculativeToolMiddleware(AgentMiddleware):
    """Runs tool calls a drafter predicts while the model is still generating.

    Add it to an existing agent::

        agent = create_agent(model, tools, middleware=[SpeculativeToolMiddleware(drafter)])

    Only tools declared ``pure`` or ``read_only`` (:func:`speculable`) ever run early; the
    transcript is the one the agent produces without the middleware.

    Args:
        drafter: a spectool ``Drafter`` or one of spectool's by name (``"history"``,
            ``"local"``, ``"tuned"``: :func:`spectool.resolve_drafter`); ``None``: no drafts,
            the middleware only observes.
        samples: λ, drafts per model request.
        draft_timeout: seconds a draft may take before it is abandoned.
        max_sessions: conversations tracked at once (oldest closed first).
        **options: passed to spectool's ``Speculator`` / ``ToolCache`` (``max_concurrency``,
            ``capacity``, ``ttl``, ``max_proposals``).
    """

    def __init__(
        self,
        drafter: Drafter | str | None = None,
        *,
        samples: int = 3,
        draft_timeout: float = 5.0,
        max_sessions: int = 64,
        **options: Any,
    ) -> None:
        super().__init__()
        options = {"samples": samples, "draft_timeout": draft_timeout, **options}
        self._spec = _Speculation(drafter, options, max_sessions)

    #: the run's own counters land in the agent state under ``spectool`` (see ``_run_stats``)
    state_schema = SpectoolState

    def stats(self) -> dict[str, Any]:
        """spectool's counters summed over every conversation so far (hits, joins, misses…);
        each run's own are in its final state, ``result["spectool"]``."""
        return self._spec.sessions.stats()

    def close(self) -> None:
        """Close the conversations ``invoke()`` left open and their loop threads (also done at
        interpreter exit)."""
        self._spec.sessions.close()

    # -- model ------------------------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        key = session_key(_messages(request.state) or request.messages)
        session = self._spec.start(key, request.messages, request.system_message, request.tools)
        try:
            return handler(request)
        finally:
            _end_turn(session)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]
    ) -> Any:
        key = session_key(_messages(request.state) or request.messages)
        session = await self._spec.astart(key, request.messages, request.system_message, request.tools)
        try:
            return await handler(request)
        finally:
            _end_turn(session)

    # -- tools ------------------------------------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        key = session_key(_messages(request.state))
        return self._spec.run_tool(
            key,
            request.tool_call,
            request.tool,
            lambda tool: handler(request if tool is request.tool else request.override(tool=tool)),
        )

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        key = session_key(_messages(request.state))
        return await self._spec.arun_tool(
            key,
            request.tool_call,
            request.tool,
            lambda tool: handler(request if tool is request.tool else request.override(tool=tool)),
        )

    # -- end of a run -----------------------------------------------------------------------

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return publish(self._spec.sessions.close_sync(session_key(_messages(state))))

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return await apublish(await self._spec.sessions.close_async(session_key(_messages(state))))
