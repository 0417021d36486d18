"""spectool-agents inside the run's own configuration, with the real Agents SDK ``Runner``:
``RunConfig(model_provider=…)``, ``RunConfig(model=…)``, handoffs, and the SDK's trace.

The model is a fake implementing the SDK's ``Model`` interface, served by a custom
``ModelProvider``: no network here, and the point is which model object the run calls, which a
real endpoint could not show."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from agents import Agent, ModelResponse, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.models.interface import Model, ModelProvider
from agents.tracing import TracingProcessor, set_trace_processors
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from spectool_agents import speculate

from spectool import ToolCall
from spectool.testing import ScriptedDrafter

LATENCY = 0.1


@pytest.fixture(autouse=True)
def _no_trace_export():
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(True)


def _call(name: str, n: int, **arguments: Any) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        call_id=f"call_{n}",
        name=name,
        arguments=json.dumps(arguments),
        status="completed",
    )


def _say(text: str) -> ResponseOutputMessage:
    content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
    return ResponseOutputMessage(
        id="msg", type="message", role="assistant", status="completed", content=content
    )


class ScriptModel(Model):
    """The SDK's Model interface over a script: one output item per request, after LATENCY."""

    def __init__(self, name: str, script: list[Any], log: list[str], cursor: list[int] | None = None) -> None:
        self.name, self.script, self.log = name, script, log
        self.cursor = [0] if cursor is None else cursor  # shared by the models of one run

    async def get_response(self, system_instructions, input, *args: Any, **kwargs: Any) -> ModelResponse:
        self.log.append(self.name)
        await anyio.sleep(LATENCY)
        item = self.script[self.cursor[0] % len(self.script)]
        self.cursor[0] += 1
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any):  # type: ignore[override]
        raise NotImplementedError("these runs are not streamed")
        yield


class Gateway(ModelProvider):
    """The user's own provider: names it knows resolve to script models; it records each."""

    def __init__(self, script: list[Any]) -> None:
        self.log: list[str] = []
        self.script, self.cursor = script, [0]

    def get_model(self, model_name: str | None) -> Model:
        return ScriptModel(f"gateway:{model_name}", self.script, self.log, self.cursor)


class Market:
    def __init__(self) -> None:
        self.runs: list[str] = []

        @function_tool
        async def quote(symbol: str) -> str:
            """The last price of a symbol."""
            self.runs.append(symbol)
            await anyio.sleep(LATENCY)
            return f"{symbol}: 227.16"

        self.quote = quote


QUOTE_SCRIPT = [_call("quote", 1, symbol="NVDA"), _say("NVDA: 227.16")]


def oracle(symbol: str = "NVDA"):
    return ScriptedDrafter(lambda messages: [ToolCall("quote", {"symbol": symbol})])


def items(result: Any) -> str:
    return json.dumps(result.to_input_list(), sort_keys=True, default=str)


@pytest.mark.anyio
async def test_the_runs_model_provider_serves_every_request() -> None:
    """``RunConfig(model_provider=MyGateway())`` with a model name on the agent: the gateway
    answers every request with and without spectool (it went to the OpenAI default before)."""
    plain_gw, fast_gw = Gateway(QUOTE_SCRIPT), Gateway(QUOTE_SCRIPT)
    plain = await Runner.run(
        Agent(name="q", tools=[Market().quote], model="gw-1"),
        "NVDA?",
        run_config=RunConfig(model_provider=plain_gw),
    )
    market = Market()
    agent = Agent(name="q", tools=[market.quote], model="gw-1")
    async with speculate(agent, oracle(), effects={"quote": "read_only"}) as fast:
        got = await Runner.run(fast, "NVDA?", run_config=RunConfig(model_provider=fast_gw))
        stats = fast.spectool.stats()
    assert plain_gw.log == fast_gw.log == ["gateway:gw-1", "gateway:gw-1"]
    assert items(got) == items(plain) and "227.16" in got.final_output
    assert stats["hits"] + stats["joins"] == 1 and set(market.runs) == {"NVDA"}


@pytest.mark.anyio
@pytest.mark.parametrize("symbol", ["NVDA", "AAPL"])
async def test_run_config_model_keeps_speculation_on(symbol: str) -> None:
    """``RunConfig(model=…)`` overrides the agent's model; drafting goes on (it went silently
    to 0 drafts). Control: a drafter guessing another symbol drafts but serves nothing."""
    log: list[str] = []
    agent_model = ScriptModel("agent-model", [_say("never asked")], log)
    run_model = ScriptModel("run-model", QUOTE_SCRIPT, log)
    market = Market()
    agent = Agent(name="q", tools=[market.quote], model=agent_model)
    async with speculate(agent, oracle(symbol), effects={"quote": "read_only"}) as fast:
        got = await Runner.run(fast, "NVDA?", run_config=RunConfig(model=run_model))
        stats = fast.spectool.stats()
    assert log == ["run-model", "run-model"] and "227.16" in got.final_output
    assert stats["drafts"] >= 1
    assert stats["hits"] + stats["joins"] == (1 if symbol == "NVDA" else 0)


