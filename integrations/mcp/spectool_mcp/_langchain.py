"""Tools loaded by ``langchain-mcp-adapters``, declared for ``langchain-spectool``.

The adapters copy each tool's ``ToolAnnotations`` into ``tool.metadata``; this reads them with
the same conservative mapping and declares the effect with ``langchain_spectool.speculable``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.tools import BaseTool

from langchain_spectool import speculable
from spectool import Effect

from ._effects import by_name, spec_options

__all__ = ["declare_mcp_tools"]


def declare_mcp_tools(
    tools: Iterable[BaseTool],
    *,
    scope: str = "mcp",
    overrides: Mapping[str, Any] | None = None,
    allow_external: bool = False,
    interceptors: bool = False,
    confirm: Iterable[str] = (),
) -> list[BaseTool]:
    """Declare the effects of tools from ``langchain_mcp_adapters.tools.load_mcp_tools``;
    returns the same tools (options as :func:`spectool_mcp.mcp_tools`).

    The adapters inject a ``runtime`` argument that only their tool interceptors see; pass
    ``interceptors=True`` if you loaded the tools with any (they may act on graph state), and
    the tools never run early. ``confirm`` names the tools the user confirms before each call:
    they never run early."""
    tools = list(tools)
    overrides, confirm = by_name(overrides, confirm, {t.name for t in tools}, "that were not loaded")
    for t in tools:
        options = spec_options(
            t.name,
            t.metadata or None,
            scope=scope,
            override=overrides.get(t.name),
            allow_external=allow_external,
        )
        if options.pop("external", False):  # langchain-spectool cannot say "reaches outside"
            options["effect"] = Effect.MUTATING
        options["effect"] = Effect(options["effect"]).value
        options["gated"] = t.name in confirm or bool(options.get("gated"))
        speculable(t, **options, injected_ok=not interceptors)
    return tools
