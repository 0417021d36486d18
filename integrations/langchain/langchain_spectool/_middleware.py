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

from spectool import ConfigError, Drafter

from ._compose import Composition
from ._convert import session_key
from ._policy import Plan, PolicyDrafter
from ._run_stats import SpectoolState, apublish, publish
from ._speculation import PlanFor, Speculation, Turn, end_turn

__all__ = ["SpeculativeToolMiddleware"]

log = logging.getLogger("langchain_spectool")


def _messages(state: Any) -> Sequence[Any]:
    if isinstance(state, Mapping):
        return state.get("messages") or ()
    return getattr(state, "messages", ()) or ()


def _running(request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Callable[[Any], Any]:
    """``run(tool)``: LangChain's own execution of the call, with ``tool`` (a replay) in its place."""
    return lambda tool: handler(request if tool is request.tool else request.override(tool=tool))


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
        safe_middleware: middleware instances or classes the user declares safe: they
            neither stop, edit, count nor repeat a tool call (by default a middleware
            spectool does not know that overrides ``wrap_tool_call`` or ``after_model`` gates
            every tool).
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
        safe_middleware: Sequence[Any] = (),
        **options: Any,
    ) -> None:
        super().__init__()
        options = {"samples": samples, "draft_timeout": draft_timeout, **options}
        self._spec = Speculation(drafter, options, max_sessions)
        self._safe = list(safe_middleware)
        self._middleware: list[Any] | None = None
        self._composition: Composition | None = None
        self._warned = False

    def compose(
        self, middleware: Sequence[Any], *, interrupt_before: Any = None, interrupt_after: Any = None
    ) -> list[Any]:
        """Tell spectool the agent's middleware list (this middleware among it) and its
        ``interrupt_before`` / ``interrupt_after``; returns the list, for ``create_agent``.
        ``langchain_spectool.create_agent`` calls it; without it no tool runs early (spectool
        cannot know what stands between the model's calls and the tools)."""
        middleware = list(middleware)
        if self._middleware is not None and [id(m) for m in middleware] != [id(m) for m in self._middleware]:
            raise ConfigError(
                "this SpeculativeToolMiddleware is already part of another agent; use one per agent"
            )
        self._middleware = middleware
        self._composition = Composition.of(
            middleware,
            owner=self,
            safe=self._safe,
            interrupt_before=interrupt_before,
            interrupt_after=interrupt_after,
        )
        if self._composition.gated:
            log.info(
                "spectool: tools gated by the agent's middleware: %s", "; ".join(self._composition.reasons)
            )
        return middleware

    def _plan_for(self, state: Any) -> PlanFor:
        composition = self._composition
        if composition is None:
            composition = Composition.unknown()
            if not self._warned:
                self._warned = True
                log.warning(
                    "spectool: SpeculativeToolMiddleware does not know this agent's middleware, so no "
                    "tool runs early: build the agent with langchain_spectool.create_agent(...) or "
                    "pass middleware=spectool_middleware.compose([...])"
                )

        def plan(policy: PolicyDrafter) -> Plan:
            allowance = [
                lim.remaining(state) - policy.unused(i) for i, lim in enumerate(composition.limiters)
            ]
            return Plan(allowance=allowance, composition=composition)

        return plan

    def _turn(self, request: ModelRequest) -> Turn:
        return Turn(request.messages, request.system_message, request.tools, self._plan_for(request.state))

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
        session = self._spec.start(key, self._turn(request))
        try:
            return handler(request)
        finally:
            end_turn(session)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]
    ) -> Any:
        key = session_key(_messages(request.state) or request.messages)
        session = await self._spec.astart(key, self._turn(request))
        try:
            return await handler(request)
        finally:
            end_turn(session)

    # -- tools ------------------------------------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        key = session_key(_messages(request.state))
        return self._spec.run_tool(key, request.tool_call, request.tool, _running(request, handler))

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        key = session_key(_messages(request.state))
        return await self._spec.arun_tool(key, request.tool_call, request.tool, _running(request, handler))

    # -- end of a run -----------------------------------------------------------------------

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return publish(self._spec.sessions.close_sync(session_key(_messages(state))))

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return await apublish(await self._spec.sessions.close_async(session_key(_messages(state))))
