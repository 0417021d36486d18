"""What a scripted model says: replies chosen by how far the conversation has got.

The reply to a request is ``script[k]`` where ``k`` is the number of assistant turns already in
the conversation, so one script serves any number of sessions (with and without speculation)
identically. Ids are derived from the request content: equal requests get equal responses.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._types import ToolCall

__all__ = ["Reply", "call", "reply_index", "say", "tokens_of"]


@dataclass(frozen=True)
class Reply:
    """One model turn: text, tool calls, or both."""

    text: str | None = None
    tool_calls: Sequence[ToolCall] = field(default_factory=tuple)


def say(text: str) -> Reply:
    """A final text reply."""
    return Reply(text=text)


def call(name: str, /, **arguments: Any) -> ToolCall:
    """A tool call for a script: ``call("get_weather", city="Paris")``."""
    return ToolCall(name=name, arguments=arguments)


def as_reply(item: Any) -> Reply:
    """Script items may be a Reply, a text, one ToolCall, or a list of ToolCalls."""
    if isinstance(item, Reply):
        return item
    if isinstance(item, str):
        return Reply(text=item)
    if isinstance(item, ToolCall):
        return Reply(tool_calls=(item,))
    if isinstance(item, (list, tuple)) and all(isinstance(c, ToolCall) for c in item):
        return Reply(tool_calls=tuple(item))
    raise TypeError(f"not a script item: {item!r}")


def reply_index(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many assistant turns the conversation already holds."""
    return sum(1 for m in messages if m.get("role") == "assistant")


_TOKEN = re.compile(r"\S+\s*|\s+")


def tokens_of(text: str, size: int = 4) -> list[str]:
    """A cheap stand-in tokenizer: words, long words cut into ``size``-char pieces."""
    out: list[str] = []
    for word in _TOKEN.findall(text):
        out.extend(word[i : i + size] for i in range(0, len(word), size))
    return out


def digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


Script = Sequence[Any] | Callable[[list[dict[str, Any]]], Any]
