"""Small helpers every drafter shares: reading tool entries and conversations, keying calls."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from .._types import ToolCall
from ..keys import canonical_key

__all__ = [
    "UNPARSED",
    "assistant_calls",
    "call_key",
    "function_calls",
    "message_text",
    "tool_schemas",
    "with_known_tools",
]


def tool_schemas(tools: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``name -> function body`` (name, description, parameters) for chat or responses entries."""
    out: dict[str, dict[str, Any]] = {}
    for entry in tools:
        body = entry.get("function", entry) if isinstance(entry, Mapping) else None
        if isinstance(body, Mapping) and isinstance(body.get("name"), str):
            params = body.get("parameters") or {"type": "object", "properties": {}}
            out[body["name"]] = {
                "name": body["name"],
                "description": body.get("description") or "",
                "parameters": params,
            }
    return out


def with_known_tools(calls: Iterable[ToolCall], tools: Mapping[str, Any]) -> list[ToolCall]:
    """Only the calls that name an offered tool (a drafter may hallucinate names)."""
    return [c for c in calls if c.name in tools]


def call_key(call: ToolCall, schemas: Mapping[str, Mapping[str, Any]]) -> str:
    body = schemas.get(call.name) or {}
    try:
        return canonical_key(call.name, call.arguments, body.get("parameters"))
    except ValueError:  # unkeyable arguments: fall back to the raw JSON so nothing crashes
        return call.name + "\x1f" + json.dumps(dict(call.arguments), sort_keys=True, default=repr)


def message_text(content: Any) -> str:
    """Text of a chat message ``content`` (a string or a list of content parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, default=str)


#: :func:`function_calls`' arguments where the JSON text does not parse.
UNPARSED: Any = object()


def function_calls(message: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], str, Any]]:
    """``(entry, name, arguments)`` of each named entry of a Chat Completions message's
    ``tool_calls``; JSON-text arguments decoded (empty: ``{}``; not JSON: :data:`UNPARSED`)."""
    for tc in message.get("tool_calls") or ():
        fn = tc.get("function") if isinstance(tc, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            continue
        args: Any = fn.get("arguments") or {}
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                args = UNPARSED
        yield tc, fn["name"], args


def assistant_calls(message: Mapping[str, Any]) -> list[ToolCall]:
    """The tool calls of an assistant message in Chat Completions shape (bad ones skipped)."""
    return [
        ToolCall(name, dict(args), tc.get("id"))
        for tc, name, args in function_calls(message)
        if isinstance(args, Mapping)
    ]
