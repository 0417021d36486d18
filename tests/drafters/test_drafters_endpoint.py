"""EndpointDrafter against OpenAI-compatible servers: the scripted kit server (in-process and
on a socket), plus a tiny in-test app for what the scripted server does not do (``n`` choices,
HTTP errors) — it speaks the same Chat Completions wire format."""

import json

import anyio
import pytest

from spectool import DrafterError, DraftRequest, ToolCall
from spectool.drafters import EndpointDrafter
from spectool.testing import ScriptedModel, SocketServer, call, openai_client, read_body, send_json

from .conftest import NUMBER, fn_tool, weather_tool

pytestmark = pytest.mark.anyio

TOOLS = [
    weather_tool(unit=False, description="Weather in a city"),
    fn_tool("add", {"a": NUMBER, "b": NUMBER}, (), "a + b"),
]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


async def test_structured_tool_calls_from_scripted_server():
    model = ScriptedModel([call("get_weather", city="Paris")])
    drafter = EndpointDrafter(openai_client(model), model="drafter", timeout=5)
    calls = await drafter.propose(DraftRequest(ASK, TOOLS, samples=1))
    assert calls == [ToolCall("get_weather", {"city": "Paris"}, calls[0].id)]
    sent = model.requests[0]
    assert sent["tools"] == TOOLS and sent["messages"] == ASK and "n" not in sent


async def test_xlam_text_content_is_parsed_and_unknown_tools_dropped():
    text = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "nope", "arguments": {}}]'
    drafter = EndpointDrafter(openai_client(ScriptedModel([text])), model="xlam")
    assert await drafter.propose(DraftRequest(ASK, TOOLS)) == [ToolCall("get_weather", {"city": "Paris"})]


async def test_parallel_sampling_sends_lambda_requests_over_a_socket():
    model = ScriptedModel([call("add", a=1, b=2)])
    async with SocketServer(model) as server:
        # Our own drafter makes (and must close) its client: a socket left open would be closed
        # by the garbage collector inside a later test's event loop.
        async with EndpointDrafter(
            model="m", base_url=server.url, api_key="k", sampling="parallel"
        ) as drafter:
            calls = await drafter.propose(DraftRequest(ASK, TOOLS, samples=3))
        assert drafter._client is None
    assert [c.name for c in calls] == ["add"] * 3
    assert len(model.requests) == 3 and all("n" not in r for r in model.requests)


async def test_garbage_text_gives_no_calls():
    drafter = EndpointDrafter(openai_client(ScriptedModel(["[{{not json at all"])), model="m")
    assert await drafter.propose(DraftRequest(ASK, TOOLS)) == []


async def test_timeout_becomes_drafter_error_promptly():
    # The answer would take 30 s: only the 0.2 s timeout can end it within the 10 s guard (a
    # 2 s guard left a loaded machine little room).
    model = ScriptedModel([call("add", a=1, b=2)], first_token_latency=30.0)
    drafter = EndpointDrafter(openai_client(model), model="m", timeout=0.2)
    with anyio.fail_after(10):
        with pytest.raises(DrafterError, match="timed out"):
            await drafter.propose(DraftRequest(ASK, TOOLS))


class ChoicesApp:
    """Minimal Chat Completions app: answers ``n`` choices, or a fixed HTTP error.

    The kit's ScriptedModel always returns one choice and never fails, so ``n`` sampling and
    error mapping need this stand-in (same wire format, in-process via ASGI transport).
    """

    def __init__(self, contents, status=200):
        self.contents, self.status, self.bodies = contents, status, []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        req = json.loads(body)
        self.bodies.append(req)
        if self.status != 200:
            payload = {"error": {"message": "boom", "type": "server_error"}}
        else:
            payload = {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": req["model"],
                "choices": [
                    {
                        "index": i,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": self.contents[i % len(self.contents)]},
                    }
                    for i in range(req.get("n", 1))
                ],
            }
        await send_json(send, self.status, payload)


async def test_n_sampling_reads_every_choice():
    app = ChoicesApp(
        [
            '[{"name": "add", "arguments": {"a": 1, "b": 2}}]',
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>',
            "I think it is sunny.",
        ]
    )
    drafter = EndpointDrafter(
        openai_client(app),
        model="m",
        temperature=0.5,
        max_tokens=64,
        tool_choice="required",
        extra_body={"top_k": 5},
    )
    calls = await drafter.propose(DraftRequest(ASK, TOOLS, samples=3))
    assert calls == [ToolCall("add", {"a": 1, "b": 2}), ToolCall("get_weather", {"city": "Oslo"})]
    sent = app.bodies[0]
    assert (sent["n"], sent["temperature"], sent["max_tokens"], sent["tool_choice"], sent["top_k"]) == (
        3,
        0.5,
        64,
        "required",
        5,
    )


async def test_http_error_maps_to_drafter_error():
    drafter = EndpointDrafter(openai_client(ChoicesApp([], status=500)), model="m")
    with pytest.raises(DrafterError, match="request failed") as info:
        await drafter.propose(DraftRequest(ASK, TOOLS))
    assert info.value.__cause__ is not None


async def test_no_tools_means_no_request():
    app = ChoicesApp(["x"])
    assert await EndpointDrafter(openai_client(app), model="m").propose(DraftRequest(ASK, [])) == []
    assert app.bodies == []


def test_bad_options_raise_config_error():
    from spectool import ConfigError

    with pytest.raises(ConfigError):
        EndpointDrafter(model="m")
    with pytest.raises(ConfigError):
        EndpointDrafter(base_url="http://x", model="m", sampling="beam")  # type: ignore[arg-type]
