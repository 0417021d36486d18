"""Issue 18, client side: each numbered failure as a test that failed before the fix.

1 engine mode posted a read to a response created after a write; 2 equal keys for different
validated arguments; 3 drafters trusted (non-JSON arguments run, requests edited in place);
4 a drafter or tool raising CancelledError abandoned the run. Plus the external declaration.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

import spectool
from spectool import ToolCache, ToolCall, ToolSpec
from spectool.testing import ScriptedModel, asgi_http_client, call, openai_client, say
from tests.core.helpers import kv_tools, until
from tests.engine_fake import RecordingEngine

pytestmark = pytest.mark.anyio


class Always:
    """A drafter that proposes the same calls every turn (a plausible, wrong-at-times guess)."""

    def __init__(self, *calls: ToolCall) -> None:
        self.calls = list(calls)

    async def propose(self, request):
        return list(self.calls)


async def engine_run(script: list, drafter: Always, **run_options: Any) -> tuple[Any, RecordingEngine]:
    """``script`` on a recording engine in engine mode, over the store ``{"x": "old"}``: the run's
    result and the engine, whose posts say what it could splice into which response."""
    store = {"x": "old"}
    engine = RecordingEngine(ScriptedModel(script), state=lambda: dict(store))
    # http_client: only for the pre-fix client, which posted with its own HTTP client and could
    # not reach an in-process app otherwise (the fixed one posts through the SDK client).
    async with spectool.speculative(
        openai_client(engine),
        kv_tools(store),
        drafter,
        mode="engine",
        samples=1,
        engine_options={"http_client": asgi_http_client(engine)},
    ) as agent:
        result = await spectool.run_agent(agent, model="m", messages="go", stream=True, **run_options)
    return result, engine


# -- 1: engine mode never serves a read across a write ----------------------------------------


async def test_engine_mode_never_posts_a_read_to_a_response_created_after_a_write() -> None:
    script = [call("put", key="x", value="new"), call("get", key="x"), say("done")]
    drafter = Always(ToolCall("get", {"key": "x"}), ToolCall("upper", {"text": "a"}))
    result, engine = await engine_run(script, drafter, max_turns=5)
    assert result.stop_reason == "answer"
    reads = [p for p in engine.posts if p.item["name"] == "get"]
    assert reads, "the drafted read was never posted"
    for p in reads:  # what the engine could splice equals the key when that response began
        assert p.item["output"] == p.state_at_creation["x"], (p.response_id, p.item)
    assert {p.item.get("effect") for p in reads} == {"read_only"}
    assert result.stats["stale_discards"] >= 1  # turn 1's "old" was withheld and counted
    pure = [p for p in engine.posts if p.item["name"] == "upper"]
    assert {p.item["effect"] for p in pure} == {"pure"}
    assert len({p.response_id for p in pure}) >= 2  # a pure output may serve every response


async def test_engine_client_posts_through_the_wrapped_sdk_client() -> None:
    """No private HTTP client: the post goes through the SDK client's own transport (here an
    in-process ASGI one that an httpx.AsyncClient of its own could not reach)."""
    store: dict[str, str] = {}
    model = ScriptedModel([call("upper", text="a"), say("A")])
    engine = RecordingEngine(model, state=lambda: dict(store))
    drafter = Always(ToolCall("upper", {"text": "a"}))
    async with spectool.speculative(
        openai_client(engine), kv_tools(store), drafter, mode="engine", samples=1
    ) as agent:
        await spectool.run_agent(agent, model="m", messages="go", stream=True)
        counters = dict(agent.sink.counters)
    assert counters["cached"] >= 1 and counters["failed"] == 0
    assert engine.posts and engine.posts[0].item["params"] == {"text": "a"}


# -- 2: equal keys mean equal validated arguments ---------------------------------------------


@spectool.tool(effect="pure")
def show(x: int | float) -> str:  # noqa: PYI041 - the union is the point: pydantic keeps 5 and 5.0 apart
    """Show a number."""
    return repr(x)


@spectool.tool(effect="pure")
def count(ids: list[int]) -> int:
    """Count ids."""
    return len(ids)


@spectool.tool(effect="pure")
def echo(obj: dict[str, Any]) -> str:
    """Echo an object."""
    return repr(obj)


async def served(tool: Any, drafted: dict, called: str) -> tuple[Any, bool]:
    """(what the main path got for ``called`` after ``drafted`` was speculated, was it a hit)."""
    async with ToolCache([tool]) as cache:
        if cache.speculate(ToolCall(tool.__name__, drafted)):  # refusing it is one right answer
            await until(lambda: cache.unused_finished() == 1)  # finished (a sync tool: in a thread)
        outcome = await cache.resolve(ToolCall(tool.__name__, spectool.keys.parse_arguments(called)))
        return outcome, cache.counters.hits == 1


@pytest.mark.parametrize(
    "tool,drafted,called",
    [
        (show, {"x": 5}, '{"x": 5.0}'),
        (count, {"ids": [10**20]}, '{"ids": [1e20]}'),
        (echo, {"obj": {"v": float("nan")}}, '{"obj": {"v": "nan"}}'),
    ],
)
async def test_a_hit_means_the_tool_would_have_received_equal_arguments(tool, drafted, called) -> None:
    outcome, hit = await served(tool, drafted, called)
    assert not hit
    direct = await tool_spec_run(tool, called)
    assert (outcome.error is None) == (direct.error is None)
    if outcome.error is None:
        assert outcome.value == direct.value


def test_nan_and_the_string_nan_never_share_a_key() -> None:
    spec = spectool.tool_spec(echo)
    assert spec.key({"obj": {"v": float("nan")}}) != spec.key({"obj": {"v": "nan"}})
    assert spec.key({"obj": {"v": float("inf")}}) != spec.key({"obj": {"v": "inf"}})


async def tool_spec_run(tool: Any, called: str):
    async with ToolCache([tool]) as cache:
        return await cache.resolve(ToolCall(tool.__name__, spectool.keys.parse_arguments(called)))


async def test_equal_validated_arguments_still_hit() -> None:
    outcome, hit = await served(show, {"x": 5}, '{"x": 5}')
    assert hit and outcome.value == "5"
    outcome, hit = await served(count, {"ids": [1, 2]}, '{"ids": [1, 2]}')
    assert hit and outcome.value == 2


# -- 3: drafters are not trusted ----------------------------------------------------------------


@spectool.tool(effect="pure")
def first(items: list[int], table: dict[str, str]) -> str:
    """Describe the arguments."""
    return f"{type(items).__name__}:{sorted(table)}"


async def test_non_json_drafted_arguments_are_never_run_or_served() -> None:
    ran: list = []

    @spectool.tool(effect="pure")
    def probe(v: Any) -> str:
        """Record what arrives."""
        ran.append(v)
        return type(v).__name__

    async with ToolCache([probe]) as cache:
        assert not cache.speculate(ToolCall("probe", {"v": (1, 2)}))  # a tuple: no model sends one
        assert not cache.speculate(ToolCall("probe", {"v": {1: "x"}}))  # an int key
        assert not cache.speculate(ToolCall("probe", {"v": float("nan")}))
        assert not cache.speculate(ToolCall("probe", {"v": object()}))
        await anyio.sleep(0.02)
        assert ran == []
        outcome = await cache.resolve(ToolCall("probe", {"v": [1, 2]}))
    assert outcome.value == "list" and cache.counters.hits == 0


class Vandal:
    """A drafter that edits its request in place: messages, tool schemas, everything."""

    async def propose(self, request):
        request.messages[0]["content"] = "HACKED"
        request.messages.append({"role": "user", "content": "injected"})
        for t in request.tools:
            t["function"]["parameters"]["properties"].clear()
            t["function"]["name"] = "renamed"
        return []


async def test_a_drafter_editing_its_request_changes_nothing_outside() -> None:
    store = {"x": "old"}
    tools = kv_tools(store)
    schemas_before = [spectool.tool_spec(t).openai_chat() for t in tools]
    model = ScriptedModel([call("get", key="x"), say("done")])
    messages = [{"role": "user", "content": "go"}]
    async with spectool.speculative(openai_client(model), tools, Vandal(), samples=1) as agent:
        result = await spectool.run_agent(agent, model="m", messages=messages)
    assert messages == [{"role": "user", "content": "go"}]
    assert result.transcript[0] == {"role": "user", "content": "go"}
    assert all(r["messages"][0]["content"] == "go" for r in model.requests)
    assert all([t["function"]["name"] for t in r["tools"]] == ["get", "put", "upper"] for r in model.requests)
    assert [spectool.tool_spec(t).openai_chat() for t in tools] == schemas_before
    assert spectool.tool_spec(tools[0]).parameters["properties"]  # the spec itself intact


# -- 4: foreign cancellation is a failure, not an exit -----------------------------------------


class CancellingDrafter:
    async def propose(self, request):
        raise asyncio.CancelledError()


async def test_a_drafter_raising_cancelled_error_does_not_abandon_the_run() -> None:
    store = {"x": "old"}
    model = ScriptedModel([call("get", key="x"), say("done")])
    async with spectool.speculative(
        openai_client(model), kv_tools(store), CancellingDrafter(), samples=1
    ) as agent:
        with anyio.fail_after(10):
            result = await spectool.run_agent(agent, model="m", messages="go")
    assert result.stop_reason == "answer" and result.final_text == "done"
    assert result.stats["draft_errors"] == result.turns == 2  # one per drafted turn


async def test_a_speculative_tool_raising_cancelled_error_is_its_error() -> None:
    runs: list[str] = []

    @spectool.tool(effect="read_only")
    async def flaky(key: str) -> str:
        """Fails by raising CancelledError once."""
        runs.append(key)
        if len(runs) == 1:
            raise asyncio.CancelledError()
        return "v"

    model = ScriptedModel([call("flaky", key="k"), say("done")])
    async with spectool.speculative(
        openai_client(model), [flaky], Always(ToolCall("flaky", {"key": "k"})), samples=1
    ) as agent:
        with anyio.fail_after(10):
            result = await spectool.run_agent(agent, model="m", messages="go")
    assert result.stop_reason == "answer"
    tool_msgs = [m for m in result.transcript if m.get("role") == "tool"]
    # The speculative run's failure is reported as the tool's error (as if it ran then).
    assert len(tool_msgs) == 1 and "CancelledError" in tool_msgs[0]["content"]


async def test_a_real_cancellation_still_cancels() -> None:
    @spectool.tool(effect="pure")
    async def slow(n: int) -> int:
        """Sleep."""
        await anyio.sleep(30)
        return n

    with anyio.move_on_after(0.2) as scope:
        async with ToolCache([slow]) as cache:
            await cache.resolve(ToolCall("slow", {"n": 1}))
    assert scope.cancelled_caught


# -- the external declaration ------------------------------------------------------------------


async def test_external_tools_run_early_only_when_the_session_opts_in() -> None:
    seen: list[str] = []

    @spectool.tool(effect="read_only", external=True)
    async def web_search(query: str) -> str:
        """Search the web (a third party sees the query)."""
        seen.append(query)
        return f"results for {query}"

    assert spectool.tool_spec(web_search).external
    async with ToolCache([web_search]) as cache:
        assert not cache.speculate(ToolCall("web_search", {"query": "private plans"}))
        await anyio.sleep(0.02)
        assert seen == []  # nobody outside heard of a call the model never made
        outcome = await cache.resolve(ToolCall("web_search", {"query": "q"}))
        assert outcome.value == "results for q" and seen == ["q"]
    async with ToolCache([web_search], speculate_external=True) as cache:
        assert cache.speculate(ToolCall("web_search", {"query": "q2"}))
        outcome = await cache.resolve(ToolCall("web_search", {"query": "q2"}))
        assert outcome.value == "results for q2" and cache.counters.joins + cache.counters.hits == 1


def test_external_is_a_keyword_of_the_decorator_and_of_from_schema() -> None:
    spec = ToolSpec.from_schema({"name": "s", "parameters": {"type": "object"}}, effect="pure", external=True)
    assert spec.external and spec.speculable
    assert not ToolSpec.from_schema({"name": "s", "parameters": {"type": "object"}}, effect="pure").external

    @spectool.tool(effect="read_only", external=True)
    async def lookup(q: str) -> str:
        return q

    @spectool.tool(effect="read_only")
    async def local(q: str) -> str:
        return q

    assert spectool.tool_spec(lookup).external and not spectool.tool_spec(local).external

    async def admitted() -> list[bool]:  # the keyword decides what a session runs early
        async with ToolCache([lookup, local]) as cache:
            return [cache.speculate(ToolCall(n, {"q": "x"})) for n in ("lookup", "local")]

    assert anyio.run(admitted) == [False, True]


# -- anyio throughout: engine mode on trio ------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_engine_mode_runs_on_trio(anyio_backend) -> None:
    """The engine client used to replay through asyncio's loop, which does not exist on trio."""
    script = [call("upper", text="a"), call("upper", text="b"), say("done")]
    result, engine = await engine_run(script, Always(ToolCall("upper", {"text": "a"})))
    assert result.stop_reason == "answer"
    # upper("a") finished in turn 1 and, being pure, was replayed to turn 2's response too.
    assert len({p.response_id for p in engine.posts if p.item["params"] == {"text": "a"}}) >= 2


