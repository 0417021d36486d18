"""SpeculativeToolMiddleware composed with LangChain's own middleware: retries, call limits,
tool emulators, human approval (built-in and user-written) and tools that ask for approval
through a helper. Each test runs the real ``create_agent`` with the real middleware; the
agent without spectool is the reference.

The chat model is scripted (``ScriptedChatModel``: no model runs here, and LangChain's own
fakes cannot bind tools); the emulator's model is scripted the same way. The drafter is an
oracle (it proposes the model's next calls), so every early run could be used.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from langchain.agents.middleware import (
    AgentMiddleware,
    LLMToolEmulator,
    ToolCallLimitMiddleware,
    ToolRetryMiddleware,
)
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from langchain_spectool import SpeculativeToolMiddleware, create_agent, speculable
from langchain_spectool.testing import ScriptedChatModel, call, reply, transcript
from spectool import ConfigError, ToolCall, ToolDefinitionError
from spectool.testing import ScriptedDrafter

LATENCY = 0.05  # per model answer: time for the drafts to start their early runs


class Market:
    """Tools over one shared state; ``runs`` counts each body's real executions."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}
        self.stock = {"apple": 3}
        self.lock = threading.Lock()
        self._failed: set[str] = set()

        @tool
        def quote(symbol: str) -> str:
            """Price of a stock (a paid API; its first call for NVDA times out)."""
            self._ran("quote")
            with self.lock:
                first = symbol == "NVDA" and symbol not in self._failed
                self._failed.add(symbol)
            if first:
                raise ConnectionError("upstream timeout")
            return {"NVDA": "NVDA: 227.16"}.get(symbol, f"{symbol}: 100.00")

        @tool
        def get_stock(item: str) -> str:
            """How many of an item are in stock."""
            self._ran("get_stock")
            return f"{item}: {self.stock.get(item, 0)}"

        @tool
        def news(symbol: str) -> str:
            """Headlines for a stock."""
            self._ran("news")
            return f"no news for {symbol}"

        @tool
        def buy(item: str, qty: int) -> str:
            """Buy qty of an item."""
            self._ran("buy")
            self.stock[item] = self.stock.get(item, 0) - qty
            return f"bought {qty} {item}"

        for t in (quote, get_stock, news):
            speculable(t, effect="read_only")
        self.tools = [quote, get_stock, news, buy]

    def _ran(self, name: str) -> None:
        with self.lock:
            self.runs[name] = self.runs.get(name, 0) + 1

    def count(self, name: str) -> int:
        return self.runs.get(name, 0)


def oracle(script, extra=()):
    """Proposes the model's next calls (and ``extra`` calls on every turn)."""
    model = ScriptedChatModel(script=script)
    return ScriptedDrafter(lambda messages: [*model.next_calls(messages), *extra])


class Approval(AgentMiddleware):
    """A user-written approval gate: asks a human (``interrupt``) before ``get_stock`` runs."""

    def wrap_tool_call(self, request, handler):
        if request.tool_call["name"] == "get_stock":
            if interrupt({"approve": request.tool_call["args"]}) != "yes":
                return ToolMessage("rejected by the user", tool_call_id=request.tool_call["id"])
        return handler(request)

    async def awrap_tool_call(self, request, handler):
        if request.tool_call["name"] == "get_stock":
            if interrupt({"approve": request.tool_call["args"]}) != "yes":
                return ToolMessage("rejected by the user", tool_call_id=request.tool_call["id"])
        return await handler(request)


def retry():
    return ToolRetryMiddleware(max_retries=2, initial_delay=0.0, jitter=False)


def run(agent, inputs, mode: str, thread: str = "t"):
    config = {"configurable": {"thread_id": thread}}
    if mode == "sync":
        return agent.invoke(inputs, config)
    return asyncio.run(agent.ainvoke(inputs, config))


def agent_for(market, script, middleware, drafter=None, **spec_options):
    """The agent with ``middleware``; a ``None`` entry is where spectool goes (dropped when
    ``drafter`` is None: the reference agent)."""
    spec = SpeculativeToolMiddleware(drafter, draft_timeout=1.0, **spec_options) if drafter else None
    stack = [spec if m is None else m for m in middleware if m is not None or spec is not None]
    model = ScriptedChatModel(script=script, latency=LATENCY)
    return create_agent(model, market.tools, middleware=stack, checkpointer=InMemorySaver()), spec


INPUT = {"messages": [("user", "what is NVDA at?")]}


@pytest.fixture(params=["sync", "async"])
def mode(request):
    return request.param


# -- 1. retries ---------------------------------------------------------------------------


