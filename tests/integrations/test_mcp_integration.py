"""spectool-mcp against a real MCP server (FastMCP over stdio, started by the tests): the
annotation mapping for every combination of hints, calls and errors through the session,
overrides, speculation with identical transcripts, and tools loaded by langchain-mcp-adapters."""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import ToolAnnotations
from spectool_mcp import effect_from_annotations, mcp_tools

import spectool
from spectool import ConfigError, Effect, ToolCall, ToolError
from spectool.testing import ScriptedDrafter, ScriptedModel, call, openai_client, say

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
VALUES = {"n": None, "f": False, "t": True}
CODES = ["".join(c) for c in itertools.product("nft", repeat=4)]


def expected(code: str) -> tuple[Effect, bool]:
    """The rule, stated independently: read-only needs readOnly=True and not destructive; it
    reaches outside unless openWorld is explicitly False (the MCP default is true)."""
    ro, de, _idem, ow = code
    if ro != "t" or de == "t":
        return Effect.MUTATING, False
    return Effect.READ_ONLY, ow != "f"


def test_mapping_covers_every_combination() -> None:
    assert len(CODES) == 81
    for code in CODES:
        hints = {h: VALUES[c] for h, c in zip(HINTS, code) if VALUES[c] is not None}
        mapped = effect_from_annotations(ToolAnnotations(**hints))
        assert (mapped.effect, mapped.external) == expected(code), code
        # the adapters' metadata dict reads the same as the mcp type
        assert effect_from_annotations(hints) == mapped
        assert mapped.early() is (code[0] == "t" and code[1] != "t" and code[3] == "f")
        assert mapped.early(allow_external=True) is (code[0] == "t" and code[1] != "t")
    assert effect_from_annotations(None).effect is Effect.MUTATING
    assert effect_from_annotations(ToolAnnotations(title="x")).effect is Effect.MUTATING
    assert effect_from_annotations({}).effect is Effect.MUTATING


