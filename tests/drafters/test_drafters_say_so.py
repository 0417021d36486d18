"""Drafters that say so: a failing drafter is counted and its first failure is a WARNING with
its cause; drafter names resolve in one place and fail loudly; the machine hint."""

from __future__ import annotations

import logging
import socket

import anyio
import openai
import pytest

import spectool
from spectool import ConfigError, ToolCall
from spectool.drafters import EndpointDrafter, HistoryDrafter, LocalDrafter, drafter_hint, resolve_drafter
from spectool.testing import KeyValueWorld, ScriptedDrafter, ScriptedModel, call, openai_client, say

pytestmark = pytest.mark.anyio
SCRIPT = [call("get", key="a"), say("done")]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _run(drafter, model: ScriptedModel):
    async with spectool.speculative(openai_client(model), KeyValueWorld().toolbox, drafter) as c:
        result = await spectool.run_agent(c, model="m", messages="q")
    result.stats = c.stats()  # after the session: the last turn's draft has ended too
    return result


async def test_a_down_endpoint_drafter_logs_one_warning_and_counts_its_errors(caplog) -> None:
    drafter = EndpointDrafter(base_url=f"http://127.0.0.1:{_closed_port()}/v1", model="d")
    assert drafter.client.max_retries == 0  # its own client: a retry would outlast the turn
    model = ScriptedModel(SCRIPT, first_token_latency=0.2)
    with caplog.at_level(logging.DEBUG, logger="spectool"):
        result = await _run(drafter, model)
        again = await _run(drafter, model)
    await drafter.aclose()
    assert result.transcript_json() == again.transcript_json()  # the main path is untouched
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "EndpointDrafter failed" in warnings[0].getMessage()
    assert "Connection" in warnings[0].getMessage()  # the cause, named
    assert result.stats["draft_errors"] == 2 == again.stats["draft_errors"]  # one per model request


async def test_an_error_counts_even_when_the_turn_ended_first() -> None:
    """The user's own client retries (openai's default: 2, backing off ~1 s) and the model
    answers in 0.2 s: the turn ends while the SDK handles the connection error. Control: a
    drafter that is merely slow (no error) is not counted as an error."""
    down = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{_closed_port()}/v1", api_key="x")
    model = ScriptedModel(SCRIPT, first_token_latency=0.2)
    result = await _run(EndpointDrafter(down, model="d"), model)
    await down.close()
    assert result.stats["draft_errors"] == 2 and result.stats["draft_timeouts"] == 0

    slow = ScriptedDrafter(model, delay=5.0)
    result = await _run(slow, ScriptedModel(SCRIPT, first_token_latency=0.2))
    assert result.stats["draft_errors"] == 0


async def test_garbage_is_counted_and_warned_once(caplog) -> None:
    class Garbage:
        async def propose(self, request):
            return "not a list"

    with caplog.at_level(logging.WARNING, logger="spectool"):
        result = await _run(Garbage(), ScriptedModel(SCRIPT))
    assert result.stats["draft_errors"] == 2
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["drafter Garbage failed"]


def test_names_resolve_in_one_place_everywhere() -> None:
    assert isinstance(resolve_drafter("history"), HistoryDrafter)
    assert isinstance(resolve_drafter("local"), LocalDrafter)  # the venv has the [local] extra
    tuned = resolve_drafter("tuned")
    assert isinstance(tuned, LocalDrafter) and tuned.adapter is not None
    assert resolve_drafter(None) is None
    mine = ScriptedDrafter(lambda m: [])
    assert resolve_drafter(mine) is mine
    with pytest.raises(ConfigError, match="unknown drafter name 'locl'.*history, learning, local, tuned"):
        resolve_drafter("locl")
    with pytest.raises(ConfigError, match="got int"):
        resolve_drafter(3)
    # the public entry points take names through it: no silent string drafter any more
    client = openai_client(ScriptedModel(SCRIPT))
    assert isinstance(spectool.speculative(client, [], "history").speculator.drafter, HistoryDrafter)
    with pytest.raises(ConfigError, match="locl"):
        spectool.speculative(client, [], "locl")
    from langchain_spectool import SpeculativeToolMiddleware

    assert isinstance(SpeculativeToolMiddleware("history")._spec.drafter, HistoryDrafter)
    with pytest.raises(ConfigError, match="locl"):
        SpeculativeToolMiddleware("locl")


def test_local_fails_loudly_without_its_extra(monkeypatch) -> None:
    # Stands in for a machine without transformers (this venv has it): find_spec says "absent".
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "transformers" else real(n, *a)
    )
    with pytest.raises(ConfigError, match=r"'transformers' is not installed.*spectool\[local\]"):
        resolve_drafter("local")
    with pytest.raises(ConfigError, match="transformers"):
        spectool.speculative(openai_client(ScriptedModel(SCRIPT)), [], "local")


async def test_speculate_agent_takes_a_name() -> None:
    from agents import Agent, OpenAIChatCompletionsModel
    from spectool_agents import speculate

    llm = OpenAIChatCompletionsModel(model="m", openai_client=openai_client(ScriptedModel(SCRIPT)))
    async with speculate(Agent(name="a", model=llm), "history") as fast:
        assert isinstance(fast.spectool.drafter, HistoryDrafter)
    with pytest.raises(ConfigError, match="locl"):
        async with speculate(Agent(name="a", model=llm), "locl"):
            pass


def test_the_machine_hint(caplog) -> None:
    assert "use the 'history' drafter" in drafter_hint(2, False)
    assert "a GPU is visible" in drafter_hint(2, True) and "'tuned'" in drafter_hint(2, True)
    assert "'history' fits" in drafter_hint(32, False)
    import spectool.drafters._named as named

    named._hinted = False
    with caplog.at_level(logging.INFO, logger="spectool.drafters"):
        resolve_drafter(None)
        resolve_drafter("history")
    hints = [r for r in caplog.records if r.name == "spectool.drafters"]
    assert len(hints) == 1 and "CPU cores" in hints[0].getMessage()  # one line, once


async def test_a_timeout_is_not_an_error() -> None:
    drafter = ScriptedDrafter(ScriptedModel(SCRIPT), delay=30.0)  # only the timeout ends it
    async with spectool.Speculator(KeyValueWorld().toolbox, drafter, draft_timeout=0.05) as s:
        turn = s.start_turn([{"role": "user", "content": "q"}])
        await turn.wait()
        await anyio.sleep(0)
    assert s.stats()["draft_timeouts"] == 1 and s.stats()["draft_errors"] == 0
    assert ToolCall  # imported for the module's API check
