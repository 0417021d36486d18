"""``gated=True``: a tool behind an approval or guardrail spectool cannot see never runs early.

Not from a draft, not from eager dispatch while the response streams; it runs once the caller
resolves the model's call (after its own approval step). Each check has a control: the same
tool without the flag does run early.
"""

import anyio
import pytest

import spectool
from spectool import Speculator, ToolCache, ToolCall, ToolDefinitionError, tool_spec
from spectool.testing import (
    ScriptedDrafter,
    ScriptedModel,
    SocketServer,
    ToolLog,
    call,
    fake_tool,
    openai_client,
)
from tests.core.helpers import until

pytestmark = pytest.mark.anyio


def test_the_decorator_takes_gated_and_keeps_the_effect() -> None:
    @spectool.tool(effect="read_only", gated=True)
    def balance(account: str) -> int:
        return 1

    spec = tool_spec(balance)
    assert spec.gated and spec.effect is spectool.Effect.READ_ONLY
    with pytest.raises(ToolDefinitionError, match="gatd"):
        spectool.tool(effect="read_only", gatd=True)


@pytest.mark.parametrize("gated", [True, False])
async def test_a_drafted_call_of_a_gated_tool_is_not_run_before_the_model_asks(gated: bool) -> None:
    log = ToolLog()
    tools = [fake_tool("balance", effect="read_only", log=log, result=7, gated=gated)]
    drafter = ScriptedDrafter(lambda messages: [ToolCall("balance", {"account": "a"})])
    async with Speculator(tools, drafter, samples=1) as spec:
        turn = spec.start_turn([{"role": "user", "content": "q"}])
        await turn.wait()
        if gated:  # give a wrong early run the chance to happen
            await anyio.sleep(0.02)
        else:  # control: wait for the early run (a short sleep ran out first on a loaded machine)
            await until(lambda: log.count("balance") == 1)
        ran_before_the_answer = log.count("balance")
        outcome = (await spec.resolve_all([ToolCall("balance", {"account": "a"})]))[0]
    assert outcome.value == 7 and log.count("balance") == 1
    if gated:  # the approval step sits between the answer and resolve: nothing ran before it
        assert ran_before_the_answer == 0 and not outcome.speculative
        assert spec.stats()["admitted"] == 0
    else:  # control: the same tool without the flag ran early and was served
        assert ran_before_the_answer == 1 and outcome.speculative


async def test_the_cache_refuses_a_gated_proposal_even_for_a_pure_external_opt_in() -> None:
    log = ToolLog()
    tools = [fake_tool("add", effect="pure", log=log, result=3, gated=True, external=True)]
    async with ToolCache(tools, speculate_external=True) as cache:
        assert not cache.may_run_early(tools[0])
        assert not cache.speculate(ToolCall("add", {"a": 1}))
        await anyio.sleep(0.01)
    assert log.count("add") == 0


@pytest.mark.parametrize("gated", [True, False])
async def test_eager_dispatch_does_not_start_a_gated_call_while_the_response_streams(gated: bool) -> None:
    log = ToolLog()
    tools = [fake_tool("balance", effect="read_only", log=log, result=7, gated=gated)]
    # The call's JSON closes early; a long text tail keeps the response streaming after it.
    model = ScriptedModel(
        [[call("balance", account="a"), call("balance", account="b" * 60)]], token_latency=0.01
    )
    async with SocketServer(model) as server:
        client = openai_client(server.url)
        async with spectool.speculative(client, tools, eager="all") as c:
            stream = await c.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}], stream=True
            )
            async for _ in stream:
                pass
            ran_while_streaming = log.count("balance")
            out = await c.run_tool_calls(stream)
        await client.close()
    assert [o["content"] for o in out] == ["7", "7"]
    assert ran_while_streaming == (0 if gated else 2)