@pytest.mark.anyio
async def test_a_handoff_target_drafts_through_the_same_provider() -> None:
    market = Market()
    shop = Agent(name="shop", tools=[market.quote], model="gw-shop")
    triage = Agent(name="triage", handoffs=[shop], model="gw-triage")
    script = [_call("transfer_to_shop", 1), _call("quote", 2, symbol="NVDA"), _say("NVDA: 227.16")]
    plain_gw, fast_gw = Gateway(script), Gateway(script)
    plain = await Runner.run(triage, "NVDA?", run_config=RunConfig(model_provider=plain_gw))
    async with speculate(triage, oracle(), effects={"quote": "read_only"}) as fast:
        got = await Runner.run(fast, "NVDA?", run_config=RunConfig(model_provider=fast_gw))
        stats = fast.spectool.stats()
    assert fast_gw.log == plain_gw.log == ["gateway:gw-triage", "gateway:gw-shop", "gateway:gw-shop"]
    assert got.last_agent.name == "shop" and items(got) == items(plain)
    assert stats["hits"] + stats["joins"] == 1  # the handoff agent's tool, served early
    assert triage.handoffs == [shop] and shop.hooks is None  # the user's agents are untouched


class Collect(TracingProcessor):
    def __init__(self) -> None:
        self.spans: list[Any] = []

    def on_trace_start(self, trace: Any) -> None: ...
    def on_trace_end(self, trace: Any) -> None: ...
    def on_span_start(self, span: Any) -> None: ...

    def on_span_end(self, span: Any) -> None:
        self.spans.append(span)

    def shutdown(self) -> None: ...
    def force_flush(self) -> None: ...


@pytest.mark.anyio
async def test_drafts_and_hits_are_in_the_sdks_trace() -> None:
    collect = Collect()
    set_trace_processors([collect])  # in memory only: no exporter, nothing leaves the process
    set_tracing_disabled(False)
    try:
        market = Market()
        agent = Agent(name="q", tools=[market.quote], model="gw-1")
        async with speculate(agent, oracle(), effects={"quote": "read_only"}) as fast:
            await Runner.run(fast, "NVDA?", run_config=RunConfig(model_provider=Gateway(QUOTE_SCRIPT)))
    finally:
        set_tracing_disabled(True)
        set_trace_processors([])
    custom = [s.span_data for s in collect.spans if s.span_data.type == "custom"]
    drafts = [d for d in custom if d.name == "spectool.draft"]
    hits = [d for d in custom if d.name == "spectool.hit"]
    assert len(drafts) == 2 and drafts[0].data["agent"] == "q"
    assert "quote" in drafts[0].data["admitted"]
    [hit] = hits
    assert hit.data["tool"] == "quote" and hit.data["early_run_s"] > 0.05
    [function] = [s for s in collect.spans if s.span_data.type == "function"]
    [hit_span] = [
        s for s in collect.spans if s.span_data.type == "custom" and s.span_data.name == "spectool.hit"
    ]
    assert hit_span.parent_id == function.span_id  # under the call it served


@pytest.mark.anyio
async def test_speculate_on_something_that_is_not_an_agent_is_a_clear_error() -> None:
    from spectool import ConfigError

    with pytest.raises(ConfigError, match=r"takes an agents\.Agent.*got str"):
        async with speculate("agent", oracle()):  # type: ignore[arg-type]
            pass
    with pytest.raises(ConfigError, match=r"RunConfig\(model_provider"):
        async with speculate(Agent(name="q"), oracle(), model_provider=Gateway([])):
            pass


@pytest.mark.anyio
async def test_two_agents_with_a_tool_of_the_same_name() -> None:
    """Undeclared, two different tools of one name are fine (both stay mutating); declaring
    the name is ambiguous, and an error."""
    from spectool import ConfigError

    one, other = Market(), Market()
    shop = Agent(name="shop", tools=[other.quote], model="gw-shop")
    triage = Agent(name="triage", tools=[one.quote], handoffs=[shop], model="gw-triage")
    script = [_call("transfer_to_shop", 1), _call("quote", 2, symbol="NVDA"), _say("done")]
    async with speculate(triage, oracle()) as fast:
        await Runner.run(fast, "NVDA?", run_config=RunConfig(model_provider=Gateway(script)))
    assert one.runs == [] and other.runs == ["NVDA"]  # the handoff agent's own tool ran, once
    with pytest.raises(ConfigError, match="two different function tools"):
        async with speculate(triage, oracle(), effects={"quote": "read_only"}):
            pass


@pytest.mark.anyio
async def test_the_agents_own_hooks_still_see_every_event() -> None:
    """The copy's SpeculativeHooks forward each hook to the agent's own: the same events in the
    same order as the plain run (which shows the list a dropped hook would break)."""
    from agents import AgentHooks

    class Record(AgentHooks[Any]):
        def __init__(self) -> None:
            self.seen: list[str] = []

        async def on_start(self, context, agent) -> None:
            self.seen.append("start")

        async def on_end(self, context, agent, output) -> None:
            self.seen.append("end")

        async def on_llm_start(self, context, agent, system_prompt, input_items) -> None:
            self.seen.append("llm_start")

        async def on_llm_end(self, context, agent, response) -> None:
            self.seen.append("llm_end")

        async def on_tool_start(self, context, agent, tool) -> None:
            self.seen.append(f"tool_start {tool.name}")

        async def on_tool_end(self, context, agent, tool, result) -> None:
            self.seen.append(f"tool_end {tool.name}")

    runs = []
    for speculating in (False, True):
        hooks = Record()
        agent = Agent(name="q", tools=[Market().quote], model=ScriptModel("m", QUOTE_SCRIPT, []), hooks=hooks)
        if speculating:
            async with speculate(agent, oracle(), effects={"quote": "read_only"}) as fast:
                await Runner.run(fast, "NVDA?")
        else:
            await Runner.run(agent, "NVDA?")
        runs.append(hooks.seen)
    tool = ["tool_start quote", "tool_end quote"]
    want = ["start", "llm_start", "llm_end", *tool, "llm_start", "llm_end", "end"]
    assert runs == [want, want]
