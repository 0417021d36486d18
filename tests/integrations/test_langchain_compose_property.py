"""Property: spectool at any position in any stack of LangChain's retry, call-limit,
human-in-the-loop and tool-emulator middleware and a user-written approval middleware leaves
the agent's transcript, its tool executions (also at each pause for approval) and the world
state exactly as the same agent without spectool.

Real ``create_agent`` and real middleware; the chat models are scripted (no model runs here;
LangChain's own fakes cannot bind tools); the drafter is an oracle, so every early run could be
used and any difference is spectool's. Negative controls: declaring the approval middleware
safe when it is not, and a drafter that guesses a call the model never makes, both show up.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents.middleware import (
    HumanInTheLoopMiddleware,
    LLMToolEmulator,
    ToolCallLimitMiddleware,
    ToolRetryMiddleware,
)
from langgraph.types import Command

from langchain_spectool.testing import ScriptedChatModel, call, reply, transcript
from spectool import ToolCall

from .test_langchain_compose import INPUT, Approval, Market, agent_for, oracle, run

SCRIPT = [
    reply("", call("quote", {"symbol": "NVDA"}, "q1"), call("quote", {"symbol": "AMD"}, "q2")),
    reply("", call("get_stock", {"item": "apple"}, "g1"), call("news", {"symbol": "NVDA"}, "n1")),
    reply("", call("buy", {"item": "apple", "qty": 1}, "b1")),
    reply("", call("get_stock", {"item": "apple"}, "g2")),
    reply("done"),
]

MIDDLEWARE = {
    "retry": lambda: ToolRetryMiddleware(max_retries=1, initial_delay=0.0, jitter=False),
    "limit": lambda: ToolCallLimitMiddleware(tool_name="quote", run_limit=1),
    "hitl": lambda: HumanInTheLoopMiddleware(interrupt_on={"buy": True}),
    "approval": Approval,
    "emulator": lambda: LLMToolEmulator(
        tools=["news"], model=ScriptedChatModel(script=[reply("NVDA beats estimates (emulated)")])
    ),
}


def _answer(value):
    if isinstance(value, dict) and "action_requests" in value:  # HumanInTheLoopMiddleware
        return {"decisions": [{"type": "approve"} for _ in value["action_requests"]]}
    return "yes"  # Approval


def drive(agent, market: Market, mode: str) -> list:
    """The run to its end, answering each pause; what the user and the world saw on the way."""
    seen: list = []
    inputs = INPUT
    for _ in range(8):
        try:
            result = run(agent, inputs, mode)
        except Exception as exc:  # the agent without spectool raises it too (quote's timeout)
            seen.append(("raised", type(exc).__name__, str(exc)))
            break
        seen.append(transcript(result["messages"]))
        seen.append(("executions", dict(sorted(market.runs.items()))))
        pauses = result.get("__interrupt__")
        if not pauses:
            break
        inputs = Command(resume={p.id: _answer(p.value) for p in pauses})
    seen.append(("stock", dict(market.stock)))
    return seen


def compare(names, position, mode, *, extra=(), **spec_options):
    stack = [MIDDLEWARE[n]() for n in names]
    plain = Market()
    agent, _ = agent_for(plain, SCRIPT, stack)
    expected = drive(agent, plain, mode)
    stack = [MIDDLEWARE[n]() for n in names]
    stack.insert(position, None)  # where spectool goes
    market = Market()
    agent, spec = agent_for(market, SCRIPT, stack, oracle(SCRIPT, extra), **spec_options)
    try:
        got = drive(agent, market, mode)
        stats = spec.stats()
    finally:
        spec.close()
    return expected, got, stats


stacks = st.lists(st.sampled_from(sorted(MIDDLEWARE)), unique=True, max_size=5).flatmap(
    lambda names: st.tuples(st.just(names), st.integers(0, len(names)), st.sampled_from(["sync", "async"]))
)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks)
def test_any_stack_with_spectool_anywhere_is_the_plain_agent(case):
    names, position, mode = case
    expected, got, stats = compare(names, position, mode)
    assert got == expected
    if "approval" not in names:  # not a vacuous pass: reads did run early and were served
        assert stats["hits"] + stats["joins"] >= 1
    else:  # an approval middleware spectool does not know: nothing ran early
        assert stats["speculative_started"] == 0


def test_negative_control_an_approval_declared_safe_shows_up():
    """The same comparison catches early runs before a human answered: the user-written
    approval middleware declared safe (it is not) lets get_stock run before the answer."""
    expected, got, stats = compare(["approval", "retry"], 0, "sync", safe_middleware=[Approval])
    assert stats["speculative_started"] >= 1
    assert got != expected
    at_pause = [s for s in got if s[0] == "executions"][0]
    assert at_pause[1].get("get_stock") == 1  # ran while the approval was pending
    assert [s for s in expected if s[0] == "executions"][0][1].get("get_stock") is None


def test_negative_control_a_wasted_early_run_shows_up():
    """...and an early run the model never uses (a wrong guess, here with no limit on the
    tool): the executions differ. With the call limit on quote the same guess is refused."""
    guess = [ToolCall("quote", {"symbol": "MSFT"})]
    expected, got, _ = compare(["retry"], 1, "sync", extra=guess)
    assert got != expected
    expected, got, _ = compare(["retry", "limit"], 0, "sync", extra=guess)
    assert got == expected
