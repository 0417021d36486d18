"""Eager dispatch: a streamed call starts when its arguments close, results stay identical.

Streaming is only observable over a real socket (the in-process ASGI transport buffers the whole
body), so the timing tests use ``SocketServer``; losslessness is checked on both transports.
"""

import time

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spectool
from spectool import ConfigError
from spectool.testing import (
    KeyValueWorld,
    ScriptedDrafter,
    ScriptedModel,
    SocketServer,
    call,
    openai_client,
    say,
)

from .helpers import until
from .kv_scripts import kv_scripts

pytestmark = pytest.mark.anyio
KEYS = ["a", "b"]
scripts = kv_scripts(KEYS, "xy", 2, max_calls=4, max_turns=3)


async def _agent(script, url_or_model, *, eager, drafter=None, api="chat", latency=0.002):
    world = KeyValueWorld(latency=latency)
    client = openai_client(url_or_model)
    async with spectool.speculative(client, world.toolbox, drafter, eager=eager) as c:
        result = await spectool.run_agent(c, model="m", messages="please", api=api, stream=True)
    await client.close()
    return result, world


async def _lossless(script, *, eager, api, drafter=None, socket=False):
    model = ScriptedModel(script, token_latency=0.001)
    if socket:
        async with SocketServer(model) as server:
            base, bw = await _agent(script, server.url, eager=False, api=api)
            spec, sw = await _agent(script, server.url, eager=eager, api=api, drafter=drafter)
    else:
        base, bw = await _agent(script, model, eager=False, api=api)
        spec, sw = await _agent(script, model, eager=eager, api=api, drafter=drafter)
    assert spec.transcript_json() == base.transcript_json()
    assert sw.data == bw.data
    for name in ("put", "delete"):  # every mutating call ran exactly once, as without eager dispatch
        assert sw.log.count(name) == bw.log.count(name)
    return base, spec, bw, sw


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    script=scripts,
    eager=st.sampled_from(["speculable", "all"]),
    api=st.sampled_from(["chat", "responses"]),
    drafted=st.booleans(),
)
def test_transcripts_are_identical_with_and_without_eager_dispatch(script, eager, api, drafted):
    drafter = ScriptedDrafter(ScriptedModel(script), hit_rate=0.5) if drafted else None
    anyio.run(lambda: _lossless(script, eager=eager, api=api, drafter=drafter, socket=True))


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("eager", ["speculable", "all"])
async def test_lossless_in_process_where_the_whole_body_arrives_at_once(api, eager) -> None:
    script = [
        [call("get", key="a"), call("put", key="a", value="z"), call("get", key="a")],
        [call("delete", key="b"), call("keys"), call("add", a=1, b=2)],
        say("done"),
    ]
    await _lossless(script, eager=eager, api=api)


async def _stream_then_resolve(model, world, eager, api="chat", pass_stream=False):
    """Read the whole stream, note when it ended, then resolve its calls."""
    async with SocketServer(model) as server:
        client = openai_client(server.url)
        async with spectool.speculative(client, world.toolbox, eager=eager) as c:
            t0 = time.monotonic()
            if api == "chat":
                stream = await c.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "q"}], stream=True
                )
            else:
                stream = await c.responses.create(model="m", input="q", stream=True)
            async for _ in stream:
                pass
            ended = time.monotonic()
            target = stream if pass_stream or api == "responses" else stream.final_message()
            out = await c.run_tool_calls(target)
            stats = c.stats()
        await client.close()
    starts = {}
    for name, args, start, _ in sorted(world.log.runs, key=lambda r: r[2]):
        starts.setdefault((name, tuple(sorted(args.items()))), start - t0)
    return ended - t0, starts, out, stats


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_speculable_call_starts_when_its_json_closes_not_when_the_response_ends(api) -> None:
    # get's arguments close after a few tokens; a long add follows (≈ 40 tokens × 10 ms).
    script = [[call("get", key="a"), call("add", a=1, b=123456789012345678901234567890123456789012345678)]]
    ended, starts, out, stats = await _stream_then_resolve(
        ScriptedModel(script, token_latency=0.01), KeyValueWorld(latency=0.05), "speculable", api
    )
    assert starts[("get", (("key", "a"),))] < ended  # ordering, not a margin: before the stream ended
    assert out[0].get("content", out[0].get("output")) == "1"
    assert stats["misses"] == 2 and stats["hits"] == 0  # eager runs are the main path's own, not hits
    ended_off, starts_off, out_off, _ = await _stream_then_resolve(
        ScriptedModel(script, token_latency=0.01), KeyValueWorld(latency=0.05), False, api
    )
    assert starts_off[("get", (("key", "a"),))] >= ended_off
    assert out_off == out


