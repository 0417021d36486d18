"""The HTTP layer on the real model: routes, every tool-cache error, streaming, concurrency,
a stock ``openai`` client and a real socket."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from .conftest import WEATHER
from .helpers import uvicorn_server

pytestmark = pytest.mark.model

SHORT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "max_tokens": 6}


@pytest.fixture(scope="module")
def app(smol):
    from spectool_serving import create_app
    from spectool_serving.server import build_engine

    engine = build_engine(loaded=smol)
    app = create_app(engine, api_keys={"key-a", "key-b"}, max_body_bytes=4096)
    yield app
    engine.stop()


@pytest.fixture(scope="module")
def live(app):
    """The same app on a real socket (ASGITransport buffers whole responses, so live
    interleaving of a stream and posts needs a server)."""
    with uvicorn_server(app) as url:
        yield url


def _client(app, key="key-a"):
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://t",
        headers={"Authorization": f"Bearer {key}"} if key else {},
        timeout=600,
    )


async def _open_stream(client, body):
    """Start a streamed completion; returns (response id, remaining line iterator, response cm)."""
    cm = client.stream("POST", "/v1/chat/completions", json={**body, "stream": True})
    resp = await cm.__aenter__()
    assert resp.status_code == 200
    lines = resp.aiter_lines()
    async for line in lines:
        if line.startswith("data: "):
            return json.loads(line[6:])["id"], lines, cm


async def _drain(lines) -> list[dict]:
    chunks = []
    async for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            chunks.append(json.loads(line[6:]))
    return chunks


def test_health_models_and_auth(app):
    async def go():
        async with _client(app) as c:
            assert (await c.get("/health")).json()["status"] == "ok"
            assert (await c.get("/v1/models")).json()["data"][0]["object"] == "model"
        async with _client(app, key="nope") as c:
            r = await c.post("/v1/chat/completions", json=SHORT)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"

    asyncio.run(go())


def test_bad_requests_are_400(app):
    async def go():
        async with _client(app) as c:
            for body, param in [
                ({"messages": []}, "messages"),
                ({**SHORT, "n": 99}, "n"),
                (
                    {
                        **SHORT,
                        "tools": [WEATHER],
                        "tool_choice": {"type": "function", "function": {"name": "nope"}},
                    },
                    "tool_choice",
                ),
                ({**SHORT, "stop": 5}, "stop"),
            ]:
                r = await c.post("/v1/chat/completions", json=body)
                assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
            r = await c.post("/v1/chat/completions", content=b"{not json")
            assert r.status_code == 400

    asyncio.run(go())


def test_tool_cache_endpoint_errors_and_tenants(app):
    store = app.state.engine.store
    rid = "chatcmpl-open-for-test"
    store.open(rid, "key-a", [WEATHER])  # what the chat route does when a request starts

    async def go():
        async with _client(app) as a, _client(app, "key-b") as b:
            r = await a.post("/cache-tool-output/chatcmpl-unknown", json=[])
            assert r.status_code == 404 and "unknown" in r.json()["error"]["message"]
            item = {"name": "get_weather", "params": {"city": "Paris"}, "output": "sunny", "effect": "pure"}
            ok = await a.post(f"/cache-tool-output/{rid}", json=[item, {**item, "keep_alive": 5}])
            assert ok.status_code == 200 and ok.json() == {"cached": 2}
            # tenant B cannot post into A's response: ids are per tenant, A's is unknown to B
            assert (
                await b.post(f"/cache-tool-output/{rid}", json=[{**item, "output": "evil"}])
            ).status_code == 404
            # B choosing the same id (as a vLLM client can with X-Request-Id) gets its own scope:
            # what A posted is not readable there, and what B posts there never reaches A
            store.open(rid, "key-b", [WEATHER])
            assert store.take(rid, "key-b", "get_weather", {"city": "Paris"}) is None
            r = await b.post(f"/cache-tool-output/{rid}", json=[{**item, "output": "evil"}])
            assert r.status_code == 200
            assert store.take(rid, "key-a", "get_weather", {"city": "Paris"}).output == "sunny"
            assert (await a.post(f"/cache-tool-output/{rid}", json=[item])).status_code == 200  # still A's
            for bad in [
                {"x": 1},
                [{"params": {}}],
                [{"name": "f"}],
                [{"name": "f", "params": [1], "output": 1}],
                [{"name": "f", "output": 1, "keep_alive": -1}],
                [{"name": "f", "output": 1, "extra": 1}],
                [{"name": "f", "output": 1, "effect": "write"}],
            ]:
                r = await a.post(f"/cache-tool-output/{rid}", json=bad)
                assert r.status_code == 422, (bad, r.text)
            big = [{"name": "f", "output": "x" * 5000}]
            assert (await a.post(f"/cache-tool-output/{rid}", json=big)).status_code == 413
            assert (await a.post(f"/cache-tool-output/{rid}", content=b"[{")).status_code == 400
            async with _client(app, key=None) as anon:
                assert (await anon.post(f"/cache-tool-output/{rid}", json=[item])).status_code == 401
            store.close(rid, "key-a")
            store.close(rid, "key-b")
            r = await a.post(f"/cache-tool-output/{rid}", json=[item])
            assert r.status_code == 410 and "finished" in r.json()["error"]["message"]

    asyncio.run(go())


def test_body_limit_is_enforced_before_the_body_is_read(app):
    """A chunked body with no Content-Length: the server stops at the limit (413) instead of
    reading all of it; the generator counts what was pulled."""
    sent = [0]

    async def endless():
        while True:
            sent[0] += 1024
            yield b" " * 1024

    async def go():
        async with _client(app) as a:
            r = await a.post("/v1/chat/completions", content=endless())
            assert r.status_code == 413
            r = await a.post("/v1/chat/completions", content=b"{}", headers={"content-length": "99999999"})
            assert r.status_code == 413

    asyncio.run(go())
    assert sent[0] <= 4096 + 2 * 1024


def test_openapi_documents_the_tool_output_endpoint(app):
    async def go():
        async with _client(app) as a:
            return (await a.get("/openapi.json")).json()

    spec = asyncio.run(go())
    post = spec["paths"]["/cache-tool-output/{response_id}"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert body["type"] == "array" and body["items"]["$ref"].endswith("/ToolOutputItem")
    item = spec["components"]["schemas"]["ToolOutputItem"]
    assert set(item["properties"]) == {"name", "params", "output", "keep_alive", "effect"}
    assert {"200", "401", "404", "410", "413", "422"} <= set(post["responses"])


def test_post_during_a_live_stream(live):
    """Over a real socket: learn the id from the first chunk, post while the model runs."""

    async def go():
        async with httpx.AsyncClient(
            base_url=live, headers={"Authorization": "Bearer key-a"}, timeout=600
        ) as c:
            rid, lines, cm = await _open_stream(c, {**SHORT, "max_tokens": 24, "tools": [WEATHER]})
            r = await c.post(f"/cache-tool-output/{rid}", json=[{"name": "get_weather", "output": 1}])
            assert r.status_code == 200 and r.json() == {"cached": 1}
            chunks = await _drain(lines)
            await cm.__aexit__(None, None, None)
            assert all(ch["id"] == rid for ch in chunks)

    asyncio.run(go())


def test_stream_first_chunk_has_id_and_usage(app):
    async def go():
        async with _client(app) as c:
            rid, lines, cm = await _open_stream(c, {**SHORT, "stream_options": {"include_usage": True}})
            chunks = await _drain(lines)
            await cm.__aexit__(None, None, None)
            assert rid.startswith("chatcmpl-") and all(ch["id"] == rid for ch in chunks)
            assert chunks[-1]["usage"]["completion_tokens"] >= 1
            finals = [ch for ch in chunks if ch["choices"] and ch["choices"][0]["finish_reason"]]
            assert finals and finals[0]["choices"][0]["spectool_resolved_calls"] == []
            r = (await c.post("/v1/chat/completions", json={**SHORT, "n": 2})).json()
            assert [ch["index"] for ch in r["choices"]] == [0, 1]
            text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])
            assert text == r["choices"][0]["message"]["content"]  # greedy: stream == non-stream

    asyncio.run(go())


def test_eight_streamed_agents_share_the_batch(app, live):
    engine = app.state.engine
    before = engine.counters()

    async def one(i):
        async with httpx.AsyncClient(
            base_url=live, headers={"Authorization": "Bearer key-a"}, timeout=600
        ) as c:
            body = {**SHORT, "messages": [{"role": "user", "content": f"Count to {i + 2}."}], "max_tokens": 8}
            rid, lines, cm = await _open_stream(c, body)
            chunks = await _drain(lines)
            await cm.__aexit__(None, None, None)
            return rid, chunks

    async def go():
        return await asyncio.gather(*(one(i) for i in range(8)))

    results = asyncio.run(go())
    assert len({rid for rid, _ in results}) == 8
    assert all(
        any(ch["choices"] and ch["choices"][0]["finish_reason"] for ch in chunks) for _, chunks in results
    )
    after = engine.counters()
    steps, rows = after["decode_steps"] - before["decode_steps"], after["decode_rows"] - before["decode_rows"]
    assert rows > steps  # decode steps were batched across sequences


def test_stock_openai_client_with_tools(app):
    import openai

    async def go():
        client = openai.AsyncOpenAI(
            api_key="key-a",
            base_url="http://t/v1",
            http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app), timeout=600),
        )
        r = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[WEATHER],
            tool_choice="required",
            temperature=0,
            max_tokens=40,
        )
        call = r.choices[0].message.tool_calls[0]
        assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
        assert "city" in json.loads(call.function.arguments)
        stream = await client.chat.completions.create(
            model="m", messages=SHORT["messages"], max_tokens=4, temperature=0, stream=True
        )
        ids = {chunk.id async for chunk in stream}
        assert len(ids) == 1

    asyncio.run(go())


def test_metrics_over_the_socket(live):
    metrics = httpx.get(f"{live}/metrics").text
    assert "spectool_engine_prefill_tokens_total" in metrics and "spectool_engine_o3_hits_total" in metrics
    assert "spectool_engine_running" in metrics
    reserved = [ln for ln in metrics.splitlines() if ln.startswith("spectool_engine_kv_reserved ")]
    assert len(reserved) == 1 and "spectool_engine_kv_in_use " in metrics


def test_engine_client_posts_and_degrades(live, app):
    """Algorithm 4 client half against the live engine, and against a server without the
    endpoint (plain FastAPI app) where it must switch itself off."""
    from fastapi import FastAPI

    from spectool import Outcome
    from spectool._engine_client import EngineClient, resolved_messages
    from spectool._types import ToolCall

    store = app.state.engine.store

    async def go():
        sink = EngineClient(f"{live}/v1", "key-a")
        call = ToolCall("get_weather", {"city": "Paris"})
        await sink.on_tool_output(call, "k", Outcome(value={"temp": 3}))  # before any id: kept
        store.open("chatcmpl-sink", "key-a", [WEATHER])
        sink.on_response_id("chatcmpl-sink")  # replays the finished output
        await sink.aclose()
        entry = store.take("chatcmpl-sink", "key-a", "get_weather", {"city": "Paris"})
        assert entry is not None and entry.output == '{"temp": 3}' and sink.counters["cached"] == 1

        bare = EngineClient(
            "http://t/v1", http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=FastAPI()))
        )
        bare.on_response_id("chatcmpl-x")
        await bare.on_tool_output(call, "k", Outcome(value=1))
        assert bare.enabled is False  # degraded to client-side mode
        await bare.on_tool_output(call, "k", Outcome(value=1))
        assert bare.counters["posted"] == 1

    asyncio.run(go())
    rec = {
        "content": None,
        "tool_call": {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
        "output": "x",
    }
    msgs = resolved_messages({"spectool_resolved_calls": [rec]})
    assert [m["role"] for m in msgs] == ["assistant", "tool"] and msgs[1]["tool_call_id"] == "c1"


def test_wrapper_engine_mode_end_to_end(live, app):
    """SpeculativeOpenAI(mode="engine") on the live engine: the drafter's call runs early, its
    output is posted on the stream's id, the engine resolves the call in place (O3), and the
    next call comes back resolved from the client cache."""
    import openai

    import spectool
    from spectool._engine_client import resolved_messages
    from spectool._types import ToolCall

    @spectool.tool(effect="pure")
    def get_weather(city: str) -> str:
        """Current weather of a city."""
        return f"{city}: 21C, clear"

    class GuessParis:  # a deterministic drafter: the real ones need a second model server
        async def propose(self, request):
            return [ToolCall("get_weather", {"city": "Paris"})]

    engine = app.state.engine
    engine.ctx.max_rounds = 1
    hits_before = engine.counters()["o3_hits"]
    # The client's post races the model's decoding of the call: on a loaded machine the call
    # could end before the output arrives (a plain miss, as the protocol allows). The engine's
    # lookup therefore waits (on the engine thread, up to 60 s) for this test's entry to land.
    store, take = engine.store, engine.store.take

    def take_when_posted(*args):
        deadline = time.monotonic() + 60
        while (entry := take(*args)) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return entry

    async def go():
        client = openai.AsyncOpenAI(api_key="key-a", base_url=f"{live}/v1", timeout=600)
        async with spectool.speculative(
            client, [get_weather], GuessParis(), mode="engine", samples=1
        ) as agent:
            stream = await agent.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "Weather in Paris?"}],
                tool_choice="required",
                temperature=0,
                max_tokens=40,
                stream=True,
            )
            mine = []
            async for chunk in stream:
                for ch in chunk.choices:
                    mine += resolved_messages(ch) if ch.finish_reason else []
            resolved = agent.engine_resolved(stream)  # the wrapper's reading of the same field
            assert [m["role"] for m in resolved] == [m["role"] for m in mine]
            results = await agent.run_tool_calls(stream)
            return resolved, results, agent.sink.counters

    store.take = take_when_posted
    try:
        resolved, results, counters = asyncio.run(go())
    finally:
        engine.ctx.max_rounds = 16
        del store.take  # the class's own method again
    assert counters["cached"] >= 1
    assert engine.counters()["o3_hits"] == hits_before + 1
    assert [m["role"] for m in resolved] == ["assistant", "tool"] and resolved[1][
        "content"
    ] == "Paris: 21C, clear"
    assert results and results[0]["role"] == "tool"
