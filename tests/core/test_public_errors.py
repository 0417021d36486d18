"""The public entry points keep the SDK's own exceptions and refuse bad input clearly:
a main-model error escapes ``async with spectool.speculative(...)`` as itself (not an
ExceptionGroup), wrong clients and unknown options are refused at construction."""

import socket

import anyio
import httpx
import openai
import pytest

import spectool
from spectool import ConfigError, Speculator
from spectool.testing import KeyValueWorld, ScriptedDrafter, ScriptedModel, call, openai_client, say

pytestmark = pytest.mark.anyio


def _closed_port() -> int:
    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_connection_error_escapes_as_the_sdks_own_exception() -> None:
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{_closed_port()}/v1", api_key="x", max_retries=0)
    world = KeyValueWorld()
    drafter = ScriptedDrafter(lambda messages: [spectool.ToolCall("get", {"key": "a"})])
    with pytest.raises(openai.APIConnectionError) as caught:
        async with spectool.speculative(client, world.toolbox, drafter) as c:
            await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert not isinstance(caught.value, BaseExceptionGroup)
    assert type(caught.value.__cause__).__name__ == "ConnectError"  # the SDK's own chain, kept
    await client.close()


async def _rate_limited(scope, receive, send):  # a model endpoint answering 429
    if scope["type"] != "http":
        return
    await send(
        {"type": "http.response.start", "status": 429, "headers": [(b"content-type", b"application/json")]}
    )
    await send(
        {"type": "http.response.body", "body": b'{"error": {"message": "slow down", "type": "rate_limit"}}'}
    )


async def test_a_rate_limit_escapes_as_itself() -> None:
    client = openai_client(_rate_limited)
    with pytest.raises(openai.RateLimitError, match="slow down"):
        async with spectool.speculative(client, KeyValueWorld().toolbox) as c:
            await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    await client.close()


async def test_real_multiples_stay_a_group() -> None:
    # The body fails, and a task of the session's group fails as it is cancelled: two errors.
    async def fails_when_cancelled() -> None:
        try:
            await anyio.sleep(10)
        finally:
            raise ValueError("task")

    with pytest.raises(BaseExceptionGroup) as caught:
        async with Speculator([]) as s:
            s.cache.task_group.start_soon(fails_when_cancelled)
            await anyio.sleep(0.01)
            raise RuntimeError("body")
    kinds = sorted(type(e).__name__ for e in caught.value.exceptions)
    assert kinds == ["RuntimeError", "ValueError"]


def test_wrong_clients_are_refused_at_construction_with_a_clear_message() -> None:
    with pytest.raises(ConfigError, match=r"wraps an openai\.AsyncOpenAI.*got httpx\.AsyncClient"):
        spectool.speculative(httpx.AsyncClient(), [])
    with pytest.raises(ConfigError, match=r"got openai\.OpenAI, a synchronous client.*speculative_sync"):
        spectool.speculative(openai.OpenAI(api_key="x"), [])
    with pytest.raises(
        ConfigError, match=r"got openai\.AsyncOpenAI, an async client.*spectool\.speculative\("
    ):
        spectool.speculative_sync(openai.AsyncOpenAI(api_key="x"), [])
    # control: the right clients are accepted
    spectool.speculative(openai.AsyncOpenAI(api_key="x"), [])
    spectool.speculative_sync(openai.OpenAI(api_key="x"), [])


def test_unknown_options_are_refused_by_the_public_function() -> None:
    client = openai.AsyncOpenAI(api_key="x")
    with pytest.raises(
        ConfigError, match=r"spectool\.speculative\(\): unknown option\(s\) 'sampels'.*samples"
    ):
        spectool.speculative(client, [], sampels=3)
    with pytest.raises(ConfigError, match=r"speculative_sync\(\): unknown option\(s\) 'ttll'.*ttl"):
        spectool.speculative_sync(openai.OpenAI(api_key="x"), [], ttll=3)
    with pytest.raises(ConfigError, match=r"Speculator: unknown option\(s\) 'capacty'"):
        Speculator([], capacty=3)
    # control: real options of every layer are accepted
    spectool.speculative(client, [], samples=2, capacity=8, max_samples=3, speculate_external=True)


async def test_a_working_session_is_unchanged() -> None:
    world = KeyValueWorld()
    model = ScriptedModel([call("get", key="a"), say("done")])
    async with spectool.speculative(openai_client(model), world.toolbox) as c:
        result = await spectool.run_agent(c, model="m", messages="q")
    assert result.transcript[-1]["content"] == "done"