async def test_mutating_calls_wait_for_resolve_unless_the_user_opts_in() -> None:
    script = [
        [
            call("put", key="a", value="z"),
            call("get", key="a"),
            call("add", a=1, b=123456789012345678901234567890123456789012345678),
        ]
    ]
    world = KeyValueWorld(latency=0.05)
    ended, starts, out, _ = await _stream_then_resolve(
        ScriptedModel(script, token_latency=0.01), world, "speculable"
    )
    assert starts[("put", (("key", "a"), ("value", "z")))] >= ended  # never early by default
    assert [o["content"] for o in out][:2] == ["ok", "z"]

    world = KeyValueWorld(latency=0.05)
    ended, starts, out, stats = await _stream_then_resolve(
        ScriptedModel(script, token_latency=0.01), world, "all", pass_stream=True
    )
    put, get = starts[("put", (("key", "a"), ("value", "z")))], starts[("get", (("key", "a"),))]
    # it started once the stream ended (only then are its arguments final): see
    # test_a_fragment_for_an_earlier_call_breaks_the_stream_and_nothing_more_runs_early
    assert put < get
    # the read of the same scope waited for the write to finish: it sees "z"
    runs = {name: (start, end) for name, _, start, end in world.log.runs}
    assert runs["get"][0] >= runs["put"][1]
    assert [o["content"] for o in out][:2] == ["ok", "z"] and world.log.count("put") == 1
    assert stats["mutating_runs"] == 1


async def test_resolving_the_final_message_reuses_the_eager_runs_once() -> None:
    script = [[call("get", key="a"), call("keys")]]
    world = KeyValueWorld(latency=0.02)
    _, _, out, stats = await _stream_then_resolve(
        ScriptedModel(script, token_latency=0.005), world, "speculable"
    )
    assert [o["content"] for o in out] == ["1", '["a", "b"]']
    assert world.log.count("get") == 1 and world.log.count("keys") == 1 and stats["misses"] == 2


def test_bad_eager_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="eager"):
        spectool.speculative(object(), [], eager="sometimes")


@pytest.mark.parametrize("policy", ["speculable", "all"])
async def test_a_call_that_changed_after_it_started_is_resolved_again_as_finally_made(policy) -> None:
    from spectool import ToolCall
    from spectool._eager import EagerBatch

    world = KeyValueWorld()
    async with spectool.Speculator(world.toolbox) as spec:
        batch = EagerBatch(spec, policy)
        batch.offer(0, ToolCall("get", {"key": "a"}, id="c0"), final=True)
        batch.offer(1, ToolCall("put", {"key": "a", "value": "q"}, id="c1"), final=True)
        assert 1 not in batch.started  # a write waits for the end of the stream
        batch.end()
        assert 0 in batch.started and (1 in batch.started) == (policy == "all")
        # A malformed stream: the final message says get(b); the eager get(a) is not used.
        outcomes = await batch.resolve_all(
            [ToolCall("get", {"key": "b"}, id="c0"), ToolCall("put", {"key": "a", "value": "q"}, id="c1")]
        )
    assert [o.value for o in outcomes] == ["2", "ok"] and world.log.count("put") == 1


async def test_traces_record_the_calls_of_eagerly_resolved_responses(tmp_path) -> None:
    from spectool import Speculator, TraceRecorder, load_traces

    world = KeyValueWorld()
    model = ScriptedModel([[call("get", key="a"), call("keys")], say("done")], token_latency=0.002)
    path = tmp_path / "traces.jsonl"
    async with SocketServer(model) as server:
        client = openai_client(server.url)
        spec = Speculator(world.toolbox, trace=TraceRecorder(path))
        async with spectool.speculative(client, world.toolbox, speculator=spec) as c:
            await spectool.run_agent(c, model="m", messages="go", stream=True)
        await client.close()
    examples = load_traces(path)
    assert [[x.name for x in e.calls] for e in examples] == [["get", "keys"]]


# -- issue 26, class 3: eager dispatch admits what drafting admits, and no more ------------------


def _external_world():
    world = KeyValueWorld()
    seen: list[str] = []

    @spectool.tool(effect="read_only", external=True)
    async def search(q: str) -> str:
        """A third party's search: it learns every query."""
        seen.append(q)
        return q.upper()

    world.toolbox.add(search)
    return world, seen


