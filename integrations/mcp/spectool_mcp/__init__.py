"""spectool-mcp: speculative tool calling for tools served by MCP servers.

``await mcp_tools(session)`` turns an MCP client session's tools into spectool tools whose
effects come from their ``ToolAnnotations`` (conservatively: see ``effect_from_annotations``).
``spectool_mcp.langchain.declare_mcp_tools`` does the same for tools that
``langchain-mcp-adapters`` loaded. ``async with mcp_session(stdio_client(params)) as s:``
opens an initialized session whose errors arrive unwrapped (not in nested ExceptionGroups).
"""

from ._connect import mcp_session
from ._effects import McpEffect, effect_from_annotations
from ._session import mcp_tool_spec, mcp_tools, result_value

__version__ = "0.1.0"

__all__ = [
    "McpEffect",
    "effect_from_annotations",
    "mcp_session",
    "mcp_tool_spec",
    "mcp_tools",
    "result_value",
]
