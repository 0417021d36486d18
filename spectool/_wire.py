"""OpenAI wire formats without importing openai: tool calls out, tool results in.

Works on the SDK's pydantic objects (any major version) and on plain dicts alike, so the
wrapper, the agent loop and the sync façade share one reading of Chat Completions and Responses.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ._types import ToolCall
from .errors import ToolArgumentsError
from .keys import parse_arguments

__all__ = [
    "ChatAccumulator",
    "ParsedCall",
    "as_dict",
    "engine_resolved",
    "extract_calls",
    "format_output",
    "responses_input_to_messages",
]

#: A call the model made: a ToolCall, or the error its malformed arguments raise (with its id).
ParsedCall = "ToolCall | tuple[str | None, str, ToolArgumentsError]"


def as_dict(obj: Any) -> Any:
    """A plain JSON-able dict of an SDK object (pydantic v2 ``model_dump``) or the dict itself."""
    if isinstance(obj, Mapping):
        return dict(obj)
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(exclude_none=True, mode="json")
    return obj


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict) or isinstance(obj, Mapping):  # dict first: the ABC check is slow
        return obj.get(name, default)
    return getattr(obj, name, default)


def _parse(call_id: str | None, name: str, arguments: Any) -> Any:
    try:
        return ToolCall(name=name, arguments=parse_arguments(arguments), id=call_id)
    except ValueError as exc:
        return (call_id, name, ToolArgumentsError(f"tool {name!r}: {exc}", tool=name))


def extract_calls(response: Any) -> tuple[str, list[Any]]:
    """``(api, calls)`` from a ChatCompletion, a chat message, a Responses ``Response``, a
    list of output items / tool calls, or a finished stream accumulator.

    ``api`` is ``"chat"`` or ``"responses"``; malformed arguments become error tuples so the
    caller can report them as the tool's outcome.
    """
    final = getattr(response, "final_message", None)
    if callable(final):
        response = final()
    choices = _get(response, "choices")
    if choices:
        response = _get(choices[0], "message")
    output = _get(response, "output")
    if output is not None and not isinstance(response, (list, tuple)):
        return "responses", _responses_calls(output)
    if isinstance(response, (list, tuple)):
        if response and _get(response[0], "type") in ("function_call", "message", "reasoning"):
            return "responses", _responses_calls(response)
        return "chat", [_chat_call(tc) for tc in response]
    return "chat", [_chat_call(tc) for tc in (_get(response, "tool_calls") or ())]


def _chat_call(tc: Any) -> Any:
    fn = _get(tc, "function") or {}
    return _parse(_get(tc, "id"), _get(fn, "name") or "", _get(fn, "arguments"))


def _responses_calls(items: Iterable[Any]) -> list[Any]:
    return [
        _parse(_get(it, "call_id"), _get(it, "name") or "", _get(it, "arguments"))
        for it in items
        if _get(it, "type") == "function_call"
    ]


#: Extra choice field of a spectool engine: ``[{content, tool_call, output}]`` resolved in place.
RESOLVED = "spectool_resolved_calls"


def engine_resolved(response: Any) -> list[Any]:
    """The records of calls a spectool engine resolved inside a response (else empty)."""
    acc = getattr(response, "_chat", None)
    if isinstance(acc, ChatAccumulator):  # a SpeculativeStream
        return list(acc.resolved)
    choices = _get(response, "choices")
    choice = choices[0] if choices else response
    return list(_get(choice, RESOLVED) or ())


def format_output(value: Any) -> str:
    """A tool's return value as the text the model reads (strings as-is, else JSON)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content or ():
        t = _get(part, "text")
        if isinstance(t, str):
            parts.append(t)
    return "".join(parts)


def responses_input_to_messages(input: Any, instructions: str | None = None) -> list[dict[str, Any]]:
    """Responses ``input`` (a string or items) as Chat Completions messages, for drafters."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(input, str):
        return [*messages, {"role": "user", "content": input}]
    for item in input or ():
        kind = _get(item, "type")
        if kind == "function_call":
            call = {
                "id": _get(item, "call_id"),
                "type": "function",
                "function": {"name": _get(item, "name"), "arguments": _get(item, "arguments")},
            }
            if messages and messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]:
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": _get(item, "call_id"),
                    "content": _text(_get(item, "output")),
                }
            )
        elif kind in (None, "message") and _get(item, "role"):
            messages.append({"role": _get(item, "role"), "content": _text(_get(item, "content"))})
    return messages


class ChatAccumulator:
    """Builds the final assistant message from Chat Completions stream chunks."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        #: calls a spectool engine resolved inside this response (its final chunk lists them)
        self.resolved: list[Any] = []

    def add(self, chunk: Any) -> None:
        self.id = self.id or _get(chunk, "id")
        for choice in _get(chunk, "choices") or ():
            if _get(choice, "index", 0) != 0:
                continue
            self.finish_reason = _get(choice, "finish_reason") or self.finish_reason
            self.resolved = _get(choice, RESOLVED) or self.resolved
            delta = _get(choice, "delta") or {}
            text = _get(delta, "content")
            if text:
                self.content.append(text)
            for tc in _get(delta, "tool_calls") or ():
                slot = self.calls.setdefault(
                    _get(tc, "index", 0),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                slot["id"] = _get(tc, "id") or slot["id"]
                fn = _get(tc, "function") or {}
                slot["function"]["name"] += _get(fn, "name") or ""
                slot["function"]["arguments"] += _get(fn, "arguments") or ""

    def message(self) -> dict[str, Any]:
        """The assistant message as a Chat Completions dict."""
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            msg["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return msg