@pytest.mark.parametrize("opt_in", [False, True])
async def test_an_external_tool_is_not_dispatched_early_without_the_sessions_opt_in(opt_in) -> None:
    from spectool import ToolCall
    from spectool._eager import EagerBatch

    world, seen = _external_world()
    async with spectool.Speculator(world.toolbox, speculate_external=opt_in) as spec:
        batch = EagerBatch(spec, "all")
        batch.offer(0, ToolCall("search", {"q": "merger plans"}, id="c0"), final=True)
        batch.end()
        if opt_in:  # wait for the early run; without the opt-in, give a stray one the chance
            await until(lambda: seen == ["merger plans"])
        else:
            await anyio.sleep(0.01)
        assert (seen == ["merger plans"]) == opt_in  # the third party saw nothing before resolve
        outcomes = await batch.resolve_all([ToolCall("search", {"q": "merger plans"}, id="c0")])
    assert [o.value for o in outcomes] == ["MERGER PLANS"] and seen == ["merger plans"]


def _chunk(slot: int, *, name: str | None = None, args: str = "", finish: str | None = None) -> dict:
    fn = {"arguments": args, **({"name": name} if name else {})}
    delta = {"tool_calls": [{"index": slot, "id": f"c{slot}" if name else None, "function": fn}]}
    return {"choices": [{"index": 0, "delta": delta if finish is None else {}, "finish_reason": finish}]}


async def test_a_fragment_for_an_earlier_call_breaks_the_stream_and_nothing_more_runs_early() -> None:
    from spectool._eager import EagerBatch, StreamWatcher
    from spectool._wire import ChatAccumulator

    world = KeyValueWorld()
    async with spectool.Speculator(world.toolbox) as spec:
        batch = EagerBatch(spec, "all")
        watch, acc = StreamWatcher(batch), ChatAccumulator()
        stream = [
            _chunk(0, name="put", args='{"key": "a", "value": "z"}'),
            _chunk(1, name="get", args='{"key": "a"}'),
            _chunk(0, args=', "value": "w"'),  # a fragment for call 0 after call 1 began
            _chunk(0, finish="tool_calls"),
        ]
        for c in stream:
            acc.add(c)
            watch.see_chat(acc.calls, c)
        watch.end(acc.calls)
        await anyio.sleep(0.01)
        assert batch.broken and world.log.count("put") == 0 and world.data["a"] == "1"
        assert 1 not in batch.started  # the read after the broken fragment did not start either
    assert world.log.count("get") == 0


async def test_an_abandoned_responses_eager_read_is_never_served_after_a_write() -> None:
    """Calls without ids (a hand-built message) match no eager batch by name and arguments."""
    from spectool import ToolCall
    from spectool._eager import EagerBatch

    world = KeyValueWorld()
    async with spectool.Speculator(world.toolbox) as spec:
        abandoned = EagerBatch(spec, "speculable")
        abandoned.offer(0, ToolCall("get", {"key": "a"}), final=True)  # a stream without call ids
        await until(lambda: world.log.count("get") == 1)
        await spec.resolve(ToolCall("put", {"key": "a", "value": "new"}))
        assert not abandoned.matches([ToolCall("get", {"key": "a"})])
        identified = EagerBatch(spec, "speculable")
        identified.offer(0, ToolCall("get", {"key": "a"}, id="c9"), final=True)
        assert identified.matches([ToolCall("get", {"key": "a"}, id="c9")])  # negative control


async def test_an_eager_read_is_resolved_again_when_its_scope_changed_before_resolve() -> None:
    from spectool import ToolCall
    from spectool._eager import EagerBatch

    world = KeyValueWorld()
    async with spectool.Speculator(world.toolbox) as spec:
        batch = EagerBatch(spec, "speculable")
        batch.offer(0, ToolCall("get", {"key": "a"}, id="c0"), final=True)
        await until(lambda: world.log.count("get") == 1)  # the eager read finished
        world.data["a"] = "changed"
        spec.invalidate("kv")  # a write the session ran outside this response
        outcomes = await batch.resolve_all([ToolCall("get", {"key": "a"}, id="c0")])
        assert [o.value for o in outcomes] == ["changed"] and world.log.count("get") == 2
        same = EagerBatch(spec, "speculable")  # negative control: no write, the eager run is used
        same.offer(0, ToolCall("get", {"key": "b"}, id="c1"), final=True)
        await anyio.sleep(0.01)
        outcomes = await same.resolve_all([ToolCall("get", {"key": "b"}, id="c1")])
        assert [o.value for o in outcomes] == ["2"] and world.log.count("get") == 3
