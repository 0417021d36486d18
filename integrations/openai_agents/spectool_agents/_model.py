"""A Model that starts drafting when the agent's request goes out.

Wraps any Agents SDK ``Model`` (Chat Completions, Responses, LiteLLM …): before the inner
model is called, the speculator starts λ drafts from the chat view of the request; when the
model has answered, drafts still running are cancelled (their started tool runs go on).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio.lowlevel
from agents.models.interface import Model

from spectool import Speculator, responses_input_to_messages

__all__ = ["SpeculativeModel"]


def chat_view(system_instructions: str | None, input: Any) -> list[dict[str, Any]]:
    """The request as chat messages, for drafters (the SDK sends Responses-style items)."""
    if isinstance(input, str):
        input = [{"role": "user", "content": input}]
    return responses_input_to_messages(list(input), system_instructions)


class SpeculativeModel(Model):
    """``model`` with speculation: same requests, same answers, drafts on the side."""

    def __init__(self, model: Model, speculator: Speculator) -> None:
        self.model, self.speculator = model, speculator

    def _start(self, system_instructions: str | None, input: Any) -> Any:
        if not self.speculator.cache.is_open:
            return None
        return self.speculator.start_turn(chat_view(system_instructions, input))

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        turn = self._start(system_instructions, input)
        await anyio.lowlevel.checkpoint()  # let the draft's request go out first
        try:
            return await self.model.get_response(system_instructions, input, *args, **kwargs)
        finally:
            if turn is not None:
                turn.cancel()

    async def stream_response(  # type: ignore[override]
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        turn = self._start(system_instructions, input)
        await anyio.lowlevel.checkpoint()
        try:
            async for event in self.model.stream_response(system_instructions, input, *args, **kwargs):
                yield event
        finally:
            if turn is not None:
                turn.cancel()

    async def close(self) -> None:
        close = getattr(self.model, "close", None)
        if close is not None:
            await close()
