"""spectool-agents with a real Agents SDK ``Runner``, ``Agent`` and ``OpenAIChatCompletionsModel``
against spectool's scripted OpenAI-compatible server (in-process): same items with and without
speculation, early runs of declared tools only, stale reads discarded, drafter failures harmless."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import anyio
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from spectool_agents import speculate

from spectool import ConfigError, ToolCall, ToolDefinitionError
from spectool.testing import ScriptedDrafter, ScriptedModel, call, openai_client, say

LATENCY = 0.1
SCRIPT = [
    [call("get_stock", item="apple"), call("get_stock", item="pear")],
    call("audit", item="pear"),
    call("buy", item="apple", qty=2),
    call("get_stock", item="apple"),
    say("Bought 2 apples; 1 left."),
]


@pytest.fixture(autouse=True)
def _no_trace_export():
    set_tracing_disabled(True)


class Shop:
    def __init__(self) -> None:
        self.stock = {"apple": 3, "pear": 0}
        self.runs: list[str] = []

        @function_tool
        async def get_stock(item: str) -> str:
            """How many of an item are in stock."""
            self.runs.append(f"get_stock:{item}")
            await anyio.sleep(LATENCY)
            return f"{item}: {self.stock.get(item, 0)}"

        @function_tool
        async def audit(item: str) -> str:
            """Audit an item (fails for items out of stock)."""
            self.runs.append(f"audit:{item}")
            await anyio.sleep(LATENCY)
            if not self.stock.get(item):
                raise ValueError(f"no {item} to audit")
            return f"audit ok: {item}"

        @function_tool
        async def buy(item: str, qty: int) -> str:
            """Buy qty of an item."""
            self.runs.append(f"buy:{item}")
            await anyio.sleep(LATENCY)
            self.stock[item] = self.stock.get(item, 0) - qty
            return f"bought {qty} {item}"

        self.tools = [get_stock, audit, buy]

    def agent(self, model: ScriptedModel) -> Agent:
        llm = OpenAIChatCompletionsModel(model="scripted", openai_client=openai_client(model))
        return Agent(name="shop", instructions="Run the shop.", tools=self.tools, model=llm)


async def items_of(agent: Agent, streamed: bool = False) -> str:
    if streamed:
        result = Runner.run_streamed(agent, "buy two apples")
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, "buy two apples")
    return json.dumps(result.to_input_list(), sort_keys=True, default=str)


EFFECTS = {"get_stock": "read_only", "audit": "read_only"}


def greedy(model: ScriptedModel):
    """The truth plus get_stock(apple) at every turn: an early read racing the write."""

    def oracle(messages):
        return [
            *model.next_calls(messages),
            ToolCall("get_stock", {"item": "apple"}),
            ToolCall("buy", {"item": "apple", "qty": 2}),
        ]

    return oracle


@pytest.mark.anyio
@pytest.mark.parametrize("streamed", [False, True])
async def test_same_items_with_hits_and_no_early_writes(streamed: bool) -> None:
    model = ScriptedModel(SCRIPT, first_token_latency=LATENCY)
    plain_shop = Shop()
    baseline = await items_of(plain_shop.agent(model), streamed)
    shop = Shop()
    async with speculate(shop.agent(model), ScriptedDrafter(greedy(model)), effects=EFFECTS) as fast:
        got = await items_of(fast, streamed)
        stats = fast.spectool.stats()
    assert got == baseline
    assert "An error occurred while running the tool" in got  # the SDK's failure handling, served early
    assert "apple: 1" in got  # the read after the write
    assert stats["hits"] + stats["joins"] >= 3
    assert stats["stale_discards"] >= 1  # the early read of apple racing buy was not served
    assert shop.runs.count("buy:apple") == 1 == plain_shop.runs.count("buy:apple")
    assert shop.stock == plain_shop.stock == {"apple": 1, "pear": 0}


@pytest.mark.anyio
@pytest.mark.parametrize("failure", ["raise", "hang", "garbage"])
async def test_failing_drafter_changes_nothing(failure: str) -> None:
    model = ScriptedModel(SCRIPT)
    baseline = await items_of(Shop().agent(model))
    async with speculate(
        Shop().agent(model), ScriptedDrafter(model, failure=failure), effects=EFFECTS, draft_timeout=0.2
    ) as fast:
        assert await items_of(fast) == baseline
        assert fast.spectool.stats()["hits"] == 0


@pytest.mark.anyio
async def test_undeclared_tools_never_run_early() -> None:
    model = ScriptedModel(SCRIPT, first_token_latency=LATENCY)
    shop = Shop()
    async with speculate(shop.agent(model), ScriptedDrafter(model)) as fast:  # nothing declared
        await items_of(fast)
        stats = fast.spectool.stats()
    assert stats["hits"] == stats["joins"] == 0 and stats["admitted"] == 0


@pytest.mark.anyio
async def test_bad_declarations_are_clear_errors() -> None:
    @function_tool
    def whoami(ctx: RunContextWrapper[dict], greeting: str) -> str:
        """Greets the user named in the run context."""
        return f"{greeting} {ctx.context['user']}"

    llm = OpenAIChatCompletionsModel(model="scripted", openai_client=openai_client(ScriptedModel([])))
    agent = Agent(name="a", tools=[whoami, *Shop().tools], model=llm)
    with pytest.raises(ConfigError, match="no_such"):
        async with speculate(agent, effects={"no_such": "pure"}):
            pass
    with pytest.raises(ConfigError, match="effect must be one of"):
        async with speculate(agent, effects={"get_stock": "maybe"}):
            pass
    with pytest.raises(ToolDefinitionError, match="run context"):
        async with speculate(agent, effects={"whoami": "pure"}):
            pass
    async with speculate(agent, effects={"get_stock": "pure"}) as fast:  # the original is untouched
        assert (
            fast.tools[1] is not agent.tools[1]
            and agent.tools[1].on_invoke_tool is not fast.tools[1].on_invoke_tool
        )


def test_example_runs_offline_with_hits(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "openai_agents_agent.py"
    spec = importlib.util.spec_from_file_location("openai_agents_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = anyio.run(module.main, 0.1)
    assert out["identical"] and out["stats"]["hits"] + out["stats"]["joins"] >= 3
    assert "transcripts identical: True" in capsys.readouterr().out


# -- gates: needs_approval and tool input guardrails ------------------------------------------


class Bank:
    """One read-only tool, logging each run of its body; optionally behind the SDK's gates."""

    def __init__(self, *, needs_approval: bool = False, guardrail: bool = False) -> None:
        from agents import ToolGuardrailFunctionOutput, tool_input_guardrail

        self.runs: list[str] = []

        @tool_input_guardrail
        def no_peeking(data):
            return ToolGuardrailFunctionOutput.reject_content("balances are private")

        async def balance(account: str) -> str:
            """The balance of an account."""
            self.runs.append(account)
            return f"{account}: 100"

        self.tool = function_tool(
            balance,
            needs_approval=needs_approval,
            tool_input_guardrails=[no_peeking] if guardrail else None,
        )

    def agent(self, model: ScriptedModel) -> Agent:
        llm = OpenAIChatCompletionsModel(model="scripted", openai_client=openai_client(model))
        return Agent(name="bank", instructions="Answer.", tools=[self.tool], model=llm)


