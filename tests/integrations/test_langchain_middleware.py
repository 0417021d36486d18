"""SpeculativeToolMiddleware on a real create_agent agent with real LangChain tools.

The chat model is scripted (langchain_spectool.testing.ScriptedChatModel): no real model runs
here, and LangChain's own fakes cannot bind tools. Everything else — create_agent, ToolNode,
the tools, LangChain's error handling — is the real thing.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tools import ToolException, tool

from langchain_spectool import SpeculativeToolMiddleware, create_agent, effect_of, speculable
from langchain_spectool.testing import ScriptedChatModel, call, reply, transcript
from spectool import Effect
from spectool.testing import ScriptedDrafter

MODEL_LATENCY = 0.1
TOOL_LATENCY = 0.1


class World:
    """Tools over one shared state, logging when each body starts."""

    def __init__(self) -> None:
        self.stock = {"apple": 3, "pear": 0}
        self.log: list[tuple[str, dict, float]] = []
        self.lock = threading.Lock()

        @tool
        def get_stock(item: str) -> str:
            """How many of an item are in stock."""
            self._note("get_stock", item=item)
            time.sleep(TOOL_LATENCY)
            return f"{item}: {self.stock.get(item, 0)}"

        @tool
        def buy(item: str, qty: int) -> str:
            """Buy qty of an item (changes the stock)."""
            self._note("buy", item=item, qty=qty)
            self.stock[item] = self.stock.get(item, 0) - qty
            return f"bought {qty} {item}"

        @tool
        def audit(item: str) -> str:
            """An audit that fails with a ToolException for missing items."""
            self._note("audit", item=item)
            time.sleep(TOOL_LATENCY)
            if self.stock.get(item, 0) == 0:
                raise ToolException(f"no {item} to audit")
            return f"audit ok: {item}"

        @tool
        def crash(item: str) -> str:
            """A lookup whose backend is down (raises a plain exception)."""
            self._note("crash", item=item)
            time.sleep(TOOL_LATENCY)
            raise ConnectionError(f"backend down for {item}")

        audit.handle_tool_error = True
        speculable(get_stock, effect="read_only")
        speculable(audit, effect="read_only")
        speculable(crash, effect="read_only")
        self.tools = [get_stock, buy, audit, crash]

    def _note(self, name: str, **args: object) -> None:
        with self.lock:
            self.log.append((name, args, time.monotonic()))

    def runs(self, name: str) -> list[dict]:
        return [a for n, a, _ in self.log if n == name]


SCRIPT = [
    reply("", call("get_stock", {"item": "apple"}, "c1"), call("get_stock", {"item": "pear"}, "c2")),
    reply("", call("audit", {"item": "pear"}, "c3")),
    reply("", call("buy", {"item": "apple", "qty": 2}, "c4")),
    reply("", call("get_stock", {"item": "apple"}, "c5")),
    reply("Bought 2 apples; 1 left."),
]


def build(drafter=None, script=SCRIPT, *, middleware: bool = True, **options):
    world = World()
    model = ScriptedChatModel(script=script, latency=MODEL_LATENCY)
    options.setdefault("draft_timeout", 1.0)
    mw = SpeculativeToolMiddleware(drafter, **options) if middleware else None
    agent = create_agent(model, world.tools, middleware=[mw] if mw else [])
    return agent, world, mw, model


def run(agent, mode: str, config: dict | None = None):
    inputs = {"messages": [("user", "buy two apples if in stock")]}
    if mode == "sync":
        return agent.invoke(inputs, config)["messages"]
    return asyncio.run(agent.ainvoke(inputs, config))["messages"]


class ResponseEnds(BaseCallbackHandler):
    """When each model response ended (LangChain's own callback), on the clock World logs with."""

    def __init__(self) -> None:
        self.at: list[float] = []

    def on_llm_end(self, *args: object, **kwargs: object) -> None:
        self.at.append(time.monotonic())


def run_closing(agent, mw, mode: str):
    """One run of ``agent``: its messages and the middleware's counters; ``mw`` is closed
    whatever happens."""
    try:
        return run(agent, mode), mw.stats()
    finally:
        mw.close()


def oracle(script=SCRIPT):
    return ScriptedChatModel(script=script).next_calls


@pytest.fixture(params=["sync", "async"])
def mode(request):
    return request.param


def test_transcript_identical_and_counters_show_early_runs(mode):
    agent, world, _, _ = build(middleware=False)
    baseline = transcript(run(agent, mode))
    agent, world, mw, _ = build(ScriptedDrafter(oracle()))
    messages, stats = run_closing(agent, mw, mode)
    assert transcript(messages) == baseline
    # Four read-only calls were predicted and served from the cache (c1, c2, c3, c5).
    assert stats["hits"] + stats["joins"] == 4
    assert stats["time_saved"] > 2 * TOOL_LATENCY
    # Each read ran exactly once: the early run served the model's call.
    assert len(world.runs("get_stock")) == 3 and len(world.runs("audit")) == 1
    assert world.stock["apple"] == 1


def test_speculation_saves_time(mode):
    def starts_and_ends(drafter):
        agent, world, mw, model = build(drafter, middleware=drafter is not None)
        # 0.3 s a response (not 0.1): a thread that starts an early run late on a loaded
        # machine still starts it within the response it overlaps
        model.latency = 0.3
        ends = ResponseEnds()
        try:
            run(agent, mode, {"callbacks": [ends]})
        finally:
            if mw is not None:
                mw.close()
        return [(name, t) for name, _, t in world.log], ends.at

    base_starts, base_ends = starts_and_ends(None)
    starts, ends = starts_and_ends(ScriptedDrafter(oracle()))
    # Ordering, not seconds (comparing two wall times failed on a loaded machine): 3 of 4 tool
    # rounds overlap generation -- with speculation each read started while the model was still
    # generating the response that calls it; without, only after that response ended. Rounds:
    # responses 0 (two get_stock), 1 (audit), 2 (buy: mutating, never early), 3 (get_stock).
    by_response = [0, 0, 1, 2, 3]
    assert len(ends) == len(base_ends) == 5
    assert (
        [n for n, _ in starts]
        == [n for n, _ in base_starts]
        == [
            "get_stock",
            "get_stock",
            "audit",
            "buy",
            "get_stock",
        ]
    )
    assert all(t > base_ends[r] for (_, t), r in zip(base_starts, by_response))
    early = [t < ends[r] for (_, t), r in zip(sorted(starts, key=lambda s: s[1]), by_response)]
    assert early == [True, True, True, False, True]


def test_mutating_tools_never_run_early(mode):
    # The drafter proposes every call, including buy(); only the model's own call may run it.
    script = [reply("", call("buy", {"item": "apple", "qty": 1}, "b1")), reply("done")]
    agent, world, mw, model = build(ScriptedDrafter(oracle(script)), script)
    answered: list[float] = []
    model.on_request = lambda messages: answered.append(time.monotonic())
    _, stats = run_closing(agent, mw, mode)
    assert world.runs("buy") == [{"item": "apple", "qty": 1}]
    assert stats["speculative_started"] == 0 and stats["rejected"] >= 1
    # buy's body started only after the model had produced the call.
    assert world.log[0][2] >= answered[0]
    assert effect_of(world.tools[1]) is Effect.MUTATING


def test_read_after_write_is_not_served_stale(mode):
    # The drafter predicts get_stock(apple) during the turn that buys: that early read is
    # older than the purchase, so the model's later read must run again and see the new stock.
    script = [
        reply("", call("buy", {"item": "apple", "qty": 2}, "b1")),
        reply("", call("get_stock", {"item": "apple"}, "g1")),
        reply("ok"),
    ]

    def early_reader(messages):
        return [c for c in oracle(script)(messages)] + [
            __import__("spectool").ToolCall("get_stock", {"item": "apple"})
        ]

    agent, world, mw, _ = build(ScriptedDrafter(early_reader), script)
    messages, stats = run_closing(agent, mw, mode)
    assert "apple: 1" in messages[4].content
    assert stats["stale_discards"] + stats["wasted_runs"] >= 1


@pytest.mark.parametrize("failure", ["raise", "hang", "garbage"])
def test_failing_drafter_changes_nothing(mode, failure):
    agent, _, _, _ = build(middleware=False)
    baseline = transcript(run(agent, mode))
    agent, world, mw, _ = build(ScriptedDrafter(oracle(), failure=failure), draft_timeout=0.05)
    messages, stats = run_closing(agent, mw, mode)
    assert transcript(messages) == baseline
    assert stats["hits"] + stats["joins"] == 0
    assert stats["draft_errors"] + stats["draft_timeouts"] + stats["rejected"] >= 1


def test_tool_exception_replays_as_the_same_error_message(mode):
    # audit(pear) raises ToolException; handle_tool_error=True turns it into an error
    # ToolMessage. Served from the early run, it must be the very same message.
    script = [reply("", call("audit", {"item": "pear"}, "a1")), reply("done")]
    agent, _, _, _ = build(middleware=False, script=script)
    baseline = run(agent, mode)
    agent, world, mw, _ = build(ScriptedDrafter(oracle(script)), script)
    messages, stats = run_closing(agent, mw, mode)
    assert transcript(messages) == transcript(baseline)
    assert messages[2].status == "error" and messages[2].content == "no pear to audit"
    assert stats["speculative_errors"] == 1 and stats["hits"] + stats["joins"] == 1
    assert len(world.runs("audit")) == 1


def test_plain_exception_raises_the_same_way(mode):
    # crash() raises ConnectionError; create_agent's ToolNode re-raises such errors.
    script = [reply("", call("crash", {"item": "apple"}, "x1")), reply("done")]
    agent, _, _, _ = build(middleware=False, script=script)
    with pytest.raises(ConnectionError) as real:
        run(agent, mode)
    agent, world, mw, _ = build(ScriptedDrafter(oracle(script)), script)
    try:
        with pytest.raises(ConnectionError) as replayed:
            run(agent, mode)
        stats = mw.stats()
    finally:
        mw.close()
    assert str(replayed.value) == str(real.value)
    assert stats["speculative_errors"] == 1 and len(world.runs("crash")) == 1


def test_parallel_tool_calls_share_the_cache_safely(mode):
    # One turn with eight parallel reads: ToolNode runs them concurrently (threads on the
    # sync path); each must be served once, from its own early run.
    items = [f"item{i}" for i in range(8)]
    script = [
        reply("", *[call("get_stock", {"item": it}, f"p{i}") for i, it in enumerate(items)]),
        reply("done"),
    ]
    agent, _, _, _ = build(middleware=False, script=script)
    baseline = transcript(run(agent, mode))
    agent, world, mw, _ = build(ScriptedDrafter(oracle(script)), script)
    messages, stats = run_closing(agent, mw, mode)
    assert transcript(messages) == baseline
    assert sorted(a["item"] for a in world.runs("get_stock")) == sorted(items)
    assert stats["hits"] + stats["joins"] == 8 and stats["misses"] == 0


def test_concurrent_runs_keep_their_own_sessions():
    # Two conversations at once on one middleware (threads): each is served from its own
    # early runs (the script only reads, so both transcripts must match).
    script = [SCRIPT[0], SCRIPT[1], reply("done")]
    agent, world, mw, _ = build(ScriptedDrafter(oracle(script)), script)
    results = []

    def go():
        results.append(transcript(run(agent, "sync")[1:]))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = mw.stats()
    mw.close()
    assert len(results) == 2 and results[0] == results[1]
    assert stats["hits"] + stats["joins"] == 6
    assert len(world.runs("get_stock")) == 4 and len(world.runs("audit")) == 2


def test_each_run_has_its_own_counters_in_state_and_as_a_callback_event(mode):
    from langchain_core.callbacks import BaseCallbackHandler

    class Events(BaseCallbackHandler):
        def __init__(self):
            self.seen = []

        def on_custom_event(self, name, data, **kwargs):
            self.seen.append((name, dict(data)))

    agent, _, mw, _ = build(ScriptedDrafter(oracle()))
    results, events = [], Events()
    try:
        for _ in range(2):  # two conversations on one middleware
            inputs = {"messages": [("user", "buy two apples if in stock")]}
            config = {"callbacks": [events]}
            out = (
                agent.invoke(inputs, config) if mode == "sync" else asyncio.run(agent.ainvoke(inputs, config))
            )
            results.append(out["spectool"])
        total = mw.stats()
    finally:
        mw.close()
    for run_stats in results:  # per run, not summed over the middleware's conversations
        assert run_stats["hits"] + run_stats["joins"] == 4 and run_stats["time_saved"] > 0
    assert total["hits"] + total["joins"] == 8
    assert [name for name, _ in events.seen] == ["spectool", "spectool"]
    assert [data for _, data in events.seen] == results
