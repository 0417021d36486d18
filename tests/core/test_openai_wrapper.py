"""The AsyncOpenAI wrapper: both APIs, streamed or not, in-process and over a socket; hooks;
the engine seam; and the SDK's older major versions (1.x, 2.x) in a subprocess."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import spectool
from spectool import ConfigError, ModelRequest, RequestHook, SpeculativeStream
from spectool.testing import (
    KeyValueWorld,
    ScriptedDrafter,
    ScriptedModel,
    SocketServer,
    call,
    openai_client,
    say,
)
from tests.core.helpers import until

pytestmark = pytest.mark.anyio
SCRIPT = [[call("get", key="a"), call("add", a=2, b=3)], say("a is 1")]


async def test_drafts_start_when_the_request_is_sent_not_after() -> None:
    world = KeyValueWorld(latency=0.05)
    model = ScriptedModel(SCRIPT, first_token_latency=0.2)
    drafter = ScriptedDrafter(model)
    async with spectool.speculative(openai_client(model), world.toolbox, drafter) as c:
        response = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        # While the model was generating, the predicted tools already ran.
        assert world.log.names() == ["get", "add"] and len(drafter.requests) == 1
        results = await c.run_tool_calls(response)
    assert [r["content"] for r in results] == ["1", "5.0"]
    assert [r["tool_call_id"] for r in results] == [t.id for t in response.choices[0].message.tool_calls]
    assert c.counters.hits == 2 and len(world.log.runs) == 2
    sent = model.requests[0]
    assert [t["function"]["name"] for t in sent["tools"]] == ["get", "keys", "put", "delete", "add"]


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_api_round_trip_over_a_real_socket(stream) -> None:
    world = KeyValueWorld()
    model = ScriptedModel(SCRIPT)
    async with SocketServer(model) as server:
        client = openai_client(server.url)
        async with spectool.speculative(client, world.toolbox, ScriptedDrafter(model)) as c:
            first = await c.responses.create(model="m", input="q", stream=stream)
            if stream:
                assert isinstance(first, SpeculativeStream)
            items = await c.run_tool_calls(first)
            assert [i["type"] for i in items] == ["function_call_output"] * 2
            rid = first.response_id if stream else first.id
            second = await c.responses.create(model="m", input=items, previous_response_id=rid)
        await client.close()
    assert second.output_text == "a is 1"
    assert model.requests[1]["previous_response_id"] == rid
    assert c.counters.hits + c.counters.joins == 2


async def test_streamed_chat_passes_every_chunk_through() -> None:
    model = ScriptedModel(["hello there world"])
    async with spectool.speculative(openai_client(model), KeyValueWorld().toolbox) as c:
        stream = await c.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "x"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    # The scripted tokenizer cuts words into 4-character pieces: hell|o |ther|e |worl|d
    assert text == "hello there world" and chunks[-1].usage.completion_tokens == 6
    assert sum(1 for ch in chunks if ch.choices and ch.choices[0].delta.content) == 6
    assert stream.final_message() == {"role": "assistant", "content": "hello there world"}
    assert stream.response_id.startswith("chatcmpl-")


async def test_hooks_run_in_order_and_can_edit_requests_and_responses() -> None:
    order = []

    class Tagger(RequestHook):
        def __init__(self, name):
            self.name = name

        async def before_request(self, request: ModelRequest) -> None:
            order.append(f"before:{self.name}")
            request.kwargs["metadata"] = {"tag": self.name}

        async def wrap_request(self, request, call_next):
            order.append(f"wrap:{self.name}")
            return await call_next(request)

        async def after_response(self, request, response):
            order.append(f"after:{self.name}")
            return response

    model = ScriptedModel(["hi"])
    async with spectool.speculative(openai_client(model), [], hooks=[Tagger("a"), Tagger("b")]) as c:
        await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert order == ["before:a", "before:b", "wrap:a", "wrap:b", "after:b", "after:a"]
    assert model.requests[0]["metadata"] == {"tag": "b"}
    assert "tools" not in model.requests[0]  # no tools registered: none sent (an empty list is a 400)


async def test_engine_mode_calls_the_sink_with_ids_and_finished_outputs() -> None:
    class RecordingSink:  # the shape spectool._engine_client implements against a real engine
        def __init__(self):
            self.ids, self.outputs, self.prepared, self.closed = [], [], 0, False

        def prepare(self, request):
            self.prepared += 1
            request.kwargs["stream"] = True

        def on_response_id(self, rid):
            self.ids.append(rid)

        async def on_tool_output(self, call, key, outcome):
            self.outputs.append((call.name, outcome.value))

        async def aclose(self):
            self.closed = True

    sink = RecordingSink()
    model = ScriptedModel(SCRIPT, first_token_latency=0.05)
    world = KeyValueWorld()
    async with spectool.speculative(
        openai_client(model), world.toolbox, ScriptedDrafter(model), mode="engine", sink=sink
    ) as c:
        stream = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        await c.run_tool_calls(stream)
    assert sink.prepared == 1 and sink.closed and len(sink.ids) == 1
    assert sorted(sink.outputs) == [("add", 5.0), ("get", "1")]


async def test_tool_errors_become_messages_or_raise() -> None:
    model = ScriptedModel([[call("nope"), call("get", key=5)]])
    async with spectool.speculative(openai_client(model), KeyValueWorld().toolbox) as c:
        r = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        out = await c.run_tool_calls(r)
    assert out[0]["content"].startswith("Error: ToolNotFoundError: no tool named 'nope'")
    assert out[1]["content"].startswith("Error: ToolArgumentsError: tool 'get': argument 'key'")
    async with spectool.speculative(
        openai_client(model), KeyValueWorld().toolbox, on_tool_error="raise"
    ) as c:
        r = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(spectool.ToolNotFoundError):
            await c.run_tool_calls(r)


async def test_malformed_arguments_from_the_model_are_reported_per_call() -> None:
    async with spectool.speculative(openai_client(ScriptedModel([])), KeyValueWorld().toolbox) as c:
        message = {
            "role": "assistant",
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "get", "arguments": "{bad"}},
                {"id": "2", "type": "function", "function": {"name": "keys", "arguments": ""}},
            ],
        }
        out = await c.run_tool_calls(message)
    assert "not valid JSON" in out[0]["content"] and json.loads(out[1]["content"]) == ["a", "b"]


async def test_wrapper_needs_async_with_and_delegates_the_rest() -> None:
    model = ScriptedModel(["x"])
    c = spectool.speculative(openai_client(model), [])
    with pytest.raises(ConfigError, match="async with"):
        await c.chat.completions.create(model="m", messages=[])
    async with c:
        models = await c.models.list()  # not wrapped: delegated to the SDK
        assert [m.id for m in models.data] == ["scripted"]
        raw = await c.chat.completions.with_raw_response.create(  # the SDK's own, unwrapped
            model="m", messages=[{"role": "user", "content": "x"}]
        )
        assert raw.http_response.status_code == 200 and raw.parse().choices[0].message.content == "x"
        twin = c.with_options(timeout=5)
        assert twin.speculator is c.speculator
        await twin.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(ConfigError):
        spectool.speculative(openai_client(model), [], mode="cloud")


# -- older SDK majors -------------------------------------------------------------------------

_OLD_SDK_SCRIPT = textwrap.dedent("""
    import anyio, httpx, openai, spectool
    from spectool.testing import (KeyValueWorld, ScriptedDrafter, ScriptedModel, SocketServer,
                                  call, openai_client, say)
    script = [[call("get", key="a"), call("add", a=1, b=1)], say("done")]

    async def main():
        outs = []
        for api in ("chat", "responses"):
            for stream in (False, True):
                model = ScriptedModel(script)
                async with spectool.speculative(openai_client(model), KeyValueWorld().toolbox,
                                                ScriptedDrafter(model)) as c:
                    r = await spectool.run_agent(c, model="m", messages="q", api=api, stream=stream)
                outs.append((api, stream, r.final_text, r.stats["hits"] + r.stats["joins"]))
        async with SocketServer(ScriptedModel(script)) as server:
            async with spectool.speculative(openai_client(server.url), KeyValueWorld().toolbox) as c:
                r = await spectool.run_agent(c, model="m", messages="q", stream=True)
                outs.append(("socket", True, r.final_text, 0))
        print(openai.__version__, outs)
    anyio.run(main)
