"""MCP tools as spectool tools: list a session's tools, call them through the session.

Each tool becomes a :class:`spectool.ToolSpec` whose function sends ``tools/call`` on the given
``mcp.ClientSession`` (stdio, SSE or streamable HTTP: any transport). A result flagged
``isError`` is raised as :class:`spectool.ToolError`, so the model sees the same error text with
and without speculation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mcp import ClientSession, types

from spectool import ConfigError, ToolError, ToolSpec

from ._effects import by_name, spec_options

__all__ = ["MAX_PAGES", "MAX_TOOLS", "mcp_tool_spec", "mcp_tools", "result_value"]

#: ``tools/list`` bounds: a server is a peer, and one whose every page has a ``nextCursor``
#: (or that lists without end) must not keep the client looping and allocating.
MAX_PAGES = 100
MAX_TOOLS = 2000


def result_value(name: str, result: types.CallToolResult) -> Any:
    """What the model gets back: the text of a text-only result, else the structured content,
    else the content blocks as JSON. An error result raises ``ToolError``."""
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    if result.isError:
        raise ToolError(f"MCP tool {name!r} failed: {' '.join(texts) or 'no details'}", tool=name)
    if result.content and len(texts) == len(result.content):
        return texts[0] if len(texts) == 1 else texts
    if result.structuredContent is not None:
        return result.structuredContent
    return [c.model_dump(mode="json", exclude_none=True) for c in result.content]


def mcp_tool_spec(
    session: ClientSession,
    tool: types.Tool,
    *,
    scope: str = "mcp",
    override: Any = None,
    allow_external: bool = False,
    confirm: bool = False,
) -> ToolSpec:
    """One MCP tool as a ToolSpec that runs through ``session``; ``confirm``: the user confirms
    each call before it runs, so it never runs early (``gated``)."""
    name = tool.name

    async def run(**arguments: Any) -> Any:
        return result_value(name, await session.call_tool(name, arguments))

    options = spec_options(
        name, tool.annotations, scope=scope, override=override, allow_external=allow_external
    )
    options["gated"] = confirm or bool(options.get("gated"))
    return ToolSpec(
        name=name,
        description=tool.description or "",
        parameters=tool.inputSchema or {"type": "object", "properties": {}},
        fn=run,
        **options,
    )


async def mcp_tools(
    session: ClientSession,
    *,
    scope: str = "mcp",
    overrides: Mapping[str, Any] | None = None,
    allow_external: bool = False,
    max_pages: int = MAX_PAGES,
    max_tools: int = MAX_TOOLS,
    confirm: Iterable[str] = (),
) -> list[ToolSpec]:
    """Every tool the (initialized) session's server offers, as ToolSpecs.

    ``scope`` is the state scope of the server's tools: a mutating call makes the early reads
    of the same scope stale. ``overrides`` maps a tool name to an effect (``"read_only"``,
    ``"pure"``, ``"mutating"``) or to ToolSpec options (``{"effect": "pure", "ttl": 60}``);
    an override naming no tool of the server is an error (a typo would silently do nothing).
    ``allow_external`` lets read-only tools that reach outside (open world) run early.
    Listing stops with ConfigError past ``max_pages`` pages or ``max_tools`` tools, or when
    the server hands back a cursor it gave before (it would loop for ever).
    ``confirm`` names the tools your client asks the user to confirm before each call (MCP
    leaves confirmation to the client): they never run early, whatever their annotations.
    """
    listed: list[types.Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(max_pages):
        page = await session.list_tools(
            params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        listed.extend(page.tools)
        if len(listed) > max_tools:
            raise ConfigError(f"the MCP server lists more than {max_tools} tools (max_tools)")
        cursor = page.nextCursor
        if not cursor:
            break
        if cursor in seen:
            raise ConfigError(f"the MCP server's tools/list repeats the cursor {cursor[:40]!r}")
        seen.add(cursor)
    else:
        raise ConfigError(f"the MCP server's tools/list goes on past {max_pages} pages (max_pages)")
    overrides, confirm = by_name(overrides, confirm, {t.name for t in listed}, "the MCP server does not have")
    return [
        mcp_tool_spec(
            session,
            t,
            scope=scope,
            override=overrides.get(t.name),
            allow_external=allow_external,
            confirm=t.name in confirm,
        )
        for t in listed
    ]