async def test_a_session_opts_in_to_external_speculation() -> None:
    seen: list[str] = []

    @spectool.tool(effect="pure", external=True)
    async def lookup(q: str) -> str:
        """Ask a third party."""
        seen.append(q)
        return q * 2

    model = ScriptedModel([call("lookup", q="a"), say("done")])
    for opt_in in (False, True):
        seen.clear()
        async with spectool.speculative(
            openai_client(model),
            [lookup],
            Always(ToolCall("lookup", {"q": "zz"})),
            samples=1,
            speculate_external=opt_in,
        ) as agent:
            await spectool.run_agent(agent, model="m", messages="go")
        assert ("zz" in seen) is opt_in  # the wrong guess reached the third party only when allowed


async def test_a_server_without_the_effect_field_still_gets_posts() -> None:
    """Today's engine refuses unknown item fields (422 naming them): the client then posts
    without ``effect`` instead of losing engine mode. Fake: the refusal of an older server."""
    import json as _json

    from spectool._engine_client import EngineClient

    bodies: list = []

    async def old_server(scope, receive, send):
        body = _json.loads((await receive())["body"])
        bodies.append(body)
        unknown = sorted(set().union(*body) - {"name", "params", "output", "keep_alive"})
        status, payload = (
            (422, {"detail": f"item 0: unknown fields {unknown}"})
            if unknown
            else (200, {"cached": len(body)})
        )
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": _json.dumps(payload).encode()})

    @spectool.tool(effect="pure")
    def f(a: int) -> int:
        """Identity."""
        return a

    sink = EngineClient("http://old/v1", client=openai_client(old_server))
    async with ToolCache([f], on_complete=sink.on_tool_output) as cache:
        sink.bind(cache)
        sink.on_response_id("chatcmpl-1")
        cache.speculate(ToolCall("f", {"a": 1}))
        await until(lambda: len(bodies) == 2)  # refused with the field, then posted without it
    await sink.aclose()
    assert [("effect" in b[0]) for b in bodies] == [True, False]
    assert sink.counters["cached"] == 1 and sink.send_effect is False


