"""The sync ``openai.OpenAI`` wrapper against the scripted server on a real localhost socket:
the same transcripts as without speculation (and as the async wrapper), hits, streams."""

from __future__ import annotations

import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletion

import spectool
from spectool import ConfigError, speculative_sync
from spectool.testing import KeyValueWorld, ScriptedDrafter, ScriptedModel, ServerThread, call, say

SCRIPT = [
    [call("get", key="a"), call("get", key="b")],
    call("put", key="a", value="5"),
    call("get", key="a"),
    say("a is 5 now"),
]


def run(url: str, model: ScriptedModel, drafter=None, **kw):
    world = KeyValueWorld(latency=0.1)
    with speculative_sync(OpenAI(base_url=url, api_key="x", max_retries=0), world.toolbox, drafter) as c:
        result = c.run_agent(model="scripted", messages="set a to 5", **kw)
    return result, world


@pytest.mark.parametrize("stream", [False, True])
def test_same_transcript_with_hits(stream: bool) -> None:
    model = ScriptedModel(SCRIPT, first_token_latency=0.15)
    with ServerThread(model) as url:
        plain, _ = run(url, model, stream=stream)
        fast, world = run(url, model, ScriptedDrafter(model), stream=stream)
    assert fast.transcript_json() == plain.transcript_json()
    assert fast.final_text == "a is 5 now"
    assert fast.stats["hits"] + fast.stats["joins"] >= 3
    assert world.log.count("put") == 1 and world.data["a"] == "5"


def test_create_returns_the_sdk_objects_and_streams() -> None:
    model = ScriptedModel(SCRIPT)
    world = KeyValueWorld()
    with (
        ServerThread(model) as url,
        speculative_sync(OpenAI(base_url=url, api_key="x", max_retries=0), world.toolbox) as c,
    ):
        messages = [{"role": "user", "content": "hi"}]
        completion = c.chat.completions.create(model="scripted", messages=messages)
        assert isinstance(completion, ChatCompletion)
        results = c.run_tool_calls(completion)
        assert [r["content"] for r in results] == ["1", "2"]
        stream = c.chat.completions.create(model="scripted", messages=messages, stream=True)
        chunks = list(stream)
        assert chunks and all(ch.object == "chat.completion.chunk" for ch in chunks)
        assert [r["content"] for r in c.run_tool_calls(stream)] == ["1", "2"]
        assert c.models is c.client.models  # everything else is the SDK's own


def test_engine_mode_is_refused_clearly() -> None:
    with pytest.raises(ConfigError, match="engine"):
        spectool.speculative_sync(object(), [], mode="engine")


def test_the_sync_client_keeps_auto_estimates_across_its_sessions() -> None:
    # every draft misses and a sample costs 10 s: warm estimates say "do not draft"
    script = [call("get", key="a"), call("get", key="b"), say("done")]
    model = ScriptedModel(script * 2)
    drafter = ScriptedDrafter(lambda messages: [call("get", key="zz")])
    options = {"samples": "auto", "sample_cost": 10.0}
    with ServerThread(model) as url:
        client = OpenAI(base_url=url, api_key="x", max_retries=0)
        chosen = []
        for _ in range(2):
            with speculative_sync(client, KeyValueWorld().toolbox, drafter, **options) as c:
                chosen.append(c.run_agent(model="scripted", messages="hi").stats["samples_chosen"])
    assert chosen == [[1, 0, 0], [0, 0, 0]]


def test_hooks_and_on_tool_error_reach_the_async_wrapper() -> None:
    seen: list[str] = []

    class Record(spectool.RequestHook):
        async def before_request(self, request: spectool.ModelRequest) -> None:
            seen.append(request.api)

    model = ScriptedModel(SCRIPT)
    client_of = lambda url: OpenAI(base_url=url, api_key="x", max_retries=0)  # noqa: E731
    with ServerThread(model) as url:
        with speculative_sync(client_of(url), [], hooks=[Record()], on_tool_error="raise") as c:
            c.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}])
            assert c.async_client.on_tool_error == "raise"
        assert seen == ["chat"]
        # control: the async wrapper's check refuses a bad value given to the sync one
        with pytest.raises(ConfigError, match="on_tool_error"):
            speculative_sync(client_of(url), [], on_tool_error="ignore")
