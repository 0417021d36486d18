"""``speculate(agent, drafter)``: one speculation session around an Agents SDK agent.

The model is never touched: the SDK resolves it as it would without spectool
(``RunConfig(model=…)``, ``RunConfig(model_provider=…)``, each agent's own model), and drafting
starts from the agent's ``on_llm_start`` hook (:class:`SpeculativeHooks`). Handoff targets get
the same treatment: the copy's handoffs lead to copies, so every agent a run reaches drafts.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from agents import Agent, FunctionTool, Handoff

from spectool import ConfigError, Drafter, Speculator, Toolbox, ToolSpec

from ._hooks import SpeculativeHooks
from ._tools import SpeculativeInvoker, tool_spec_of

__all__ = ["speculate"]


def _reachable(agent: Agent[Any]) -> list[Agent[Any]]:
    """``agent`` and every agent its handoffs name directly (Agent entries, and Handoff
    entries whose target the SDK lets us see without invoking it)."""
    seen: dict[int, Agent[Any]] = {}
    todo = [agent]
    while todo:
        a = todo.pop()
        if id(a) in seen:
            continue
        seen[id(a)] = a
        todo.extend(h for h in a.handoffs if isinstance(h, Agent))
    return list(seen.values())


def _function_tools(agents: list[Agent[Any]], declared: set[str]) -> dict[str, FunctionTool]:
    """One function tool per name across the agents. Two different tools of one name may both
    stay mutating (never early, one scope), but declaring that name is ambiguous: a drafted
    call names its tool, and could run the wrong one early."""
    out: dict[str, FunctionTool] = {}
    for a in agents:
        for t in a.tools:
            if isinstance(t, FunctionTool):
                known = out.setdefault(t.name, t)
                if t.name in declared and known is not t and known.on_invoke_tool is not t.on_invoke_tool:
                    raise ConfigError(
                        f"effects declare {t.name!r}, and two different function tools of the "
                        "agents in this run have that name (a drafted call names its tool): rename one"
                    )
    return out


class _Copies:
    """The session's copies of the agents, made once each (handoffs may form cycles)."""

    def __init__(self, speculator: Speculator, specs: dict[str, ToolSpec]) -> None:
        self.speculator, self.specs = speculator, specs
        self.made: dict[int, Agent[Any]] = {}

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        if id(agent) in self.made or any(c is agent for c in self.made.values()):
            return self.made.get(id(agent), agent)
        tools = [self.tool(t) if isinstance(t, FunctionTool) else t for t in agent.tools]
        hooks = SpeculativeHooks(self.speculator, agent.hooks)
        fast = self.made[id(agent)] = agent.clone(tools=tools, hooks=hooks, handoffs=[])
        fast.handoffs = [self.handoff(h) for h in agent.handoffs]
        fast.__dict__["spectool"] = self.speculator  # stats: fast.spectool.stats()
        return fast

    def tool(self, tool: FunctionTool) -> FunctionTool:
        twin = copy.copy(tool)
        twin.on_invoke_tool = SpeculativeInvoker(tool.on_invoke_tool, self.speculator, self.specs[tool.name])
        return twin

    def handoff(self, handoff: Any) -> Any:
        if isinstance(handoff, Agent):
            return self.agent(handoff)
        if isinstance(handoff, Handoff):
            invoke = handoff.on_invoke_handoff

            async def on_invoke_handoff(ctx: Any, input_json: str) -> Any:
                target = await invoke(ctx, input_json)
                return self.agent(target) if isinstance(target, Agent) else target

            return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)
        return handoff


@asynccontextmanager
async def speculate(
    agent: Agent[Any],
    drafter: Drafter | str | None = None,
    *,
    effects: Mapping[str, Any] | None = None,
    **options: Any,
) -> AsyncIterator[Agent[Any]]:
    """``async with speculate(agent, drafter, effects={"search": "read_only"}) as fast:``
    then ``await Runner.run(fast, ..., run_config=...)``: a copy of ``agent`` whose tool calls
    are drafted.

    ``effects`` declares which function tools may run early (a tool name -> an effect, or a
    mapping of ToolSpec options such as ``{"effect": "read_only", "scope": "db"}``), across the
    agent and the agents it hands off to; every other tool is mutating and never runs early.
    ``options`` are :class:`spectool.Speculator`'s (``samples``, ``draft_timeout`` …).
    The model is whatever the run resolves (``RunConfig.model`` / ``model_provider``, the
    agent's model): spectool never picks one. ``drafter`` may be one of spectool's by name
    (``"history"``, ``"local"``, ``"tuned"``).
    """
    if not isinstance(agent, Agent):
        raise ConfigError(
            f"speculate() takes an agents.Agent to copy, got {type(agent).__name__} {agent!r:.60}: "
            "speculate(Agent(name=..., tools=[...]), drafter, effects={...})"
        )
    if "model_provider" in options:
        raise ConfigError(
            "speculate() takes no model_provider: the run resolves the model as it would without "
            "spectool; pass it where the SDK takes it, Runner.run(..., "
            "run_config=RunConfig(model_provider=...))"
        )
    effects = dict(effects or {})
    tools = _function_tools(_reachable(agent), set(effects))
    unknown = set(effects) - set(tools)
    if unknown:
        raise ConfigError(f"effects name tools the agent does not have: {', '.join(sorted(unknown))}")
    specs = {name: tool_spec_of(t, t.on_invoke_tool, effects.get(name)) for name, t in tools.items()}
    speculator = Speculator(Toolbox(list(specs.values())), drafter, **options)
    async with speculator:
        yield _Copies(speculator, specs).agent(agent)
