"""``mcp_session(transport)``: an initialized MCP client session whose errors arrive as raised.

The MCP SDK's transports and ``ClientSession`` each run a task group, so an error raised in the
body of ``async with stdio_client(...) as (r, w), ClientSession(r, w) as s:`` (spectool's
``ConfigError``, a ``ToolError``, your own) comes out wrapped in two nested
``ExceptionGroup``s. This context manager opens both and hands back the one error itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from mcp import ClientSession

__all__ = ["mcp_session", "sole_error"]


def sole_error(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The one exception inside ``group`` and the groups nested in it, or None if there are
    several (they are then all worth seeing: the group is raised as it is)."""
    leaves: list[BaseException] = []
    todo: list[BaseException] = [group]
    while todo:
        exc = todo.pop()
        if isinstance(exc, BaseExceptionGroup):
            todo.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else None


@asynccontextmanager
async def mcp_session(
    transport: AbstractAsyncContextManager[Any], **session_options: Any
) -> AsyncIterator[ClientSession]:
    """``async with mcp_session(stdio_client(params)) as session: await mcp_tools(session)``.

    ``transport`` is any MCP client transport (``stdio_client``, ``sse_client``,
    ``streamablehttp_client``); ``session_options`` go to ``ClientSession``. The session is
    initialized. An error from inside comes out as itself, not inside ``ExceptionGroup``s
    (several errors at once still come out as their group)."""
    try:
        async with transport as streams, ClientSession(streams[0], streams[1], **session_options) as session:
            await session.initialize()
            yield session
    except BaseExceptionGroup as group:
        error = sole_error(group)
        if error is None:
            raise
        raise error from None  # its own traceback still shows where it was raised
