"""What the middleware and the wrappers share: one ``_Speculation`` (options, sessions) and
its two paths, the model's (open the session, set the turn's plan, start drafts) and the
tools' (serve a call the drafts ran, or run it through LangChain)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool

from spectool import Drafter, Speculator, SyncSpeculator, ToolSpec, resolve_drafter

from ._convert import draft_messages, draft_tools, to_spectool_call
from ._effects import to_tool_spec
from ._gates import marked_interrupting
from ._options import check_options
from ._policy import Plan, PolicyDrafter, policy_for
from ._replay import ReplayTool, body_runner
from ._session import Sessions

__all__ = ["PlanFor", "end_turn", "Speculation", "Turn", "tool_specs"]

log = logging.getLogger("langchain_spectool")


def tool_specs(tools: Sequence[Any], *, asynchronous: bool) -> list[ToolSpec]:
    """spectool specs of the LangChain tools in ``tools`` (provider dict tools skipped)."""
    return [
        to_tool_spec(t, body_runner(t, asynchronous=asynchronous)) for t in tools if isinstance(t, BaseTool)
    ]


#: Builds a turn's Plan from the conversation's PolicyDrafter (its unused early runs).
PlanFor = Callable[[PolicyDrafter], Plan]


def _drafting(session: Any, tools: Sequence[Any], plan_for: PlanFor | None) -> bool:
    """Set this turn's plan on the session's drafter; False when no offered tool may run early
    (then no draft is made at all: its calls could not be used)."""
    policy = session.policy
    if not isinstance(policy, PolicyDrafter):
        return True  # no drafter: the core makes no drafts anyway
    plan = plan_for(policy) if plan_for is not None else Plan()
    plan.blocked = plan.blocked | {
        t.name for t in tools if isinstance(t, BaseTool) and marked_interrupting(t)
    }
    policy.set_plan(plan)
    for t in tools:
        spec = session.spec(t.name) if isinstance(t, BaseTool) else None
        if spec is not None and spec.speculable and not spec.gated and plan.may_run(t.name):
            return True
    return False


@dataclass(frozen=True)
class Turn:
    """What a model call drafts from: the conversation, its system message, the offered tools
    and how the turn's plan is built."""

    messages: Sequence[Any]
    system: Any
    tools: Sequence[Any]
    plan_for: PlanFor | None = None

    def begin(self, session: Any) -> Any:
        """Start drafting on the conversation's opened session; returns it."""
        if _drafting(session, self.tools, self.plan_for):
            session.start_turn(draft_messages(self.messages, self.system), draft_tools(self.tools))
        return session


class Speculation:
    """What the middleware and the wrappers share: options, sessions, the two paths."""

    def __init__(self, drafter: Drafter | str | None, options: Mapping[str, Any], max_sessions: int):
        self.options = check_options(options, max_sessions)
        self.drafter = resolve_drafter(drafter)  # once: one model for every conversation
        self.sessions = Sessions(self._core, max_sessions)

    def _core(self, kind: type[Speculator | SyncSpeculator], tools: list[ToolSpec]) -> Any:
        # a PolicyDrafter per conversation: its budgets are the conversation's
        policy = policy_for(self.drafter) if self.drafter is not None else None
        return kind(tools, policy, **self.options)

    # -- sync -------------------------------------------------------------------------------

    def start(self, key: str, turn: Turn) -> Any:
        """Open the conversation's session and start drafting; None if that failed."""
        try:
            return turn.begin(self.sessions.open_sync(key, tool_specs(turn.tools, asynchronous=False)))
        except Exception:  # speculation must never break the main path
            log.warning("spectool: could not start drafts", exc_info=True)
            return None

    def run_tool(
        self, key: str, call: Mapping[str, Any], tool: BaseTool | None, run: Callable[[BaseTool | None], Any]
    ) -> Any:
        """Run one tool call; ``run(tool)`` is LangChain's own execution of it."""
        if tool is None or (session := self.sessions.find_sync(key)) is None:
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
        return run(_served(session, tool, outcome))

    # -- async ------------------------------------------------------------------------------

    async def astart(self, key: str, turn: Turn) -> Any:
        try:
            return turn.begin(await self.sessions.open_async(key, tool_specs(turn.tools, asynchronous=True)))
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
        if tool is None or (session := self.sessions.find_async(key)) is None:
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
        return await run(_served(session, tool, outcome))


def _served(session: Any, tool: BaseTool, outcome: Any) -> BaseTool:
    """A replay of the early run that served the call (the limit middleware counts it), or the tool."""
    if outcome is None:
        return tool
    if isinstance(session.policy, PolicyDrafter):
        session.policy.note_served(tool.name)
    return ReplayTool.of(tool, outcome)


def end_turn(session: Any) -> None:
    if session is not None:
        try:
            session.end_turn()
        except Exception:
            log.warning("spectool: could not end the draft turn", exc_info=True)
