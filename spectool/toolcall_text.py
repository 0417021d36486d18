"""Tool calls written as text (``<tool_call>{...}</tool_call>``, JSON arrays, fenced blocks):
format, strict parse, best-effort salvage. Used by local drafters and the serving engine."""

from ._toolcall_text import format_tool_calls, parse_tool_calls, salvage_tool_calls

__all__ = ["format_tool_calls", "parse_tool_calls", "salvage_tool_calls"]
