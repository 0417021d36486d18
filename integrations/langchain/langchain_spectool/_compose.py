"""What stands between the model's call and the tool, read from the agent's middleware list.

spectool runs a tool early only where nothing between the model's call and the tool could
stop, change, count or repeat it, unless spectool knows that thing and handles it. The list
comes from the user (``langchain_spectool.create_agent`` or
``SpeculativeToolMiddleware.compose``), never from LangGraph's run internals; each entry is
classified by its class:

* ``HumanInTheLoopMiddleware``: the tools in ``interrupt_on`` never run early.
* ``LLMToolEmulator``: the tools it emulates never run early for real.
* ``ToolCallLimitMiddleware``: a budget (see ``_policy``); with ``exit_behavior`` "end" or
  "error" a blocked call ends the whole batch, so no tool runs early at all.
* ``ToolRetryMiddleware``: handled (a recorded early failure is served once, a retry runs the
  tool); ``ToolErrorMiddleware``, ``ModelCallLimitMiddleware``, ``TodoListMiddleware``: they
  neither stop nor repeat a call spectool served.
* Any other middleware whose class overrides ``wrap_tool_call`` or ``after_model`` (sync or
  async) may gate, edit or repeat every call: all tools are gated, unless the user lists it in
  ``safe_middleware``.
* ``interrupt_before`` / ``interrupt_after`` on the agent: every tool is gated.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ALL", "Composition", "Limiter"]

ALL = "*"
_HOOKS = ("wrap_tool_call", "awrap_tool_call", "after_model", "aafter_model")


@dataclass(frozen=True)
class Limiter:
    """One ``ToolCallLimitMiddleware``: the tool it counts (None: all) and its limits."""

    tool: str | None
    thread_limit: int | None
    run_limit: int | None

    @property
    def key(self) -> str:  # the key ToolCallLimitMiddleware counts under in the state
        return self.tool or "__all__"

    def covers(self, name: str) -> bool:
        return self.tool is None or self.tool == name

    def remaining(self, state: Any) -> int:
        """Calls the limit still lets through, from the counts the middleware keeps in state."""
        get = state.get if hasattr(state, "get") else (lambda k, d=None: getattr(state, k, d))
        limits = ((self.thread_limit, "thread_tool_call_count"), (self.run_limit, "run_tool_call_count"))
        left = [n - int((get(counts, None) or {}).get(self.key, 0)) for n, counts in limits if n is not None]
        return max(0, min(left)) if left else 0


@dataclass
class Composition:
    """The gates and budgets of one agent, from its middleware list."""

    gated: frozenset[str] = frozenset()
    limiters: tuple[Limiter, ...] = ()
    #: why tools are gated (for the log line)
    reasons: list[str] = field(default_factory=list)

    def is_gated(self, name: str) -> bool:
        return ALL in self.gated or name in self.gated

    @classmethod
    def of(
        cls,
        middleware: Sequence[Any],
        *,
        owner: Any = None,
        safe: Iterable[Any] = (),
        interrupt_before: Any = None,
        interrupt_after: Any = None,
    ) -> Composition:
        from langchain.agents.middleware import (
            AgentMiddleware,
            HumanInTheLoopMiddleware,
            LLMToolEmulator,
            ModelCallLimitMiddleware,
            TodoListMiddleware,
            ToolCallLimitMiddleware,
            ToolErrorMiddleware,
            ToolRetryMiddleware,
        )

        handled = (ToolRetryMiddleware, ToolErrorMiddleware, ModelCallLimitMiddleware, TodoListMiddleware)
        safe = list(safe)
        gated: set[str] = set()
        limiters: list[Limiter] = []
        reasons: list[str] = []
        if interrupt_before or interrupt_after:
            gated.add(ALL)
            reasons.append("interrupt_before/interrupt_after")
        for m in middleware:
            if m is owner or type(m).__module__.startswith("langchain_spectool"):
                continue
            if isinstance(m, HumanInTheLoopMiddleware):
                on = getattr(m, "interrupt_on", None) or {}
                gated.update(name for name, how in on.items() if how)
                reasons.append(f"{type(m).__name__}(interrupt_on={sorted(on)})")
            elif isinstance(m, LLMToolEmulator):
                emulated = ALL if m.emulate_all else None
                gated.update([emulated] if emulated else m.tools_to_emulate)
                reasons.append(f"LLMToolEmulator({'all tools' if emulated else sorted(m.tools_to_emulate)})")
            elif isinstance(m, ToolCallLimitMiddleware):
                if m.exit_behavior != "continue":
                    # a blocked call ends the batch (or the run): no early run is safe
                    gated.add(ALL)
                    reasons.append(f"{m.name}(exit_behavior={m.exit_behavior!r})")
                limiters.append(Limiter(m.tool_name, m.thread_limit, m.run_limit))
            elif isinstance(m, handled):
                continue
            elif any(m is s or (isinstance(s, type) and isinstance(m, s)) for s in safe):
                continue
            elif any(getattr(type(m), h, None) is not getattr(AgentMiddleware, h, None) for h in _HOOKS):
                gated.add(ALL)
                reasons.append(
                    f"{type(m).__name__} (unknown wrap_tool_call/after_model; declare it in safe_middleware)"
                )
        return cls(frozenset(gated), tuple(limiters), reasons)

    @classmethod
    def unknown(cls) -> Composition:
        """spectool was not told the agent's middleware: nothing may run early."""
        return cls(frozenset({ALL}), (), ["the agent's middleware list is unknown"])