@pytest.mark.parametrize("effect", ["read_only", "pure"])
@pytest.mark.parametrize("spectool_first", [True, False])
def test_a_retried_tool_runs_again_instead_of_replaying_its_early_failure(mode, effect, spectool_first):
    """quote fails once, then works. Without spectool ToolRetryMiddleware's second attempt
    returns the price; with it (either order) the early run's recorded failure is served once
    and the retry runs the tool for real: the same transcript, the same two executions."""
    script = [reply("", call("quote", {"symbol": "NVDA"}, "q1")), reply("done")]
    order = [None, "retry"] if spectool_first else ["retry", None]

    def stack(r):
        return [r if m == "retry" else m for m in order]

    plain = Market()
    speculable(plain.tools[0], effect=effect)
    agent, _ = agent_for(plain, script, stack(retry()))
    expected = transcript(run(agent, INPUT, mode)["messages"])
    assert expected[2][1] == repr("NVDA: 227.16")

    market = Market()
    speculable(market.tools[0], effect=effect)
    agent, spec = agent_for(market, script, stack(retry()), oracle(script))
    try:
        assert transcript(run(agent, INPUT, mode)["messages"]) == expected
        stats = spec.stats()
    finally:
        spec.close()
    assert stats["speculative_started"] == 1 and stats["hits"] + stats["joins"] == 1  # the failure, once
    assert market.count("quote") == plain.count("quote") == 2


# -- 2. budgets -----------------------------------------------------------------------------


@pytest.mark.parametrize("limited", ["quote", None])
def test_early_runs_count_against_and_are_refused_by_a_call_limit(mode, limited):
    """run_limit=1 on a paid quote API (or on every tool): the model asks for two quotes (the
    limit blocks the second), and the drafter also guesses a third on every turn, the final
    answer's too. Without spectool the API is called once; with it, once too (the early run
    the model used). With every tool limited the final turn gets no draft at all: none of its
    calls could be used."""
    script = [
        reply("", call("quote", {"symbol": "AMD"}, "q1"), call("quote", {"symbol": "NVDA"}, "q2")),
        reply("AMD is at 100."),
    ]

    def limit():
        return ToolCallLimitMiddleware(tool_name=limited, run_limit=1)

    plain = Market()
    agent, _ = agent_for(plain, script, [limit()])
    expected = transcript(run(agent, INPUT, mode)["messages"])
    market = Market()
    drafter = oracle(script, extra=[ToolCall("quote", {"symbol": "MSFT"})])
    agent, spec = agent_for(market, script, [None, limit()], drafter)
    try:
        assert transcript(run(agent, INPUT, mode)["messages"]) == expected
        stats = spec.stats()
    finally:
        spec.close()
    assert plain.count("quote") == 1 and market.count("quote") == 1
    assert stats["hits"] + stats["joins"] == 1  # the one early run served the model's call
    # other tools may still be used on the final turn (it is drafted) unless all are limited
    assert stats["drafts"] == (2 if limited else 1)


def test_tools_an_emulator_answers_never_run_early_for_real(mode):
    """LLMToolEmulator answers quote with a model instead of the API: the real quote must
    never run, early or not. Control: get_stock, not emulated, still runs early."""
    script = [
        reply("", call("quote", {"symbol": "AMD"}, "q1"), call("get_stock", {"item": "apple"}, "g1")),
        reply("done"),
    ]

    def emulator():
        fake = ScriptedChatModel(script=[reply("AMD: 1.00 (emulated)")])  # the emulator's model
        return LLMToolEmulator(tools=["quote"], model=fake)

    plain = Market()
    agent, _ = agent_for(plain, script, [emulator()])
    expected = transcript(run(agent, INPUT, mode)["messages"])
    market = Market()
    agent, spec = agent_for(market, script, [emulator(), None], oracle(script))
    try:
        assert transcript(run(agent, INPUT, mode)["messages"]) == expected
        stats = spec.stats()
    finally:
        spec.close()
    assert plain.count("quote") == market.count("quote") == 0
    assert stats["hits"] + stats["joins"] == 1 and market.count("get_stock") == 1


# -- 3. gates -------------------------------------------------------------------------------


@pytest.mark.parametrize("declared_safe", [False, True])
def test_a_user_written_approval_middleware_gates_the_tools_it_wraps(mode, declared_safe):
    """An approval middleware spectool does not know (its wrap_tool_call calls interrupt()):
    get_stock must not run before the user answers, and the user rejects it. Control: the
    user declaring that middleware safe (safe_middleware=) lets get_stock run early, before
    the answer, exactly what the gate is there to prevent."""
    script = [reply("", call("get_stock", {"item": "apple"}, "g1")), reply("done")]
    approval = Approval()
    options = {"safe_middleware": [Approval]} if declared_safe else {}
    market = Market()
    agent, spec = agent_for(market, script, [approval, None], oracle(script), **options)
    try:
        paused = run(agent, INPUT, mode)
        assert paused.get("__interrupt__")
        ran_before_answer = market.count("get_stock")
        done = run(agent, Command(resume="no"), mode)
    finally:
        spec.close()
    assert done["messages"][2].content == "rejected by the user"
    if declared_safe:
        assert ran_before_answer == 1  # ran early, then was rejected: the gate was bypassed
    else:
        assert ran_before_answer == 0 and market.count("get_stock") == 0