""")


def _old_sdk(spec: str) -> Path:
    """``openai`` of an older major, installed once into a cache folder (deps from this env)."""
    root = Path(os.environ.get("SPECTOOL_CACHE", Path.home() / ".cache" / "spectool")) / "sdk"
    target = root / spec.replace(">", "").replace("<", "-").replace(",", "_").replace("=", "")
    if not (target / "openai").is_dir():
        import shutil
        import tempfile

        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=root))  # install aside, then rename: never half a package
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
                str(tmp),
                spec,
            ],
            check=True,
            timeout=240,
        )
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    return target


@pytest.mark.parametrize("spec, major", [("openai>=1.40,<2", "1"), ("openai>=2,<3", "2")])
def test_older_openai_majors_work(spec, major) -> None:
    target = _old_sdk(spec)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.getcwd()])}
    out = subprocess.run(
        [sys.executable, "-c", _OLD_SDK_SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    version, _, results = out.stdout.strip().partition(" ")
    assert version.split(".")[0] == major
    assert results.count("'done'") == 5 and "2)" in results  # every path answered; hits happened


def test_engine_mode_finds_its_sink_through_the_engine_client_seam(monkeypatch) -> None:
    import types

    made = []

    class Sink:
        def prepare(self, request): ...
        def on_response_id(self, rid): ...
        async def on_tool_output(self, call, key, outcome): ...
        async def aclose(self): ...

    fake = types.ModuleType("spectool._engine_client")  # stands in for the serving helper's module
    fake.create_sink = lambda client, **options: made.append((client, options)) or Sink()
    monkeypatch.setitem(sys.modules, "spectool._engine_client", fake)
    monkeypatch.setattr(spectool, "_engine_client", fake, raising=False)
    sdk = openai_client(ScriptedModel([say("hi")]))
    wrapped = spectool.speculative(sdk, [], mode="engine", engine_options={"post_timeout": 1})
    assert isinstance(wrapped.sink, Sink) and made == [(sdk, {"post_timeout": 1})]
    assert wrapped.speculator.cache.on_complete == wrapped.sink.on_tool_output

    monkeypatch.setitem(sys.modules, "spectool._engine_client", None)  # import now fails
    monkeypatch.delattr(spectool, "_engine_client")
    with pytest.raises(ConfigError, match="engine"):
        spectool.speculative(sdk, [], mode="engine")


def _engine_like(app, records):
    """Wraps the scripted server so its first response carries ``spectool_resolved_calls``, as a
    spectool engine's does after splicing posted outputs in (the real engine runs a model;
    tests/serving covers it end to end)."""
    served = []

    async def wrapped(scope, receive, send):
        async def patch(message):
            body = message.get("body", b"")
            if message["type"] == "http.response.body" and body and not served:
                text = body.decode()
                if text.startswith("{"):
                    payload = json.loads(text)
                    payload["choices"][0]["spectool_resolved_calls"] = records
                    message = {**message, "body": json.dumps(payload).encode()}
                    served.append(1)
                elif '"finish_reason":"stop"' in text:
                    payload = json.loads(text[len("data: ") :])
                    payload["choices"][0]["spectool_resolved_calls"] = records
                    message = {**message, "body": f"data: {json.dumps(payload)}\n\n".encode()}
                    served.append(1)
            await send(message)

        await app(scope, receive, patch)

    return wrapped


@pytest.mark.parametrize("stream", [False, True])
async def test_calls_an_engine_resolved_in_place_enter_the_transcript_and_count(stream) -> None:
    tool_call = {"id": "call_0", "type": "function", "function": {"name": "get", "arguments": '{"key": "a"}'}}
    records = [{"content": None, "tool_call": tool_call, "output": "1"}]
    engine = ScriptedModel([say("a is 1")])  # what the model says after the engine spliced get(a)
    drafter = ScriptedDrafter(lambda messages: [call("get", key="a")])
    world = KeyValueWorld(latency=0.01)
    async with spectool.speculative(
        openai_client(_engine_like(engine, records)), world.toolbox, drafter
    ) as c:
        turn = c.speculator.start_turn([{"role": "user", "content": "q"}])
        await turn.wait()
        # the speculative get(a) finished (and would have been posted)
        await until(lambda: c.speculator.cache.unused_finished() == 1)
        result = await spectool.run_agent(c, model="m", messages="q", stream=stream)
    assert [m["role"] for m in result.transcript] == ["user", "assistant", "tool", "assistant"]
    assert result.transcript[1]["tool_calls"][0]["function"]["name"] == "get"
    assert result.transcript[2] == {"role": "tool", "tool_call_id": "call_0", "content": "1"}
    assert result.final_text == "a is 1" and result.turns == 2  # the call answered in place is a turn
    assert result.stats["hits"] == 1 and world.log.count("get") == 1  # consumed, not re-run
