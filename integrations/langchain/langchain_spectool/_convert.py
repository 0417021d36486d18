"""LangChain messages and tools as the Chat Completions dicts a spectool drafter reads."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_openai_messages
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from spectool import ToolCall

__all__ = ["conversation_key", "draft_messages", "draft_tools", "session_key", "to_spectool_call"]


def draft_messages(
    messages: Sequence[BaseMessage], system: BaseMessage | None = None
) -> list[dict[str, Any]]:
    """The conversation (system message first, if any) as OpenAI chat message dicts."""
    head = [system] if system is not None else []
    return convert_to_openai_messages([*head, *messages])


def draft_tools(tools: Iterable[BaseTool | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Function tools as Chat Completions ``tools`` entries; provider built-ins are left out."""
    out = []
    for t in tools:
        if isinstance(t, Mapping) and t.get("type") not in (None, "function"):
            continue  # a provider-side tool (web search, code interpreter): not ours to run
        try:
            out.append(convert_to_openai_tool(t))
        except (ValueError, TypeError):
            continue
    return out


def to_spectool_call(call: Mapping[str, Any]) -> ToolCall:
    """A LangChain tool call dict (``name``, ``args``, ``id``) as a spectool ToolCall."""
    return ToolCall(name=call["name"], arguments=dict(call.get("args") or {}), id=call.get("id"))


def conversation_key(messages: Sequence[BaseMessage]) -> str:
    """Names one conversation: its first message's id, else a digest of that message.

    LangGraph's message reducer gives every message an id, so two runs started with separate
    inputs get separate keys while the turns of one run share one.
    """
    rest = [m for m in messages if getattr(m, "type", None) != "system"]  # prompts are shared
    if not rest:
        return "empty"
    first = rest[0]
    if getattr(first, "id", None):
        return f"id:{first.id}"
    digest = hashlib.sha256(f"{first.type}\x1f{first.content!r}".encode()).hexdigest()[:16]
    return f"sha:{digest}"


def session_key(messages: Sequence[BaseMessage]) -> str:
    """The conversation's key: LangGraph's ``thread_id`` when the run has one (stable even if a
    middleware trims or rewrites early messages), else :func:`conversation_key`."""
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable") or {}
    except (ImportError, RuntimeError):  # not inside a LangGraph run
        configurable = {}
    thread = configurable.get("thread_id")
    if thread is None:
        return conversation_key(messages)
    # A node sees "<its graph's namespace>|<node>:<task>": drop its own task so the model and
    # tool nodes of one graph share a key; a subgraph (same thread) keeps a key of its own.
    graph_ns = "|".join((configurable.get("checkpoint_ns") or "").split("|")[:-1])
    return f"thread:{thread}:{graph_ns}"
