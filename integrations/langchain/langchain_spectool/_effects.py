"""Effects of LangChain tools: how a tool says it may run early, and its spectool spec.

A declaration comes from the user only: :func:`speculable` records it for that tool object
(a copy is also written to ``tool.metadata["spectool"]`` for display, but metadata is never
read back: langchain-mcp-adapters copies an MCP server's tool annotations into ``metadata``,
so a server could otherwise declare its own tools pure). A tool built from a function that
spectool's own ``@tool`` decorated keeps that function's declaration. Anything else is
*mutating*: never run early.

Tools with injected arguments (``ToolRuntime``, ``InjectedState``, ``InjectedToolCallId``, …)
are never speculable either: what they return depends on graph state that a draft cannot see.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from spectool import Effect, ToolDefinitionError, ToolSpec, tool_spec

__all__ = ["declared", "effect_of", "speculable", "to_tool_spec"]

T = TypeVar("T", bound=BaseTool)
_META = "spectool"
_OPTIONS = ("effect", "scope", "ttl", "max_concurrency", "injected_ok", "gated")
# id(tool) -> the user's declaration; an entry goes with its tool (pydantic tools are not
# hashable, so no WeakKeyDictionary). Nothing a peer sends can write here.
_DECLARED: dict[int, dict[str, Any]] = {}


def _record(tool: BaseTool, options: Mapping[str, Any]) -> None:
    key = id(tool)
    if key not in _DECLARED:
        weakref.finalize(tool, _DECLARED.pop, key, None)
    _DECLARED[key] = dict(options)


def copy_declaration(source: BaseTool, target: BaseTool) -> None:
    """``target`` (a wrapper spectool builds around ``source``) carries its declaration."""
    found = _DECLARED.get(id(source))
    if found is not None:
        _record(target, found)


def speculable(
    tool: T | None = None,
    /,
    *,
    effect: Effect | str,
    scope: str = "default",
    ttl: float | None = None,
    max_concurrency: int | None = None,
    injected_ok: bool = False,
    gated: bool = False,
) -> Any:
    """Declare a LangChain tool's effect; returns the same tool (usable as a decorator).

    ``speculable(search, effect="read_only")`` or, stacked above LangChain's ``@tool``::

        @speculable(effect="pure")
        @tool
        def add(a: int, b: int) -> int: ...

    ``effect="mutating"`` is allowed (it documents that the tool never runs early).
    ``injected_ok=True`` says the arguments LangChain injects do not change what the tool
    returns (langchain-mcp-adapters' ``runtime``, seen only by interceptors): without it a tool
    with injected arguments never runs early. ``gated=True``: the tool sits behind an approval
    or guardrail spectool cannot see, so it never runs early (``interrupt_on`` of LangChain's
    ``HumanInTheLoopMiddleware`` and LangGraph's ``interrupt_before`` are found on their own).
    """
    try:
        effect = Effect(effect)
    except ValueError as exc:
        allowed = ", ".join(e.value for e in Effect)
        raise ToolDefinitionError(f"effect must be one of {allowed}; got {effect!r}") from exc
    if not isinstance(scope, str) or not scope:
        raise ToolDefinitionError(f"scope must be a non-empty string; got {scope!r}")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0):
        raise ToolDefinitionError(f"ttl must be positive seconds or None; got {ttl!r}")
    if max_concurrency is not None and max_concurrency < 1:
        raise ToolDefinitionError(f"max_concurrency must be >= 1; got {max_concurrency!r}")
    options = {
        "effect": effect.value,
        "scope": scope,
        "ttl": ttl,
        "max_concurrency": max_concurrency,
        "injected_ok": injected_ok,
        "gated": gated,
    }

    def declare(t: T) -> T:
        if not isinstance(t, BaseTool):
            raise ToolDefinitionError(
                f"speculable() needs a LangChain BaseTool (apply it above @tool); got {t!r}"
            )
        _record(t, options)
        t.metadata = {**(t.metadata or {}), _META: options}  # for display only; never read
        return t

    return declare if tool is None else declare(tool)


def declared(tool: BaseTool) -> dict[str, Any]:
    """The user's declared options of a tool (effect, scope, ttl, max_concurrency); mutating
    if none. ``tool.metadata`` is not consulted: a tool's source (an MCP server) writes it."""
    meta = _DECLARED.get(id(tool))
    if meta is not None:
        return {k: meta[k] for k in _OPTIONS if k in meta}
    fn = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    if fn is not None and hasattr(fn, "__spectool_tool__"):
        spec = tool_spec(fn)
        kept = {k: getattr(spec, k) for k in ("scope", "ttl", "max_concurrency")}
        return {"effect": spec.effect.value, **kept}
    return {"effect": Effect.MUTATING.value}


def effect_of(tool: BaseTool) -> Effect:
    """The effect spectool acts on: the declaration, forced to mutating for injected tools."""
    options = declared(tool)
    if has_injected_args(tool) and not options.get("injected_ok"):
        return Effect.MUTATING
    return Effect(options.get("effect", Effect.MUTATING))


def has_injected_args(tool: BaseTool) -> bool:
    """True when LangChain injects arguments the model does not write (state, runtime, ids)."""
    if tool._injected_args_keys:  # noqa: SLF001 - the public schemas hide exactly these
        return True
    full = tool.get_input_schema()
    shown = tool.tool_call_schema
    return _field_names(full) != _field_names(shown)


def _field_names(schema: Any) -> set[str]:
    if isinstance(schema, Mapping):
        return set((schema.get("properties") or {}).keys())
    fields = getattr(schema, "model_fields", None)
    return set(fields or ())


def _interrupts(tool: BaseTool) -> bool:
    from ._gates import calls_interrupt, marked_interrupting

    return marked_interrupting(tool) or any(
        calls_interrupt(f) for f in (getattr(tool, "func", None), getattr(tool, "coroutine", None)) if f
    )


def to_tool_spec(tool: BaseTool, fn: Callable[..., Any] | None = None, *, gated: bool = False) -> ToolSpec:
    """The spectool spec of a LangChain tool; ``fn`` runs its body (see ``_replay``); ``gated``:
    the graph puts it behind an approval (see ``_gates``)."""
    options = declared(tool)
    return ToolSpec.from_schema(
        convert_to_openai_tool(tool),
        fn,
        effect=effect_of(tool),
        scope=options.get("scope") or "default",
        ttl=options.get("ttl"),
        max_concurrency=options.get("max_concurrency"),
        gated=gated or bool(options.get("gated")) or _interrupts(tool),
    )
