"""An OpenAI Agents SDK agent with speculation, offline: a real ``Runner``, the scripted model.

    python examples/openai_agents_agent.py [--latency 0.3]

The agent's model is the SDK's ``OpenAIChatCompletionsModel`` talking to spectool's scripted
OpenAI-compatible server (in-process). The same agent runs without and with speculation; the
script prints whether the two runs' items are identical, the times and the counters.
"""

from __future__ import annotations

import argparse
import json
import time

import anyio
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from spectool_agents import speculate

from spectool.testing import ScriptedDrafter, ScriptedModel, call, openai_client, say

STOCK = {"apple": 3, "pear": 0}


def make_agent(model: ScriptedModel, latency: float) -> Agent:
    stock = dict(STOCK)

    @function_tool
    async def get_stock(item: str) -> str:
        """How many of an item are in stock."""
        await anyio.sleep(latency)
        return f"{item}: {stock.get(item, 0)}"

    @function_tool
    async def buy(item: str, qty: int) -> str:
        """Buy qty of an item (changes the stock)."""
        await anyio.sleep(latency)
        stock[item] = stock.get(item, 0) - qty
        return f"bought {qty} {item}"

    llm = OpenAIChatCompletionsModel(model="scripted", openai_client=openai_client(model))
    return Agent(name="shop", instructions="You run a shop.", tools=[get_stock, buy], model=llm)


SCRIPT = [
    [call("get_stock", item="apple"), call("get_stock", item="pear")],
    call("buy", item="apple", qty=2),
    call("get_stock", item="apple"),
    say("Bought 2 apples; 1 left."),
]


async def run(agent: Agent) -> tuple[str, float, object]:
    start = time.perf_counter()
    result = await Runner.run(agent, "Buy two apples if in stock.")
    return json.dumps(result.to_input_list(), sort_keys=True, default=str), time.perf_counter() - start, result


async def main(latency: float) -> dict:
    set_tracing_disabled(True)  # offline: no trace export
    model = ScriptedModel(SCRIPT, first_token_latency=latency)
    plain_items, plain_s, _ = await run(make_agent(model, latency))
    drafter = ScriptedDrafter(model, hit_rate=1.0, delay=latency / 10)
    async with speculate(make_agent(model, latency), drafter, effects={"get_stock": "read_only"}) as agent:
        fast_items, fast_s, result = await run(agent)
        stats = agent.spectool.stats()
    identical = plain_items == fast_items
    print("final answer:", result.final_output)
    print("transcripts identical:", identical)
    print(f"without speculation: {plain_s:.2f} s   with: {fast_s:.2f} s   saved {100 * (1 - fast_s / plain_s):.0f}%")
    keep = ("hits", "joins", "misses", "stale_discards", "rejected")
    print("counters:", {k: stats[k] for k in keep})
    return {"identical": identical, "stats": stats, "plain_s": plain_s, "fast_s": fast_s}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.3, help="tool latency = model turn time (s)")
    anyio.run(main, parser.parse_args().latency)