GATED_SCRIPT = [call("balance", account="a1"), say("done")]


@pytest.mark.anyio
@pytest.mark.parametrize("gate", ["needs_approval", "guardrail", None])
async def test_a_gated_tool_has_not_run_when_the_approval_or_rejection_arrives(gate: str | None) -> None:
    """The drafter predicts the call and the tool is declared read_only; with the SDK's gate
    its body must not have run by the time the interruption (or the rejection) arrives.
    Control (no gate): the same declaration does run it early and serves it."""
    model = ScriptedModel(GATED_SCRIPT, first_token_latency=LATENCY)
    bank = Bank(needs_approval=gate == "needs_approval", guardrail=gate == "guardrail")
    async with speculate(bank.agent(model), ScriptedDrafter(model), effects={"balance": "read_only"}) as fast:
        result = await Runner.run(fast, "what is in a1?")
        stats = fast.spectool.stats()
    if gate == "needs_approval":
        assert [i.name for i in result.interruptions] == ["balance"]
        assert bank.runs == []  # the approval has not been given: nothing ran
    elif gate == "guardrail":
        assert "balances are private" in json.dumps(result.to_input_list(), default=str)
        assert bank.runs == []  # rejected: never ran, not even early
    else:
        assert bank.runs == ["a1"] and stats["hits"] + stats["joins"] == 1
    if gate is not None:
        assert stats["admitted"] == 0 and stats["hits"] + stats["joins"] == 0
