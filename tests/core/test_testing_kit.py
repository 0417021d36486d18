"""spectool.testing: the scripted server speaks the protocol the real SDK expects, in-process
and over a real socket; the fakes behave as documented."""

import json
import time

import httpx
import pytest

from spectool import DraftRequest, ToolCall
from spectool.testing import (
    ScriptedDrafter,
    ScriptedModel,
    ServerThread,
    SocketServer,
    ToolLog,
    call,
    fake_tool,
    openai_client,
    say,
)

pytestmark = pytest.mark.anyio
USER = [{"role": "user", "content": "hi"}]


async def test_chat_tool_calls_through_the_sdk_in_process() -> None:
    model = ScriptedModel([[call("f", x=1), call("g")], say("bye")])
    client = openai_client(model)
    r = await client.chat.completions.create(model="m", messages=USER)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert [(t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls] == [
        ("f", {"x": 1}),
        ("g", {}),
    ]
    assert r.usage.completion_tokens > 0
    follow = [
        *USER,
        msg.model_dump(exclude_none=True),
        *({"role": "tool", "tool_call_id": t.id, "content": "ok"} for t in msg.tool_calls),
    ]
    r2 = await client.chat.completions.create(model="m", messages=follow)
    assert r2.choices[0].message.content == "bye" and r2.choices[0].finish_reason == "stop"
    r3 = await client.chat.completions.create(model="m", messages=USER)
    assert r3.model_dump() == r.model_dump()  # stateless and deterministic
    r4 = await client.chat.completions.create(model="m", messages=USER, n=3)  # λ samples by n
    assert [c.index for c in r4.choices] == [0, 1, 2]
    assert all(c.message == msg for c in r4.choices)


async def test_streamed_tool_call_deltas_reassemble_over_a_socket() -> None:
    model = ScriptedModel([[call("lookup", query="a long query string")]])
    async with SocketServer(model) as server:
        client = openai_client(server.url)
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        name, args, ids = "", "", set()
        async for chunk in stream:
            for tc in chunk.choices[0].delta.tool_calls or ():
                if tc.id:
                    ids.add(tc.id)
                name += tc.function.name or ""
                args += tc.function.arguments or ""
        await client.close()
    assert name == "lookup" and json.loads(args) == {"query": "a long query string"} and len(ids) == 1


async def test_responses_stream_events_through_the_sdk() -> None:
    first = say("one two")
    model = ScriptedModel([first, say("x")])
    client = openai_client(model)
    stream = await client.responses.create(model="m", input="hi", stream=True)
    kinds, final = [], None
    async for event in stream:
        kinds.append(event.type)
        if event.type == "response.completed":
            final = event.response
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and final.output_text == first.text


async def test_socket_streams_tokens_as_they_are_generated() -> None:
    model = ScriptedModel(["a b c d e f g h"], token_latency=0.05)
    async with SocketServer(model) as server:
        async with httpx.AsyncClient() as http:
            body = {"model": "m", "messages": USER, "stream": True}
            arrivals = []
            t0 = time.perf_counter()
            async with http.stream("POST", server.url + "/chat/completions", json=body) as resp:
                assert resp.headers["transfer-encoding"] == "chunked"
                async for line in resp.aiter_lines():
                    if line.startswith("data: {"):
                        arrivals.append(time.perf_counter() - t0)
            # keep-alive: a second request on the same connection works
            again = await http.post(server.url + "/chat/completions", json={"model": "m", "messages": USER})
    assert again.status_code == 200 and again.json()["choices"][0]["message"]["content"] == "a b c d e f g h"
    assert arrivals[-1] - arrivals[1] > 0.2  # chunks were spread over time, not buffered


async def test_errors_and_routes() -> None:
    model = ScriptedModel([])
    async with SocketServer(model) as server:
        async with httpx.AsyncClient() as http:
            assert (await http.get(server.url + "/nope")).status_code == 404
            bad = await http.post(server.url + "/chat/completions", content=b"{oops")
            assert bad.status_code == 400 and "not JSON" in bad.json()["error"]["message"]
            models = (await http.get(server.url + "/models")).json()
    assert models["data"][0]["id"] == "scripted"
    r = await openai_client(model).chat.completions.create(model="m", messages=USER)
    assert r.choices[0].message.content == "(end of script)"


async def test_per_token_latency_applies_without_streaming() -> None:
    model = ScriptedModel(["w " * 10], token_latency=0.02)
    t0 = time.perf_counter()
    await openai_client(model).chat.completions.create(model="m", messages=USER)
    assert time.perf_counter() - t0 >= 0.2


def test_server_thread_serves_sync_clients() -> None:
    from openai import OpenAI

    with ServerThread(ScriptedModel(["sync hello"])) as url:
        r = OpenAI(base_url=url, api_key="x", max_retries=0).chat.completions.create(model="m", messages=USER)
    assert r.choices[0].message.content == "sync hello"


async def test_scripted_drafter_hit_rate_and_perturbation() -> None:
    truth = [call("get", key="a")]
    exact = await ScriptedDrafter(lambda m: truth).propose(DraftRequest(USER, [], samples=3))
    assert exact == truth * 3
    wrong = await ScriptedDrafter(lambda m: truth, hit_rate=0.0).propose(DraftRequest(USER, [], samples=2))
    assert wrong == [ToolCall("get", {"key": "a_x"})] * 2
    mixed = await ScriptedDrafter(lambda m: truth, hit_rate=0.5, seed=1).propose(
        DraftRequest(USER, [], samples=40)
    )
    assert 8 < sum(c == truth[0] for c in mixed) < 32


async def test_fake_tool_latency_result_and_log() -> None:
    log = ToolLog()
    spec = fake_tool("t", latency=0.05, result=lambda a: a["x"] * 2, log=log)
    assert await spec.invoke({"x": 4}) == 8
    name, args, start, end = log.runs[0]
    assert (name, args) == ("t", {"x": 4}) and end - start >= 0.05
    with pytest.raises(KeyError):
        await fake_tool("boom", raises=KeyError("k")).invoke({})
