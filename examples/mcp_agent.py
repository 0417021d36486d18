"""Speculation for tools served by an MCP server: a real FastMCP server over stdio, offline.

    python examples/mcp_agent.py [--latency 0.3]

The script starts itself as an MCP server (``--serve``) in a subprocess for each run, loads its
tools with ``spectool_mcp.mcp_tools`` (effects from their annotations), and runs the same
scripted agent without and with a drafter. It prints whether the transcripts are identical,
the times and the counters.
"""

from __future__ import annotations

import argparse
import sys

import anyio

import spectool
from spectool.testing import ScriptedDrafter, ScriptedModel, call, openai_client, say


def serve(latency: float) -> None:
    from mcp.server.fastmcp import FastMCP
    from mcp.types import ToolAnnotations

    files = {"/notes/todo.txt": "buy milk", "/notes/ideas.txt": "speculate tools"}
    server = FastMCP("notes", log_level="WARNING")
    closed_read = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

    @server.tool(annotations=closed_read)
    async def ls(folder: str) -> str:
        """List the files in a folder."""
        await anyio.sleep(latency)
        return "\n".join(sorted(p for p in files if p.startswith(folder.rstrip("/") + "/")))

    @server.tool(annotations=closed_read)
    async def cat(path: str) -> str:
        """Read a file."""
        await anyio.sleep(latency)
        return files.get(path, f"no such file: {path}")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True,
                                             openWorldHint=False))
    async def write(path: str, text: str) -> str:
        """Write a file (mutating: never runs early)."""
        await anyio.sleep(latency)
        files[path] = text
        return "written"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))  # open world by default
    async def web_search(query: str) -> str:
        """Search the web (reaches outside: never runs early unless allowed)."""
        await anyio.sleep(latency)
        return f"results for {query}"

    server.run("stdio")


SCRIPT = [
    call("ls", folder="/notes"),
    [call("cat", path="/notes/todo.txt"), call("cat", path="/notes/ideas.txt")],
    call("web_search", query="bread recipes"),
    [call("write", path="/notes/todo.txt", text="buy milk and bread"), call("cat", path="/notes/todo.txt")],
    say("Your todo list now says: buy milk and bread."),
]


async def run_once(latency: float, drafter: ScriptedDrafter | None, model: ScriptedModel):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from spectool_mcp import mcp_tools

    server = StdioServerParameters(command=sys.executable,
                                   args=[__file__, "--serve", "--latency", str(latency)])
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await mcp_tools(session, scope="notes")
        async with spectool.speculative(openai_client(model), tools, drafter, samples=3) as agent:
            return await spectool.run_agent(agent, model="scripted", messages="Tidy my notes.")


async def main(latency: float) -> dict:
    model = ScriptedModel(SCRIPT, first_token_latency=latency)
    plain = await run_once(latency, None, model)
    fast = await run_once(latency, ScriptedDrafter(model, hit_rate=1.0, delay=latency / 10), model)
    identical = plain.transcript_json() == fast.transcript_json()
    print("final answer:", fast.final_text)
    print("transcripts identical:", identical)
    print(f"without speculation: {plain.seconds:.2f} s   with: {fast.seconds:.2f} s   "
          f"saved {100 * (1 - fast.seconds / plain.seconds):.0f}%")
    keep = ("hits", "joins", "misses", "stale_discards", "mutating_runs", "rejected")
    print("counters:", {k: fast.stats[k] for k in keep})
    return {"identical": identical, "plain": plain, "fast": fast}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.3, help="tool latency = model turn time (s)")
    parser.add_argument("--serve", action="store_true", help="run as the MCP server (stdio)")
    args = parser.parse_args()
    if args.serve:
        serve(args.latency)
    else:
        anyio.run(main, args.latency)
