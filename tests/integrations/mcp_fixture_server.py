"""An MCP server for tests (FastMCP over stdio): one tool per combination of annotation hints,
an unannotated tool, a small key-value store, and a tool that fails.

    python tests/integrations/mcp_fixture_server.py

Hint values: n = missing, f = False, t = True; tool ``h_<readOnly><destructive><idempotent>
<openWorld>`` echoes its argument. Every call is appended to the file named by
``SPECTOOL_MCP_CALL_LOG`` (if set), so tests can see which calls reached the server.
"""

from __future__ import annotations

import itertools
import os

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
VALUES = {"n": None, "f": False, "t": True}
server = FastMCP("fixture", log_level="WARNING")
store = {"a": "1", "b": "2"}


def _log(name: str, arg: str) -> None:
    path = os.environ.get("SPECTOOL_MCP_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{name} {arg}\n")


def combo_name(code: str) -> str:
    return "h_" + code


def _echo_tool(name: str):
    def echo(x: str) -> str:
        _log(name, x)
        return f"{name}:{x}"

    return echo


for code in map("".join, itertools.product("nft", repeat=4)):
    hints = {h: VALUES[c] for h, c in zip(HINTS, code) if VALUES[c] is not None}
    server.add_tool(
        _echo_tool(combo_name(code)),
        name=combo_name(code),
        description=f"echo with hints {code}",
        annotations=ToolAnnotations(**hints),
    )
server.add_tool(_echo_tool("plain"), name="plain", description="no annotations at all")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def get(key: str) -> str:
    """Read a key."""
    _log("get", key)
    return store.get(key, "")


@server.tool(annotations=ToolAnnotations(destructiveHint=True, openWorldHint=False))
def put(key: str, value: str) -> str:
    """Set a key."""
    _log("put", key)
    store[key] = value
    return "ok"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def fail(reason: str) -> str:
    """Always fails."""
    _log("fail", reason)
    raise ValueError(f"refused: {reason}")


if __name__ == "__main__":
    server.run("stdio")
