"""The xLAM-style tool-calling prompt: a system prompt listing the tools as indented JSON,
calls answered as one JSON array, and optional worked examples as earlier turns.

xLAM-2 models are trained on this shape; small general models (SmolLM2) follow it much better
with two worked examples in front of the conversation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._types import ToolCall
from ..toolcall_text import format_tool_calls
from ._common import assistant_calls, message_text, tool_schemas

__all__ = ["DEFAULT_EXAMPLES", "WorkedExample", "draft_messages", "system_prompt"]

#: (user text, the calls that answer it). Tools named here need not be offered: the examples
#: only teach the answer format.
WorkedExample = tuple[str, Sequence[ToolCall]]

DEFAULT_EXAMPLES: tuple[WorkedExample, ...] = (
    (
        "Translate 'good morning' into French.",
        (ToolCall("translate", {"text": "good morning", "target_language": "French"}),),
    ),
    (
        "Convert 12 miles to kilometers, and define the word 'serendipity'.",
        (
            ToolCall("convert_units", {"value": 12, "from_unit": "mile", "to_unit": "km"}),
            ToolCall("define_word", {"word": "serendipity"}),
        ),
    ),
)

_INSTRUCTIONS = (
    "You have access to a set of tools. When using tools, make calls in a single JSON array: "
    '[{"name": "tool_name", "arguments": {"arg1": "value1"}}, ...] and write nothing else. '
    "Use only the tools listed below and take argument values from the conversation. "
    "The available tools are:"
)


def system_prompt(tools: Sequence[Mapping[str, Any]], preamble: str = "") -> str:
    """The system prompt: an optional preamble, the instructions, each tool as indented JSON."""
    listed = "\n\n".join(json.dumps(t, indent=4, ensure_ascii=False) for t in tool_schemas(tools).values())
    head = f"{preamble.strip()}\n\n" if preamble.strip() else ""
    return f"{head}{_INSTRUCTIONS}\n\n{listed}"


def draft_messages(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    examples: Sequence[WorkedExample] = DEFAULT_EXAMPLES,
    *,
    tool_role: str = "tool",
) -> list[dict[str, str]]:
    """Chat messages (role + text content) ready for a chat template.

    The agent's own system messages join the preamble; assistant tool calls become JSON-array
    text; tool results keep role ``tool_role`` (``"user"`` for templates that reject ``tool``).
    """
    preamble = "\n\n".join(
        message_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    )
    out = [{"role": "system", "content": system_prompt(tools, preamble)}]
    for text, calls in examples:
        out.append({"role": "user", "content": text})
        out.append({"role": "assistant", "content": format_tool_calls(calls)})
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            continue
        if role == "assistant":
            calls = assistant_calls(m)
            text = format_tool_calls(calls) if calls else message_text(m.get("content"))
            out.append({"role": "assistant", "content": text})
        elif role == "tool":
            text = message_text(m.get("content"))
            if tool_role == "tool":
                out.append({"role": "tool", "content": text})
            else:
                out.append({"role": tool_role, "content": f"Tool result: {text}"})
        else:
            out.append({"role": "user", "content": message_text(m.get("content"))})
    return out
