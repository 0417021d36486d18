"""Speculative tool calls for a LangChain ``create_agent`` agent, offline.

    python examples/langchain_agent.py              # one run, embedded SmolLM2 drafter
    python examples/langchain_agent.py --drafter history
    python examples/langchain_agent.py --bench      # time saved, tool latency ≈ generation

The main model is scripted (``ScriptedChatModel``): it stands in for your chat model so the
example runs without a server or an API key. The agent, its tools and the middleware are real.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from langchain_core.tools import tool

from langchain_spectool import SpeculativeToolMiddleware, create_agent, speculable
from langchain_spectool.testing import ScriptedChatModel, call, reply, transcript

PRICES = {"AAPL": 227.5, "NVDA": 131.2, "MSFT": 441.0}


def make_tools(latency: float):
    @speculable(effect="read_only")
    @tool
    def get_price(symbol: str) -> str:
        """Latest price of a stock symbol."""
        time.sleep(latency)
        return f"{symbol}: {PRICES.get(symbol, 0.0)}"

    @speculable(effect="pure")
    @tool
    def convert(amount: float, currency: str) -> str:
        """Convert a USD amount to another currency."""
        time.sleep(latency)
        return f"{amount * {'EUR': 0.92, 'GBP': 0.79}.get(currency, 1.0):.2f} {currency}"

    @tool
    def place_order(symbol: str, qty: int) -> str:
        """Buy qty shares of symbol (mutating: never runs early)."""
        time.sleep(latency)
        return f"ordered {qty} {symbol}"

    return [get_price, convert, place_order]


def script(symbol: str) -> list:
    price = PRICES[symbol]
    return [
        reply("", call("get_price", {"symbol": symbol}, "c1")),
        reply("", call("convert", {"amount": price, "currency": "EUR"}, "c2")),
        reply("", call("place_order", {"symbol": symbol, "qty": 1}, "c3")),
        reply("", call("get_price", {"symbol": symbol}, "c4")),
        reply(f"Bought one {symbol}."),
    ]


def make_drafter(kind: str, model: ScriptedChatModel, *, hit_rate: float = 1.0, delay: float = 0.0):
    if kind == "oracle":  # knows the script; right with probability hit_rate (benchmarks)
        from spectool.testing import ScriptedDrafter

        return ScriptedDrafter(model.next_calls, hit_rate=hit_rate, delay=delay)
    if kind == "history":
        from spectool.drafters import HistoryDrafter

        return HistoryDrafter()
    from spectool.drafters import LocalDrafter  # embedded SmolLM2 unless xLAM-2 is cached

    return LocalDrafter()


def demo(args: argparse.Namespace) -> None:
    model = ScriptedChatModel(script=script("NVDA"), latency=args.generation)
    middleware = SpeculativeToolMiddleware(make_drafter(args.drafter, model), samples=args.samples,
                                           draft_timeout=args.draft_timeout)
    agent = create_agent(model, make_tools(args.tool_latency), middleware=[middleware])
    t0 = time.perf_counter()
    out = agent.invoke({"messages": [("user", "Buy one NVDA and tell me the price in EUR")]})
    took = time.perf_counter() - t0
    for m in out["messages"]:
        print(f"{m.type:>5}: {m.content or [c['name'] for c in m.tool_calls]}")
    stats = middleware.stats()
    middleware.close()
    print(f"\n{took:.2f} s; hits {stats['hits']}, joins {stats['joins']}, misses "
          f"{stats['misses']}, speculative runs {stats['speculative_started']}, "
          f"tool time saved {stats['time_saved']:.2f} s")


async def _one(symbol: str, args: argparse.Namespace, speculate: bool) -> tuple[float, list, dict]:
    model = ScriptedChatModel(script=script(symbol), latency=args.generation)
    middleware = []
    if speculate:
        drafter = make_drafter("oracle", model, hit_rate=args.hit_rate, delay=args.draft_latency)
        middleware = [SpeculativeToolMiddleware(drafter, samples=1, draft_timeout=5.0)]
    agent = create_agent(model, make_tools(args.tool_latency), middleware=middleware)
    t0 = time.perf_counter()
    out = await agent.ainvoke({"messages": [("user", f"Buy one {symbol}")]})
    took = time.perf_counter() - t0
    return took, transcript(out["messages"]), (middleware[0].stats() if middleware else {})


async def bench(args: argparse.Namespace) -> None:
    base, spec, hits, calls = [], [], 0, 0
    for rep in range(args.repeats):
        for symbol in PRICES:  # side by side: same script, same tools, baseline first
            t_base, tr_base, _ = await _one(symbol, args, speculate=False)
            t_spec, tr_spec, stats = await _one(symbol, args, speculate=True)
            assert tr_base == tr_spec, "speculation changed the transcript"
            base.append(t_base)
            spec.append(t_spec)
            hits += stats["hits"] + stats["joins"]
            calls += 4
    b, s = statistics.mean(base), statistics.mean(spec)
    print(f"scripted LangChain workload: {len(base)} runs x 4 tool calls, generation "
          f"{args.generation:.2f} s/turn, tool {args.tool_latency:.2f} s, draft "
          f"{args.draft_latency:.2f} s, hit rate {args.hit_rate:.2f} (3 of 4 calls speculable)")
    print(f"  baseline    {b:.3f} s/run (median {statistics.median(base):.3f})")
    print(f"  speculative {s:.3f} s/run (median {statistics.median(spec):.3f})")
    print(f"  time saved  {100 * (b - s) / b:.1f} %   cache-served calls {hits}/{calls}; "
          "transcripts identical")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", action="store_true", help="measure time saved (oracle drafter)")
    p.add_argument("--drafter", choices=["local", "history", "oracle"], default="local")
    p.add_argument("--samples", type=int, default=1, help="λ: drafts per model request")
    p.add_argument("--draft-timeout", type=float, default=30.0)
    p.add_argument("--generation", type=float, default=0.5, help="seconds per model turn")
    p.add_argument("--tool-latency", type=float, default=0.5, help="seconds per tool call")
    p.add_argument("--draft-latency", type=float, default=0.05, help="bench: seconds per draft")
    p.add_argument("--hit-rate", type=float, default=0.8, help="bench: drafter accuracy α")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if args.bench:
        asyncio.run(bench(args))
    else:
        demo(args)


if __name__ == "__main__":
    main()
