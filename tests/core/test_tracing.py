"""OpenTelemetry spans (spectool.instrument) with the SDK's in-memory exporter: a hit, a join,
a miss, a stale discard, a mutating run and a draft, each with the attributes a viewer filters on."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spectool
from spectool import Observer, Speculator, ToolCall
from spectool.testing import KeyValueWorld, ScriptedDrafter, fake_tool


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spectool.instrument(provider)
    yield exporter
    spectool.uninstrument()


def by_outcome(exporter, outcome):
    return [s for s in exporter.get_finished_spans() if s.attributes.get("spectool.outcome") == outcome]


@pytest.mark.anyio
async def test_hit_miss_stale_and_runs_have_their_attributes(spans) -> None:
    world = KeyValueWorld(latency=0.05)
    get_a = ToolCall("get", {"key": "a"}, id="call_1")
    drafts = iter([[ToolCall("get", {"key": "a"})], [ToolCall("get", {"key": "b"})]])
    drafter = ScriptedDrafter(lambda messages: next(drafts, []))
    async with Speculator(world.toolbox, drafter, samples=1) as spec:
        turn = spec.start_turn([{"role": "user", "content": "a?"}])
        await turn.wait()
        await anyio.sleep(0.1)  # the early read finishes: the main call is a hit
        [hit] = await spec.resolve_all([get_a])
        turn = spec.start_turn([{"role": "user", "content": "b?"}])
        await turn.wait()
        # a write lands before the model asks for b: the early read of b is stale
        await spec.resolve_all([ToolCall("put", {"key": "b", "value": "9"}, id="call_2")])
        [b] = await spec.resolve_all([ToolCall("get", {"key": "b"}, id="call_3")])
    assert hit.value == "1" and b.value == "9"

    [h] = by_outcome(spans, "hit")
    assert h.name == "spectool.resolve get"
    assert h.attributes["gen_ai.operation.name"] == "execute_tool"
    assert h.attributes["gen_ai.tool.name"] == "get"
    assert h.attributes["gen_ai.tool.call.id"] == "call_1"
    assert h.attributes["spectool.effect"] == "read_only"
    assert h.attributes["spectool.speculative"] is True
    assert h.attributes["spectool.time_saved_s"] > 0.03

    [stale] = by_outcome(spans, "stale")
    assert stale.name == "spectool.stale get"
    assert stale.attributes["gen_ai.tool.name"] == "get" and stale.attributes["spectool.speculative"] is True

    misses = by_outcome(spans, "miss")
    assert [m.attributes["gen_ai.tool.call.id"] for m in misses] == ["call_3"]
    assert misses[0].attributes["spectool.speculative"] is False

    runs = [s for s in spans.get_finished_spans() if s.name.startswith("execute_tool ")]
    kinds = sorted((s.attributes["gen_ai.tool.name"], s.attributes["spectool.speculative"]) for s in runs)
    # early reads of a and b, the write, and the re-read of b after the stale discard
    assert kinds == [("get", False), ("get", True), ("get", True), ("put", False)]
    put = next(s for s in runs if s.attributes["gen_ai.tool.name"] == "put")
    assert (
        put.attributes["spectool.effect"] == "mutating" and put.attributes["gen_ai.tool.call.id"] == "call_2"
    )
    assert all(s.end_time - s.start_time >= 40_000_000 for s in runs)  # 50 ms tools, in ns

    drafts_ = [s for s in spans.get_finished_spans() if s.name == "spectool.draft"]
    assert [d.attributes["spectool.draft.status"] for d in drafts_] == ["ok", "ok"]
    assert [d.attributes["spectool.draft.admitted"] for d in drafts_] == [1, 1]


@pytest.mark.anyio
async def test_join_and_tool_error(spans) -> None:
    world = KeyValueWorld(latency=0.2)
    broken = fake_tool("lookup", effect="pure", raises=ValueError("backend down"))
    drafter = ScriptedDrafter(lambda messages: [ToolCall("get", {"key": "a"})])
    async with Speculator([*world.toolbox, broken], drafter, samples=1) as spec:
        turn = spec.start_turn([{"role": "user", "content": "a?"}])
        await turn.wait()
        await spec.resolve_all([ToolCall("get", {"key": "a"}, id="c1")])  # still running: a join
        [bad] = await spec.resolve_all([ToolCall("lookup", {"q": 1}, id="c2")])
    assert isinstance(bad.error, ValueError)
    [j] = by_outcome(spans, "join")
    assert j.attributes["gen_ai.tool.call.id"] == "c1" and j.attributes["spectool.speculative"] is True
    [run] = [s for s in spans.get_finished_spans() if s.name == "execute_tool lookup"]
    assert run.attributes["error.type"] == "ValueError"
    assert run.status.status_code.name == "ERROR" and "backend down" in run.status.description
    assert run.attributes["spectool.effect"] == "pure" and run.attributes["spectool.speculative"] is False


@pytest.mark.anyio
async def test_a_failing_observer_never_breaks_the_agent() -> None:
    class Broken(Observer):
        def tool_started(self, call, spec, speculative):
            raise RuntimeError("observer down")

        def resolved(self, kind, call, spec, *, started, outcome=None):
            raise RuntimeError("observer down")

    obs = spectool.add_observer(Broken())
    try:
        world = KeyValueWorld()
        async with Speculator(world.toolbox) as spec:
            [out] = await spec.resolve_all([ToolCall("get", {"key": "a"})])
        assert out.value == "1"
    finally:
        spectool.remove_observer(obs)


def test_opentelemetry_is_not_imported_unless_instrumented() -> None:
    code = "import sys, spectool; print('opentelemetry' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
