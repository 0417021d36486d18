"""Agent hooks that start drafting when the SDK is about to call the model.

``on_llm_start`` runs right before the run's model call, after the SDK resolved that model
(``RunConfig.model``, ``RunConfig.model_provider``, the agent's own model) and filtered the
input: drafting from here speculates on exactly the request the run sends, to whichever model
the user configured, and never calls a model of its own choosing. ``on_llm_end`` stops the
drafts still running. Every hook is forwarded to the agent's own hooks, if it had any.
The drafts are visible in the SDK's trace as a ``spectool.draft`` custom span.
"""

from __future__ import annotations

from typing import Any

import anyio.lowlevel
from agents import AgentHooks, FunctionTool
from agents.tracing import custom_span

from spectool import Speculator, Turn, responses_input_to_messages

__all__ = ["SpeculativeHooks"]


def chat_view(system_instructions: str | None, input: Any) -> list[dict[str, Any]]:
    """The request as chat messages, for drafters (the SDK sends Responses-style items)."""
    if isinstance(input, str):
        input = [{"role": "user", "content": input}]
    return responses_input_to_messages(list(input), system_instructions)


def _offered(agent: Any) -> list[dict[str, Any]]:
    """The function tools this agent offers, as the drafter's request lists them."""
    return [
        {"type": "function", "name": t.name, "description": t.description, "parameters": t.params_json_schema}
        for t in agent.tools
        if isinstance(t, FunctionTool)
    ]


class SpeculativeHooks(AgentHooks[Any]):
    """The agent's hooks (``inner``, or none) plus drafting around each model call."""

    def __init__(self, speculator: Speculator, inner: Any = None) -> None:
        self.speculator, self.inner = speculator, inner
        self._turn: Turn | None = None
        self._span: Any = None

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        self._stop()
        if self.speculator.cache.is_open:
            self._turn = self.speculator.start_turn(chat_view(system_prompt, input_items), _offered(agent))
            self._span = custom_span("spectool.draft", {"agent": agent.name, "samples": self._turn.samples})
            self._span.start(mark_as_current=False)
            await anyio.lowlevel.checkpoint()  # let the draft's request go out first
        await self._forward("on_llm_start", context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self._stop()
        await self._forward("on_llm_end", context, agent, response)

    def _stop(self) -> None:
        turn, span, self._turn, self._span = self._turn, self._span, None, None
        if turn is None:
            return
        turn.cancel()  # drafts still running are moot; started tool runs go on
        if span is not None:
            span.span_data.data.update(
                proposals=len(turn.proposals), admitted=[c.name for c in turn.admitted]
            )
            span.finish()

    async def _forward(self, hook: str, *args: Any) -> None:
        if self.inner is not None:
            await getattr(self.inner, hook)(*args)

    # every other hook: the agent's own, unchanged
    async def on_start(self, context: Any, agent: Any) -> None:
        await self._forward("on_start", context, agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        self._stop()
        await self._forward("on_end", context, agent, output)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        await self._forward("on_handoff", context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        await self._forward("on_tool_start", context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        await self._forward("on_tool_end", context, agent, tool, result)