async def test_engine_client_withholds_used_and_cross_epoch_reads_but_replays_pure() -> None:
    """The sink's rules one by one, on a bound cache: a read the client already used is not
    posted again; a read from before a write never reaches a response created after it; a pure
    output is replayed to each new response."""
    from spectool._engine_client import EngineClient

    store = {"x": "old"}
    model = ScriptedModel([say("unused")])
    engine = RecordingEngine(model, state=lambda: dict(store))
    get, put, upper = kv_tools(store)
    sink = EngineClient("http://scripted.local/v1", client=openai_client(engine))

    def posted(rid: str) -> int:
        return sum(p.response_id == rid for p in engine.posts)

    async with ToolCache([get, put, upper], on_complete=sink.on_tool_output) as cache:
        sink.bind(cache)
        engine.created["chatcmpl-r1"] = dict(store)
        sink.on_response_id("chatcmpl-r1")
        cache.speculate(ToolCall("get", {"key": "x"}))
        cache.speculate(ToolCall("upper", {"text": "a"}))
        await until(lambda: posted("chatcmpl-r1") == 2)  # both finished and posted to r1
        await cache.resolve(ToolCall("put", {"key": "x", "value": "new"}))  # epoch moves
        engine.created["chatcmpl-r2"] = dict(store)
        sink.on_response_id("chatcmpl-r2")  # replay: upper yes, the old read no
        await until(lambda: posted("chatcmpl-r2") == 1)  # one post holds the whole replay
        cache.speculate(ToolCall("get", {"key": "x"}))  # a fresh read, posted to r2
        await until(lambda: posted("chatcmpl-r2") == 2)
        assert (await cache.resolve(ToolCall("get", {"key": "x"}))).value == "new"  # used
        sink.on_response_id("chatcmpl-r3")  # the used read is not replayed
        await until(lambda: posted("chatcmpl-r3") >= 1)
    await sink.aclose()
    by_rid = {}
    for p in engine.posts:
        by_rid.setdefault(p.response_id, []).append((p.item["name"], p.item["output"]))
    assert sorted(by_rid["chatcmpl-r1"]) == [("get", "old"), ("upper", "A")]
    assert sorted(by_rid["chatcmpl-r2"]) == [("get", "new"), ("upper", "A")]
    assert by_rid["chatcmpl-r3"] == [("upper", "A")]
    assert cache.counters.stale_discards == 1 and sink.counters["withheld"] >= 1
