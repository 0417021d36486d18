"""A fully offline agent: scripted main model in-process, real tools, speculation on and off.

    python examples/offline_agent.py [--latency 0.3] [--socket]

The main model is spectool's scripted OpenAI-compatible server (in-process, or on a localhost
socket with --socket); the drafter knows what the model will do with 80% probability per
sample. It prints both transcripts' equality, the times, and the counters.
"""

from __future__ import annotations

import argparse

import anyio

import spectool
from spectool.testing import ScriptedDrafter, ScriptedModel, SocketServer, call, openai_client, say

FILES = {"/notes/todo.txt": "buy milk", "/notes/ideas.txt": "speculate tools"}


def make_tools(latency: float):
    files = dict(FILES)

    @spectool.tool(effect="read_only", scope="fs")
    async def ls(folder: str) -> list[str]:
        """List the files in a folder."""
        await anyio.sleep(latency)
        return sorted(p for p in files if p.startswith(folder.rstrip("/") + "/"))

    @spectool.tool(effect="read_only", scope="fs")
    async def cat(path: str) -> str:
        """Read a file."""
        await anyio.sleep(latency)
        return files.get(path, f"no such file: {path}")

    @spectool.tool(scope="fs")
    async def write(path: str, text: str) -> str:
        """Write a file (mutating: never run early)."""
        await anyio.sleep(latency)
        files[path] = text
        return "written"

    @spectool.tool(effect="pure")
    def word_count(text: str) -> int:
        """Count words."""
        return len(text.split())

    return [ls, cat, write, word_count]


SCRIPT = [
    call("ls", folder="/notes"),
    [call("cat", path="/notes/todo.txt"), call("cat", path="/notes/ideas.txt")],
    [call("write", path="/notes/todo.txt", text="buy milk and bread"), call("cat", path="/notes/todo.txt")],
    call("word_count", text="buy milk and bread"),
    say("Your todo list now has 4 words."),
]


async def run_once(target, latency: float, drafter):
    async with spectool.speculative(openai_client(target), make_tools(latency), drafter, samples=3) as agent:
        return await spectool.run_agent(agent, model="scripted", messages="Tidy my notes.")


async def main(latency: float, socket: bool) -> None:
    model = ScriptedModel(SCRIPT, first_token_latency=latency)
    if socket:
        async with SocketServer(model) as server:
            await compare(server.url, model, latency)
    else:
        await compare(model, model, latency)


async def compare(target, model: ScriptedModel, latency: float) -> None:
    plain = await run_once(target, latency, None)
    fast = await run_once(target, latency, ScriptedDrafter(model, hit_rate=0.8, delay=latency / 10))
    print("final answer:", fast.final_text)
    print("transcripts identical:", plain.transcript_json() == fast.transcript_json())
    print(f"without speculation: {plain.seconds:.2f} s   with: {fast.seconds:.2f} s   "
          f"saved {100 * (1 - fast.seconds / plain.seconds):.0f}%")
    keep = ("hits", "joins", "misses", "stale_discards", "mutating_runs", "rejected")
    print("counters:", {k: fast.stats[k] for k in keep})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.3, help="tool latency = model turn time (s)")
    parser.add_argument("--socket", action="store_true", help="serve the model on a localhost socket")
    args = parser.parse_args()
    anyio.run(main, args.latency, args.socket)