def test_a_tool_that_reaches_interrupt_through_a_helper_is_gated_after_its_first_early_run(mode, caplog):
    """read_file asks for approval through a helper (spectool cannot see it in the tool's own
    code). Its early run reaches interrupt() outside the graph: that run is dropped, the
    model's call asks the user exactly as without spectool, the tool is gated from then on,
    and a WARNING says so: in a second conversation it does not run before the answer."""
    asked: list[str] = []

    def ask(path: str) -> object:
        return interrupt({"allow": path})

    @tool
    def read_file(path: str) -> str:
        """Read a file, after the user allows it."""
        asked.append(path)
        return f"contents of {path}" if ask(path) == "yes" else "denied"

    speculable(read_file, effect="read_only")
    script = [reply("", call("read_file", {"path": "/etc/motd"}, "r1")), reply("done")]
    model = ScriptedChatModel(script=script, latency=LATENCY)
    spec = SpeculativeToolMiddleware(oracle(script), draft_timeout=1.0)
    agent = create_agent(model, [read_file], middleware=[spec], checkpointer=InMemorySaver())
    try:
        with caplog.at_level(logging.WARNING, logger="langchain_spectool"):
            first = run(agent, INPUT, mode, thread="a")
        assert first.get("__interrupt__")  # the user is asked, as without spectool
        assert [r for r in caplog.records if "called interrupt() while running early" in r.getMessage()]
        n = len(asked)  # the early run (up to its interrupt) and the model's call
        assert run(agent, Command(resume="no"), mode, thread="a")["messages"][2].content == "denied"
        before = len(asked)
        second = run(agent, INPUT, mode, thread="b")
        assert second.get("__interrupt__")
        assert len(asked) == before + 1  # only the model's own call: no early run any more
        assert n >= 2
    finally:
        spec.close()


# -- 6. options checked where they are given ---------------------------------------------------


def test_options_are_checked_when_the_middleware_is_built():
    with pytest.raises(ConfigError, match="did you mean 'samples'"):
        SpeculativeToolMiddleware("history", sampels=3)
    with pytest.raises(ConfigError, match="ttl"):
        SpeculativeToolMiddleware("history", ttl=-5)
    with pytest.raises(ConfigError, match="samples"):
        SpeculativeToolMiddleware("history", samples=0)
    with pytest.raises(ConfigError, match="max_sessions"):
        SpeculativeToolMiddleware("history", max_sessions=0)
    with pytest.raises(ConfigError, match="cache"):  # each conversation's own, not an option
        SpeculativeToolMiddleware("history", cache=object())
    SpeculativeToolMiddleware("history", samples=2, ttl=30, capacity=8)  # control: valid ones build

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return q

    with pytest.raises(ToolDefinitionError, match="scope"):
        speculable(lookup, effect="read_only", scope=3)
    with pytest.raises(ToolDefinitionError, match="ttl"):
        speculable(lookup, effect="pure", ttl=-5)
    assert speculable(lookup, effect="pure", scope="db", ttl=5) is lookup


def test_what_each_middleware_makes_of_the_tools():
    """The classification behind the tests above, one middleware at a time (by class, from the
    list given to create_agent)."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware, ModelCallLimitMiddleware

    from langchain_spectool._compose import ALL, Composition

    class Guard(AgentMiddleware):  # may drop or edit the model's calls
        def after_model(self, state, runtime):
            return None

    class Tracer(AgentMiddleware):  # model-side only: sees no tool call
        def before_model(self, state, runtime):
            return None

    def gated(*middleware, **kw):
        return Composition.of(list(middleware), **kw).gated

    assert gated(retry(), ModelCallLimitMiddleware(run_limit=3), Tracer()) == frozenset()
    assert gated(HumanInTheLoopMiddleware(interrupt_on={"buy": True, "quote": False})) == {"buy"}
    fake = ScriptedChatModel(script=[reply("x")])
    assert gated(LLMToolEmulator(tools=["quote"], model=fake)) == {"quote"}
    assert gated(LLMToolEmulator(model=fake)) == {ALL}
    assert gated(ToolCallLimitMiddleware(run_limit=2)) == frozenset()
    assert gated(ToolCallLimitMiddleware(run_limit=2, exit_behavior="end")) == {ALL}
    assert gated(Approval()) == {ALL} and gated(Guard()) == {ALL}
    assert gated(Approval(), safe=[Approval]) == frozenset()
    guard = Guard()
    assert gated(guard, Guard(), safe=[guard]) == {ALL}  # an instance declares itself only
    assert gated(interrupt_before=["tools"]) == {ALL}
    limiter = Composition.of(
        [ToolCallLimitMiddleware(tool_name="quote", thread_limit=5, run_limit=2)]
    ).limiters[0]
    state = {"thread_tool_call_count": {"quote": 4}, "run_tool_call_count": {"quote": 0}}
    assert limiter.remaining(state) == 1 and limiter.covers("quote") and not limiter.covers("news")


def test_one_middleware_belongs_to_one_agent():
    spec = SpeculativeToolMiddleware("history")
    market = Market()
    model = ScriptedChatModel(script=[reply("hi")])
    create_agent(model, market.tools, middleware=[spec])
    with pytest.raises(ConfigError, match="one per agent"):
        create_agent(model, market.tools, middleware=[retry(), spec])
