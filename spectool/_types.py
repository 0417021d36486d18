"""Small value types shared across spectool: tool calls and the drafter protocol."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["DraftRequest", "Drafter", "ToolCall"]


@dataclass(frozen=True)
class ToolCall:
    """One tool call: a name and parsed arguments (``id`` as the model gave it, if any)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        return json.dumps(dict(self.arguments), ensure_ascii=False)


@dataclass(frozen=True)
class DraftRequest:
    """What a drafter sees: the conversation so far and the tools on offer.

    ``messages`` are Chat Completions messages (dicts); ``tools`` are Chat Completions tool
    entries (``{"type": "function", "function": {...}}``); ``samples`` is λ.
    """

    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]]
    samples: int = 1


@runtime_checkable
class Drafter(Protocol):
    """Predicts the tool calls the main model is about to make.

    ``propose`` returns up to ``request.samples`` × (calls per sample) predicted calls,
    duplicates allowed (the cache joins them). It may raise or hang: the speculator bounds it
    with a timeout and swallows its failures.
    """

    async def propose(self, request: DraftRequest) -> list[ToolCall]: ...