@asynccontextmanager
async def fixture_session(log_path: Path | None = None):
    env = dict(os.environ)
    if log_path is not None:
        env["SPECTOOL_MCP_CALL_LOG"] = str(log_path)
    params = StdioServerParameters(
        command=sys.executable, args=[str(HERE / "mcp_fixture_server.py")], env=env
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest.mark.anyio
async def test_real_server_tools_get_the_mapped_effects(tmp_path: Path) -> None:
    async with fixture_session() as session:
        specs = {s.name: s for s in await mcp_tools(session, scope="fx")}
        assert len(specs) == 81 + 4
        for code in CODES:
            effect, external = expected(code)
            early = effect.speculable and not external
            spec = specs["h_" + code]
            # runs early = a speculable effect and not reaching outside (the core's `external`)
            assert (spec.speculable and not spec.external) is early, code
            assert spec.scope == "fx"
        assert specs["plain"].effect is Effect.MUTATING
        assert specs["get"].effect is Effect.READ_ONLY and specs["put"].effect is Effect.MUTATING
        assert specs["get"].parameters["properties"]["key"]["type"] == "string"
        # opting in lets open-world reads run early; closed-world mutations still never do
        opened = {s.name: s for s in await mcp_tools(session, allow_external=True)}
        assert opened["h_tnnn"].speculable and opened["h_tnnt"].speculable
        assert not opened["h_tttt"].speculable and not opened["h_fnnf"].speculable


@pytest.mark.anyio
async def test_overrides_calls_and_errors() -> None:
    async with fixture_session() as session:
        specs = {
            s.name: s
            for s in await mcp_tools(
                session,
                overrides={
                    "plain": "pure",
                    "get": {"effect": "mutating"},
                    "h_tnnn": {"effect": "read_only", "ttl": 5.0},
                },
            )
        }
        assert specs["plain"].effect is Effect.PURE
        assert specs["get"].effect is Effect.MUTATING
        # an explicit effect override is the user's word: the open-world default no longer holds
        assert specs["h_tnnn"].speculable and specs["h_tnnn"].ttl == 5.0
        with pytest.raises(ConfigError, match="no_such"):
            await mcp_tools(session, overrides={"no_such": "pure"})
        with pytest.raises(ConfigError, match="effect must be one of"):
            await mcp_tools(session, overrides={"plain": "sometimes"})
        assert await specs["get"].invoke({"key": "a"}) == "1"
        assert await specs["plain"].invoke('{"x": "hi"}') == "plain:hi"
        with pytest.raises(ToolError, match="refused: no"):
            await specs["fail"].invoke({"reason": "no"})


SCRIPT = [
    [call("get", key="a"), call("h_tnnt", x="q")],
    [call("put", key="a", value="9"), call("get", key="a")],
    call("get", key="b"),
    say("done"),
]


async def _agent_run(drafter, model: ScriptedModel, log_path: Path, **options):
    async with fixture_session(log_path) as session:
        tools = await mcp_tools(session, scope="kv", **options)
        async with spectool.speculative(openai_client(model), tools, drafter, samples=2) as agent:
            result = await spectool.run_agent(agent, model="scripted", messages="go")
            await anyio.sleep(0.2)  # let any stray early run reach the server before we read the log
            return result


@pytest.mark.anyio
async def test_speculation_through_mcp_keeps_the_transcript(tmp_path: Path) -> None:
    model = ScriptedModel(SCRIPT, first_token_latency=0.2)
    plain = await _agent_run(None, model, tmp_path / "plain.log")
    fast = await _agent_run(ScriptedDrafter(model), model, tmp_path / "fast.log")
    assert fast.transcript_json() == plain.transcript_json()
    assert fast.stats["hits"] + fast.stats["joins"] >= 2
    plain_calls = (tmp_path / "plain.log").read_text().splitlines()
    fast_calls = (tmp_path / "fast.log").read_text().splitlines()
    # mutating and open-world tools reached the server exactly as often as without speculation
    for name in ("put", "h_tnnt"):
        assert [c for c in fast_calls if c.startswith(name)] == [c for c in plain_calls if c.startswith(name)]
    # the read after the write saw the write (an early read of 'a' was discarded, not served)
    tool_msgs = [m["content"] for m in fast.transcript if m.get("role") == "tool"]
    assert tool_msgs[:4] == ["1", "h_tnnt:q", "ok", "9"]


@pytest.mark.anyio
async def test_tools_the_user_confirms_never_run_early(tmp_path: Path) -> None:
    """``confirm=["get"]``: the client asks the user before each get, so no get reaches the
    server before the model asked for it (the control is the test above: get runs early)."""
    model = ScriptedModel(SCRIPT, first_token_latency=0.2)
    plain = await _agent_run(None, model, tmp_path / "plain.log")
    fast = await _agent_run(ScriptedDrafter(model), model, tmp_path / "fast.log", confirm=["get"])
    assert fast.transcript_json() == plain.transcript_json()
    assert fast.stats["hits"] + fast.stats["joins"] == 0
    plain_calls = (tmp_path / "plain.log").read_text().splitlines()
    fast_calls = (tmp_path / "fast.log").read_text().splitlines()
    assert fast_calls == plain_calls  # every call the server saw was one the model made
    async with fixture_session() as session:
        specs = {s.name: s for s in await mcp_tools(session, confirm=["get"])}
        assert specs["get"].gated and not specs["put"].gated
        with pytest.raises(ConfigError, match="confirm name tools .*no_such"):
            await mcp_tools(session, confirm=["no_such"])


@pytest.mark.anyio
async def test_langchain_mcp_adapters_tools_are_declared() -> None:
    if importlib.util.find_spec("langchain_mcp_adapters") is None:  # pragma: no cover
        pytest.fail("langchain-mcp-adapters is part of the dev environment")
    from langchain_mcp_adapters.tools import load_mcp_tools
    from spectool_mcp.langchain import declare_mcp_tools

    from langchain_spectool import effect_of

    async with fixture_session() as session:
        tools = {
            t.name: t
            for t in declare_mcp_tools(await load_mcp_tools(session), overrides={"plain": "read_only"})
        }
        for code in CODES:
            effect, external = expected(code)
            want = effect if not external else Effect.MUTATING
            assert effect_of(tools["h_" + code]) is want, code
        assert effect_of(tools["plain"]) is Effect.READ_ONLY
        assert effect_of(tools["get"]) is Effect.READ_ONLY
        out = await tools["get"].ainvoke({"key": "b"})
        assert "2" in str(out)
        from langchain_spectool._effects import to_tool_spec

        confirmed = declare_mcp_tools(await load_mcp_tools(session), confirm=["get"])
        assert [t.name for t in confirmed if to_tool_spec(t).gated] == ["get"]


def test_example_runs_offline_with_hits(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("mcp_agent", ROOT / "examples" / "mcp_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = anyio.run(module.main, 0.1)
    assert result["identical"]
    assert result["fast"].stats["hits"] + result["fast"].stats["joins"] >= 3
    assert "transcripts identical: True" in capsys.readouterr().out


def test_toolcall_keys_use_the_servers_schema() -> None:
    # a ToolSpec built from an MCP tool keys calls by its inputSchema like any other tool
    from mcp.types import Tool
    from spectool_mcp import mcp_tool_spec

    tool = Tool(
        name="get",
        inputSchema={"type": "object", "properties": {"key": {"type": "string"}}},
        annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
    )
    spec = mcp_tool_spec(None, tool)  # type: ignore[arg-type]  # never called: no session needed
    assert spec.key({"key": "a"}) == spec.key('{"key": "a"}')
    assert spec.key(ToolCall("get", {"key": "a"}).arguments) != spec.key({"key": "b"})


@pytest.mark.anyio
async def test_create_agent_with_adapters_tools_speculates(tmp_path: Path) -> None:
    """MCP tools loaded by langchain-mcp-adapters, declared, run by a create_agent agent with
    the middleware: read-only calls run early, the transcript is unchanged."""
    from langchain_mcp_adapters.tools import load_mcp_tools
    from spectool_mcp.langchain import declare_mcp_tools

    from langchain_spectool import SpeculativeToolMiddleware, create_agent
    from langchain_spectool.testing import ScriptedChatModel, reply, transcript
    from langchain_spectool.testing import call as lc_call

    script = [
        reply("", lc_call("get", {"key": "a"}, "c1")),
        reply("", lc_call("put", {"key": "a", "value": "7"}, "c2")),
        reply("", lc_call("get", {"key": "b"}, "c3")),
        reply("done"),
    ]

    async def run(drafter):
        async with fixture_session(tmp_path / "lc.log") as session:
            tools = declare_mcp_tools(await load_mcp_tools(session), scope="kv")
            model = ScriptedChatModel(script=script, latency=0.2)
            mw = SpeculativeToolMiddleware(drafter, draft_timeout=1.0) if drafter else None
            agent = create_agent(model, tools, middleware=[mw] if mw else [])
            out = await agent.ainvoke({"messages": [("user", "go")]})
            # the adapters give each content block a fresh random id on every run, speculation or not
            return [
                re.sub(r"'id': 'lc_[0-9a-f-]+'", "'id': _", repr(m)) for m in transcript(out["messages"])
            ], mw

    base, _ = await run(None)
    fast, mw = await run(ScriptedDrafter(ScriptedChatModel(script=script).next_calls))
    assert fast == base
    stats = mw.stats()
    assert stats["hits"] + stats["joins"] >= 2
