"""MCP errors arrive as themselves: ``spectool_mcp.mcp_session`` against a real MCP server
(FastMCP over stdio, started by the test), where the SDK's own ``async with`` pair wraps an
error in two nested ExceptionGroups (the control)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from spectool_mcp import mcp_session, mcp_tools

import spectool
from spectool import ConfigError, ToolCall, ToolError

HERE = Path(__file__).parent


def _params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(HERE / "mcp_fixture_server.py")])


@pytest.mark.anyio
async def test_a_bad_override_is_the_config_error_itself() -> None:
    with pytest.raises(ConfigError, match="no_such"):
        async with mcp_session(stdio_client(_params())) as session:
            await mcp_tools(session, overrides={"no_such": "pure"})
    # control: the SDK's pair of context managers wraps the same error twice
    with pytest.raises(BaseExceptionGroup) as caught:
        async with stdio_client(_params()) as (r, w), ClientSession(r, w) as session:
            await session.initialize()
            await mcp_tools(session, overrides={"no_such": "pure"})
    assert isinstance(caught.value.exceptions[0], BaseExceptionGroup)


@pytest.mark.anyio
async def test_a_tool_error_raised_by_the_agent_is_the_tool_error_itself() -> None:
    with pytest.raises(ToolError, match="refused: no"):
        async with mcp_session(stdio_client(_params())) as session:
            tools = await mcp_tools(session, scope="fx")
            async with spectool.Speculator(tools) as spec:
                [out] = await spec.resolve_all([ToolCall("fail", {"reason": "no"})])
            out.unwrap()


@pytest.mark.anyio
async def test_the_session_works(tmp_path) -> None:  # control: a normal call goes through
    async with mcp_session(stdio_client(_params())) as session:
        tools = {t.name: t for t in await mcp_tools(session, scope="fx")}
        assert "get" in tools and "put" in tools
