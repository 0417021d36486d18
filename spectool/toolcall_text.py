"""Tool calls written as text by a model: parse and format. Standard library only.

Small tool-calling models (xLAM-2, a prompted SmolLM2) and some servers return calls in the
message *text* rather than as structured ``tool_calls``. Three shapes are understood:

* xLAM's JSON array: ``[{"name": "f", "arguments": {...}}, ...]``
* hermes-style tags: ``<tool_call>{"name": "f", "arguments": {...}}</tool_call>`` (repeatable)
* a bare JSON object: ``{"name": "f", "arguments": {...}}``

``parameters`` is accepted for ``arguments``, arguments may be a JSON string, and an OpenAI
shaped ``{"function": {"name", "arguments"}}`` item is unwrapped. Markdown code fences around
the JSON are ignored.

:func:`parse_tool_calls` is strict (text that tries to be a call but is malformed raises
:class:`~spectool.ModelOutputError`); :func:`salvage_tool_calls` never raises and keeps every
complete call it can find, which is what a drafter wants from a truncated sample.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ._types import ToolCall
from .errors import ModelOutputError

__all__ = ["format_tool_calls", "parse_tool_calls", "salvage_tool_calls"]

_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```\s*$", re.S)
_DECODER = json.JSONDecoder()


def format_tool_calls(calls: Iterable[ToolCall]) -> str:
    """Calls as xLAM's compact JSON array (what :func:`parse_tool_calls` reads back)."""
    items = [{"name": c.name, "arguments": dict(c.arguments)} for c in calls]
    return json.dumps(items, ensure_ascii=False, separators=(", ", ": "))


def parse_tool_calls(text: str) -> list[ToolCall]:
    """The calls in ``text``; ``[]`` when the text is a plain answer (no call attempted).

    Raises :class:`ModelOutputError` when the text starts like a call (``[``/``{`` JSON or a
    ``<tool_call>`` tag) but is not a well-formed list of calls.
    """
    if not isinstance(text, str):
        raise ModelOutputError(f"model output must be text, got {type(text).__name__}")
    body = _unfence(text.strip())
    if "<tool_call>" in body:
        calls = []
        for chunk in _TAG.findall(body):
            calls.extend(_calls_from_value(_loads(_unfence(chunk)), strict=True))
        return calls
    if not body or body[0] not in "[{":
        return []
    value = _loads(body)
    return _calls_from_value(value, strict=True)


def salvage_tool_calls(text: str) -> list[ToolCall]:
    """Every complete, well-formed call in ``text``, in order; never raises.

    Reads a truncated array up to its last complete item, skips malformed items, and finds a
    call after leading prose (the first ``[``/``{`` that decodes as calls wins).
    """
    if not isinstance(text, str):
        return []
    body = _unfence(text.strip())
    if "<tool_call>" in body:
        calls: list[ToolCall] = []
        for chunk in _TAG.findall(body):
            calls.extend(_salvage_from(_unfence(chunk)))
        return calls
    start = 0
    while True:
        match = re.compile(r"[\[{]").search(body, start)
        if match is None:
            return []
        calls = _salvage_from(body[match.start() :])
        if calls:
            return calls
        start = match.start() + 1


def _salvage_from(body: str) -> list[ToolCall]:
    body = body.lstrip()
    if not body:
        return []
    try:
        value, _ = _DECODER.raw_decode(body)
    except json.JSONDecodeError:
        if body[0] != "[":
            return []
        return _salvage_array_prefix(body)
    return _calls_from_value(value, strict=False)


def _salvage_array_prefix(body: str) -> list[ToolCall]:
    """Items of a JSON array decoded one by one until the text stops making sense."""
    calls: list[ToolCall] = []
    pos = 1
    while pos < len(body):
        while pos < len(body) and body[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(body) or body[pos] == "]":
            break
        try:
            item, pos = _DECODER.raw_decode(body, pos)
        except json.JSONDecodeError:
            break
        call = _call_from_item(item, strict=False)
        if call is not None:
            calls.append(call)
    return calls


def _unfence(text: str) -> str:
    match = _FENCE.match(text)
    return match.group(1).strip() if match else text


def _loads(text: str) -> Any:
    try:
        value, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError as exc:
        raise ModelOutputError(
            f"tool call text is not valid JSON: {exc.msg} at position {exc.pos}: {text[:80]!r}"
        ) from exc
    if text[end:].strip():
        raise ModelOutputError(f"unexpected text after the tool call JSON: {text[end : end + 40]!r}")
    return value


def _calls_from_value(value: Any, *, strict: bool) -> list[ToolCall]:
    items = value if isinstance(value, list) else [value]
    calls = (_call_from_item(item, strict=strict) for item in items)
    return [c for c in calls if c is not None]


def _call_from_item(item: Any, *, strict: bool) -> ToolCall | None:
    """One call from one decoded item; None (lenient) or ModelOutputError (strict) if malformed."""
    try:
        return _call_or_raise(item)
    except ModelOutputError:
        if strict:
            raise
        return None


def _call_or_raise(item: Any) -> ToolCall:
    if not isinstance(item, Mapping):
        raise ModelOutputError(f"a tool call must be a JSON object, got {type(item).__name__}")
    if isinstance(item.get("function"), Mapping):  # OpenAI's {"type": "function", "function": {...}}
        item = {**item["function"], "id": item.get("id")}
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ModelOutputError(f"tool call without a name: {json.dumps(item)[:80]}")
    args: Any = item.get("arguments", item.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ModelOutputError(f"tool {name!r}: arguments string is not JSON: {exc.msg}") from exc
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise ModelOutputError(f"tool {name!r}: arguments must be an object, got {type(args).__name__}")
    call_id = item.get("id")
    return ToolCall(name=name.strip(), arguments=dict(args), id=call_id if isinstance(call_id, str) else None)
