"""``speculate(agent, drafter)``: one speculation session around an Agents SDK agent."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from agents import Agent, FunctionTool
from agents.models.interface import Model, ModelProvider

from spectool import ConfigError, Drafter, Speculator, Toolbox

from ._model import SpeculativeModel
from ._tools import SpeculativeInvoker, tool_spec_of

__all__ = ["speculate"]


def _resolve_model(agent: Agent[Any], provider: ModelProvider | None) -> Model:
    if isinstance(agent.model, Model):
        return agent.model
    if provider is None:
        from agents.models.multi_provider import MultiProvider

        provider = MultiProvider()
    return provider.get_model(agent.model)


@asynccontextmanager
async def speculate(
    agent: Agent[Any],
    drafter: Drafter | str | None = None,
    *,
    effects: Mapping[str, Any] | None = None,
    model_provider: ModelProvider | None = None,
    **options: Any,
) -> AsyncIterator[Agent[Any]]:
    """``async with speculate(agent, drafter, effects={"search": "read_only"}) as fast:``
    then ``await Runner.run(fast, ...)``: a copy of ``agent`` whose tool calls are drafted.

    ``effects`` declares which function tools may run early (a tool name -> an effect, or a
    mapping of ToolSpec options such as ``{"effect": "read_only", "scope": "db"}``); every
    other tool is mutating and never runs early. ``options`` are :class:`spectool.Speculator`'s
    (``samples``, ``draft_timeout`` …). A string model name is resolved with
    ``model_provider`` (the SDK's default provider if None). Handoff agents are not wrapped.
    ``drafter`` may be one of spectool's by name (``"history"``, ``"local"``, ``"tuned"``).
    """
    effects = dict(effects or {})
    function_tools = [t for t in agent.tools if isinstance(t, FunctionTool)]
    unknown = set(effects) - {t.name for t in function_tools}
    if unknown:
        raise ConfigError(f"effects name tools the agent does not have: {', '.join(sorted(unknown))}")
    twins = [copy.copy(t) for t in function_tools]
    specs = [tool_spec_of(t, t.on_invoke_tool, effects.get(t.name)) for t in twins]
    speculator = Speculator(Toolbox(specs), drafter, **options)
    for twin, spec in zip(twins, specs):
        twin.on_invoke_tool = SpeculativeInvoker(twin.on_invoke_tool, speculator, spec)
    by_name = {t.name: twin for t, twin in zip(function_tools, twins)}
    tools = [
        by_name.get(getattr(t, "name", None), t) if isinstance(t, FunctionTool) else t for t in agent.tools
    ]
    model = SpeculativeModel(_resolve_model(agent, model_provider), speculator)
    async with speculator:
        fast = agent.clone(model=model, tools=tools)
        fast.__dict__["spectool"] = speculator  # stats: fast.spectool.stats()
        yield fast
