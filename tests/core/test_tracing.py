"""OpenTelemetry spans (spectool.instrument) with the SDK's in-memory exporter: a hit, a join,
a miss, a stale discard, a mutating run and a draft, each with the attributes a viewer filters on."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spectool
from spectool import Observer, Speculator, ToolCall
from spectool.testing import KeyValueWorld, ScriptedDrafter, fake_tool
from tests.core.helpers import until


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _PROVIDERS[id(exporter)] = provider
    spectool.instrument(provider)
    yield exporter
    spectool.uninstrument()
    _PROVIDERS.pop(id(exporter), None)


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
        await until(lambda: spec.cache.unused_finished() == 1)  # the early read finished: a hit
        [hit] = await spec.resolve_all([get_a])
        turn = spec.start_turn([{"role": "user", "content": "b?"}])
        await turn.wait()
        # a write lands before the model asks for b: the early read of b is stale
        await spec.resolve_all([ToolCall("put", {"key": "b", "value": "9"}, id="call_2")])
        [b] = await spec.resolve_all([ToolCall("get", {"key": "b"}, id="call_3")])
    assert hit.value == "1" and b.value == "9"

    [h] = by_outcome(spans, "hit")
    assert h.name == "spectool.resolve get"
    # its own operation: GenAI dashboards count tool executions by operation, and this one ran once
    assert h.attributes["gen_ai.operation.name"] == "spectool.resolve"
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


# -- the GenAI conventions: one execute_tool per real run, links, content, drafts, metrics --


@pytest.fixture
def metrics():
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spectool.instrument(provider, meter_provider=MeterProvider(metric_readers=[reader]))
    yield exporter, reader
    spectool.uninstrument()


def sums(reader) -> dict[str, float]:
    out: dict[str, float] = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            assert sm.scope.name == "spectool" and sm.scope.version == spectool.__version__
            for m in sm.metrics:
                out[m.name] = sum(p.value for p in m.data.data_points)
    return out


async def _served_once_and_one_wasted() -> None:
    world = KeyValueWorld(latency=0.05)
    drafter = ScriptedDrafter(
        lambda messages: [ToolCall("get", {"key": "a"}, id="draft_1"), ToolCall("get", {"key": "b"})]
    )
    async with Speculator(world.toolbox, drafter, samples=1) as spec:
        turn = spec.start_turn([{"role": "user", "content": "a?"}])
        await turn.wait()
        await until(lambda: spec.cache.unused_finished() == 2)  # both early reads finished
        [out] = await spec.resolve_all([ToolCall("get", {"key": "a"}, id="call_1")])
        [miss] = await spec.resolve_all([ToolCall("get", {"key": "zz"}, id="call_2")])
    assert out.value == "1" and miss.value == ""  # b was read early and never asked for


@pytest.mark.anyio
async def test_a_served_call_is_exactly_one_execute_tool_span_linked_from_its_resolve(metrics) -> None:
    spans, reader = metrics
    await _served_once_and_one_wasted()
    finished = spans.get_finished_spans()
    runs_of_a = [
        s
        for s in finished
        if s.attributes.get("gen_ai.operation.name") == "execute_tool"
        and s.attributes.get("gen_ai.tool.call.id") in ("draft_1", "call_1")
    ]
    assert len(runs_of_a) == 1  # the early run; the resolve span is not an execution
    [run] = runs_of_a
    assert (
        run.attributes["gen_ai.tool.call.id"] == "draft_1" and run.attributes["spectool.speculative"] is True
    )
    assert run.attributes["gen_ai.tool.description"]  # the tool's docstring
    [hit] = by_outcome(spans, "hit")
    assert hit.attributes["gen_ai.tool.call.id"] == "call_1"
    assert [link.context.span_id for link in hit.links] == [run.context.span_id]
    # no content unless asked for
    assert not any("gen_ai.tool.call.arguments" in s.attributes for s in finished)
    executions = [s for s in finished if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert len(executions) == 3  # early a, early b (wasted), the miss run on the main path

    got = sums(reader)
    assert got["spectool.tool_cache.hits"] == 1 and got["spectool.tool_cache.misses"] == 1
    assert got["spectool.speculative.runs"] == 2 and got["spectool.speculative.wasted"] == 1
    assert got["spectool.time_saved"] > 0.03


@pytest.mark.anyio
async def test_arguments_and_results_only_when_content_capture_is_on(monkeypatch) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    spectool.instrument(provider)
    try:
        world = KeyValueWorld()
        async with Speculator(world.toolbox) as spec:
            await spec.resolve_all([ToolCall("get", {"key": "a"}, id="c1")])
    finally:
        spectool.uninstrument()
    [run] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool get"]
    assert run.attributes["gen_ai.tool.call.arguments"] == '{"key": "a"}'
    assert run.attributes["gen_ai.tool.call.result"] == '"1"'


@pytest.mark.anyio
async def test_a_model_drafter_call_is_a_genai_chat_span_under_the_draft(spans) -> None:
    from spectool.drafters import EndpointDrafter
    from spectool.testing import ScriptedModel, call, openai_client

    # the drafter's peer is the scripted OpenAI-compatible server (no model can run here)
    drafter_model = ScriptedModel([call("get", key="a")])
    drafter = EndpointDrafter(openai_client(drafter_model), model="tiny-drafter")
    assert drafter.client.chat.completions  # the SDK's resources loaded: decorated, not instrumented
    world = KeyValueWorld()
    async with Speculator(world.toolbox, drafter, samples=1) as spec:
        turn = spec.start_turn([{"role": "user", "content": "a?"}])
        await turn.wait()
    finished = spans.get_finished_spans()
    [draft] = [s for s in finished if s.name == "spectool.draft"]
    [chat] = [s for s in finished if s.name == "chat tiny-drafter"]
    assert draft.attributes["gen_ai.operation.name"] == "spectool.draft"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "tiny-drafter"
    assert chat.parent.span_id == draft.context.span_id


def test_opentelemetry_instrument_finds_the_instrumentor(tmp_path) -> None:
    """``opentelemetry-instrument`` loads instrumentors from installed distributions' entry
    points. The installed spectool's metadata may predate this checkout, so the test installs
    the entry point exactly as pyproject.toml declares it, as a distribution's metadata would."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["entry-points"]
    target = declared["opentelemetry_instrumentor"]["spectool"]
    dist = tmp_path / "spectool_instrumentor_probe-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: spectool-instrumentor-probe\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[opentelemetry_instrumentor]\nspectool = {target}\n")
    code = "import spectool\nfrom spectool._tracing import _installed\nprint(type(_installed).__name__)\n"
    env = {
        **__import__("os").environ,
        "PYTHONPATH": f"{tmp_path}:{root}:{__import__('os').environ.get('PYTHONPATH', '')}",
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    instrument = Path(sys.executable).with_name("opentelemetry-instrument")
    out = subprocess.run(
        [str(instrument), sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "_SpanObserver"
    from spectool._otel_instrumentor import SpectoolInstrumentor

    assert target == f"{SpectoolInstrumentor.__module__}:{SpectoolInstrumentor.__name__}"
    assert SpectoolInstrumentor().instrumentation_dependencies() == (f"spectool >= {spectool.__version__}",)


# -- composition: spans current, the OpenAI instrumentation, call ids, schema, the public name --


@pytest.mark.anyio
async def test_a_tools_own_spans_nest_under_its_execute_tool(spans) -> None:
    """A tool's database / HTTP spans (here: a span it opens on the global API) are children of
    its ``execute_tool``, on the main path and for an early run."""
    from opentelemetry import trace

    opened: list[str] = []

    async def lookup(key: str) -> str:
        with trace.get_tracer("app.db", tracer_provider=provider_of(spans)).start_as_current_span(
            f"db {key}"
        ):
            opened.append(key)
        return key

    tool = spectool.tool_spec(spectool.tool(effect="read_only")(lookup))
    drafter = ScriptedDrafter(lambda messages: [ToolCall("lookup", {"key": "early"})])
    async with Speculator([tool], drafter, samples=1) as spec:
        turn = spec.start_turn([{"role": "user", "content": "?"}])
        await turn.wait()
        await until(lambda: spec.cache.unused_finished() == 1)
        await spec.resolve_all([ToolCall("lookup", {"key": "main"}, id="c1")])
    assert sorted(opened) == ["early", "main"]
    finished = spans.get_finished_spans()
    for key in ("early", "main"):
        [db] = [s for s in finished if s.name == f"db {key}"]
        [run] = [
            s
            for s in finished
            if s.name == "execute_tool lookup" and s.attributes["spectool.speculative"] is (key == "early")
        ]
        assert db.parent is not None and db.parent.span_id == run.context.span_id, key


def provider_of(exporter):
    return _PROVIDERS[id(exporter)]


_PROVIDERS: dict[int, TracerProvider] = {}


@pytest.fixture
def openai_instrumented():
    """spectool and the official OpenAI instrumentation on one provider (in-memory)."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    spectool.instrument(provider)
    yield exporter
    spectool.uninstrument()
    OpenAIInstrumentor().uninstrument()


def _chats(exporter) -> list:
    return [s for s in exporter.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]


@pytest.mark.anyio
async def test_a_drafter_request_is_one_chat_operation_with_the_openai_instrumentation(
    openai_instrumented,
) -> None:
    from spectool.drafters import EndpointDrafter
    from spectool.testing import ScriptedModel, call, openai_client

    spans = openai_instrumented
    client = openai_client(ScriptedModel([call("get", key="a"), call("get", key="a")]))
    # control: the instrumentation is on and records a request made outside any draft
    await client.chat.completions.create(model="tiny-drafter", messages=[{"role": "user", "content": "a?"}])
    assert len(_chats(spans)) == 1
    spans.clear()
    world = KeyValueWorld()
    async with Speculator(world.toolbox, EndpointDrafter(client, model="tiny-drafter"), samples=1) as spec:
        turn = spec.start_turn([{"role": "user", "content": "a?"}])
        await turn.wait()
    [draft] = [s for s in spans.get_finished_spans() if s.name == "spectool.draft"]
    [chat] = _chats(spans)  # one drafter request, one chat operation (was two: ours and the SDK's)
    assert chat.parent.span_id == draft.context.span_id
    assert chat.attributes["gen_ai.request.model"] == "tiny-drafter"
    assert draft.attributes["spectool.draft.admitted"] == 1


@pytest.mark.anyio
async def test_early_runs_carry_a_call_id_and_every_span_a_schema_url(spans) -> None:
    world = KeyValueWorld()
    drafter = ScriptedDrafter(lambda messages: [ToolCall("get", {"key": "a"})])  # no id
    async with Speculator(world.toolbox, drafter, samples=1) as spec:
        turn = spec.start_turn([{"role": "user", "content": "a?"}])
        await turn.wait()
        await until(lambda: spec.cache.unused_finished() == 1)
    [early] = [s for s in spans.get_finished_spans() if s.name == "execute_tool get"]
    assert early.attributes["spectool.speculative"] is True
    assert early.attributes["gen_ai.tool.call.id"].startswith("spectool-draft-")
    for span in spans.get_finished_spans():
        assert span.instrumentation_scope.name == "spectool"
        assert span.instrumentation_scope.schema_url == "https://opentelemetry.io/schemas/1.37.0"


def test_the_instrumentor_has_a_public_name_and_imports_nothing_until_used() -> None:
    code = (
        "import sys, spectool\n"
        "print('opentelemetry' in sys.modules)\n"
        "from spectool import SpectoolInstrumentor\n"
        "print(SpectoolInstrumentor.__name__, 'SpectoolInstrumentor' in spectool.__all__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "SpectoolInstrumentor", "True"]


def test_opentelemetry_instrument_prints_spans_with_the_tracing_extra(tmp_path) -> None:
    """The documented command, console exporter: it prints spectool's spans. The tracing extra
    must bring opentelemetry-distro (the configurator that builds the providers)."""
    import os
    import re
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extra = [re.split(r"[<>=\[; ]", r, maxsplit=1)[0] for r in project["optional-dependencies"]["tracing"]]
    assert "opentelemetry-distro" in extra
    target = project["entry-points"]["opentelemetry_instrumentor"]["spectool"]
    dist = tmp_path / "spectool_instrumentor_probe-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: spectool-instrumentor-probe\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[opentelemetry_instrumentor]\nspectool = {target}\n")
    script = tmp_path / "agent.py"
    script.write_text(
        "import anyio, spectool\n"
        "from spectool.testing import KeyValueWorld\n"
        "async def main():\n"
        "    async with spectool.Speculator(KeyValueWorld().toolbox) as s:\n"
        "        await s.resolve_all([spectool.ToolCall('get', {'key': 'a'}, id='c1')])\n"
        "anyio.run(main)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}:{root}:{os.environ.get('PYTHONPATH', '')}",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "openai_v2",
    }
    env.pop("OTEL_TRACES_EXPORTER", None)
    instrument = Path(sys.executable).with_name("opentelemetry-instrument")
    out = subprocess.run(
        [str(instrument), "--traces_exporter", "console", sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert '"name": "execute_tool get"' in out.stdout
    assert '"name": "spectool.resolve get"' in out.stdout
