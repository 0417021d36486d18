"""An agent on the OpenAI SDK with speculative tool calling.

    python examples/openai_agent.py                          # offline: scripted model on a socket
    python examples/openai_agent.py --base-url URL --model M \
        [--drafter-base-url URL2 --drafter-model D]          # any OpenAI-compatible endpoints

The main model is reached through a plain ``AsyncOpenAI`` client; the drafter is an
``EndpointDrafter`` (any OpenAI-compatible endpoint, e.g. vLLM serving xLAM-2). Offline, both
point at spectool's scripted server, so the example runs anywhere.
"""

from __future__ import annotations

import argparse
import json
import os

import anyio
from openai import AsyncOpenAI

import spectool
from spectool.drafters import EndpointDrafter
from spectool.testing import ScriptedModel, SocketServer, call, say

PRICES = {"NVDA": 181.5, "AAPL": 228.1}


@spectool.tool(effect="read_only", scope="market")
async def get_stock_price(symbol: str) -> float:
    """Latest price of a stock symbol."""
    await anyio.sleep(0.3)  # a slow market-data API
    return PRICES.get(symbol.upper(), 0.0)


@spectool.tool(effect="pure")
def convert(amount: float, rate: float) -> float:
    """Multiply an amount by an exchange rate."""
    return round(amount * rate, 2)


@spectool.tool(scope="market")
async def place_order(symbol: str, quantity: int) -> str:
    """Buy shares (mutating: never speculated)."""
    await anyio.sleep(0.3)
    return f"bought {quantity} {symbol}"


TOOLS = [get_stock_price, convert, place_order]
OFFLINE_SCRIPT = [
    [call("get_stock_price", symbol="NVDA"), call("get_stock_price", symbol="AAPL")],
    call("convert", amount=181.5, rate=0.92),
    call("place_order", symbol="NVDA", quantity=2),
    say("NVDA is 181.5 USD (166.98 EUR); I bought 2 shares."),
]


async def run(base_url: str, model: str, api_key: str, drafter_url: str, drafter_model: str) -> None:
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    drafter = EndpointDrafter(AsyncOpenAI(base_url=drafter_url, api_key=api_key, max_retries=0),
                              model=drafter_model, timeout=5.0)
    async with spectool.speculative(client, TOOLS, drafter, samples=3) as agent:
        result = await spectool.run_agent(
            agent, model=model, messages="Price NVDA and AAPL, NVDA in EUR at 0.92, then buy 2 NVDA.")
    print(json.dumps(result.transcript, indent=1)[:2000])
    print(f"answer: {result.final_text}\n{result.turns} turns, {result.seconds:.2f} s")
    print("counters:", {k: v for k, v in result.stats.items() if v})


async def main(args: argparse.Namespace) -> None:
    if args.base_url:
        await run(args.base_url, args.model, os.environ.get("OPENAI_API_KEY", "none"),
                  args.drafter_base_url or args.base_url, args.drafter_model or args.model)
        return
    # Two scripted endpoints: the main model (0.3 s per turn) and a ten times faster drafter.
    async with SocketServer(ScriptedModel(OFFLINE_SCRIPT, first_token_latency=0.3)) as main_server:
        async with SocketServer(ScriptedModel(OFFLINE_SCRIPT, first_token_latency=0.03)) as small:
            await run(main_server.url, "scripted", "offline", small.url, "scripted")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", help="main model endpoint (default: offline scripted server)")
    p.add_argument("--model", default="gpt-5")
    p.add_argument("--drafter-base-url")
    p.add_argument("--drafter-model")
    anyio.run(main, p.parse_args())
