"""The soak's MCP tools: a real MCP server in the same process, over memory streams.

The server (mcp's low-level ``Server``, as in ``tests/integrations/test_mcp_*.py``) offers
``notes_read`` (``readOnlyHint``, closed world: speculable) and ``notes_write`` (mutating).
Its state — the notes and how many times each write ran — is the soak's *world state*: a
write run early, twice or with other arguments changes it. The agents' toolbox gets both
tools through :func:`spectool_mcp.mcp_tools` next to the BFCL ones, and the model sees them
in its tool list. The 135M main model rarely calls them, so every agent first runs a
scripted pre-step (read, write, read of its own note) through a spectool session's
``run_tool_calls`` — the path a model's calls take.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from spectool import Toolbox, ToolSpec
from spectool.errors import ConfigError

from ..bfcl._tasks import Task
from ..harness._agents import Setup

__all__ = [
    "McpWorld",
    "NotesServer",
    "Prestep",
    "pass_world",
    "with_world",
    "mcp_world",
    "run_scripted",
    "scripted_calls",
    "with_mcp_tools",
]

READ, WRITE = "notes_read", "notes_write"


class NotesServer:
    """The MCP server's state and handlers; writes for distinct keys commute, so the state
    does not depend on how concurrent agents interleave."""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {}
        self.writes: Counter[tuple[str, str]] = Counter()

    def state(self) -> dict[str, Any]:
        """The world state compared across passes."""
        return {
            "notes": dict(sorted(self.notes.items())),
            "writes": sorted([k, v, n] for (k, v), n in self.writes.items()),
        }

    def server(self) -> Any:
        from mcp import types
        from mcp.server.lowlevel import Server

        server: Any = Server("soak-notes")
        key = {"key": {"type": "string", "description": "The note's name."}}
        read = types.Tool(
            name=READ,
            description="Read a saved note by its key.",
            inputSchema={"type": "object", "properties": key, "required": ["key"]},
            annotations=types.ToolAnnotations(readOnlyHint=True, openWorldHint=False),
        )
        write = types.Tool(
            name=WRITE,
            description="Save a note under a key (replaces the old one).",
            inputSchema={
                "type": "object",
                "properties": {**key, "text": {"type": "string"}},
                "required": ["key", "text"],
            },
            annotations=types.ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False),
        )

        @server.list_tools()
        async def list_tools() -> list[types.Tool]:
            return [read, write]

        @server.call_tool()
        async def call_tool(name: str, arguments: dict[str, Any]) -> list[types.TextContent]:
            k = str(arguments.get("key", ""))
            if name == WRITE:
                text = str(arguments.get("text", ""))
                self.notes[k] = text
                self.writes[(k, text)] += 1
                return [types.TextContent(type="text", text=f"saved {k}")]
            return [types.TextContent(type="text", text=self.notes.get(k, "(no note)"))]

        return server


@dataclasses.dataclass
class McpWorld:
    """One pass's MCP server, its tools as ToolSpecs and as the model's tool entries."""

    notes: NotesServer
    specs: list[ToolSpec]

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {"name": s.name, "description": s.description, "parameters": s.parameters},
            }
            for s in self.specs
        ]

    def hook(self, inner: Callable[[Task, Toolbox], Toolbox] | None) -> Callable[[Task, Toolbox], Toolbox]:
        """A ``Setup.tools_hook``: the MCP tools replace the BFCL stubs built from their
        schemas, then ``inner`` (the faults) wraps everything alike."""
        mine = {s.name: s for s in self.specs}

        def hook(task: Task, box: Toolbox) -> Toolbox:
            out = Toolbox([mine.get(spec.name, spec) for spec in box])
            return inner(task, out) if inner is not None else out

        return hook

    async def prestep(self, make_client: Callable[[], Any], agent: int, *, eager: str) -> list[Any]:
        """The agent's scripted read, write, read, through a spectool session of its own
        (``eager`` as the pass's) on the MCP tools: the path a model's calls take."""
        from spectool import speculative

        client = make_client()
        try:
            async with speculative(client, Toolbox(self.specs), None, eager=eager) as spec:
                return await run_scripted(spec, agent)
        finally:
            await client.close()


@asynccontextmanager
async def mcp_world() -> AsyncIterator[McpWorld]:
    """A fresh server with empty state, connected in memory for as long as the block runs."""
    try:
        from mcp.shared.memory import create_connected_server_and_client_session
        from spectool_mcp import mcp_tools
    except ImportError as exc:  # the integration is not a dependency of spectool-bench
        raise ConfigError(
            "spectool soak --mcp needs the MCP integration (pip install -e integrations/mcp); "
            "--no-mcp runs without it"
        ) from exc

    notes = NotesServer()
    async with create_connected_server_and_client_session(notes.server()) as session:
        yield McpWorld(notes, await mcp_tools(session, scope="soak-notes"))


def with_mcp_tools(tasks: Sequence[Sequence[Task]], schemas: Sequence[dict[str, Any]]) -> list[list[Task]]:
    """Every task with the MCP tools appended to its tool list (what the model is offered)."""
    return [[dataclasses.replace(t, tools=[*t.tools, *schemas]) for t in agent] for agent in tasks]


def scripted_calls(agent: int) -> list[dict[str, Any]]:
    """The pre-step's assistant messages: read, write, read again (the write must be seen)."""
    key = f"agent-{agent}"

    def msg(step: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
        call = {"id": f"pre-{agent}-{step}", "type": "function"}
        call["function"] = {"name": name, "arguments": json.dumps(args)}  # type: ignore[assignment]
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    return [
        msg(0, READ, {"key": key}),
        msg(1, WRITE, {"key": key, "text": f"soak note of agent {agent}"}),
        msg(2, READ, {"key": key}),
    ]


async def run_scripted(spec: Any, agent: int) -> list[Any]:
    """Run the pre-step through ``spec.run_tool_calls``; the tool messages' contents."""
    out: list[Any] = []
    for message in scripted_calls(agent):
        out.extend(m.get("content") for m in await spec.run_tool_calls(message))
    return out


Prestep = Callable[[int], Awaitable[list[Any]]]


@asynccontextmanager
async def pass_world(enabled: bool) -> AsyncIterator[McpWorld | None]:
    """A pass's MCP server (fresh state), or None with ``--no-mcp``."""
    if not enabled:
        yield None
        return
    async with mcp_world() as world:
        yield world


def with_world(
    world: McpWorld | None, assignment: list, setup: Setup, eager: str
) -> tuple[list, Setup, Prestep | None]:
    """The pass's tasks, setup and pre-step with the MCP tools added (unchanged without)."""
    if world is None:
        return assignment, setup, None
    setup = dataclasses.replace(setup, tools_hook=world.hook(setup.tools_hook))
    prestep = functools.partial(world.prestep, setup.make_client, eager=eager)
    return with_mcp_tools(assignment, world.schemas), setup, prestep
