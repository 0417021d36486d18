"""Engine mode counts turns like client mode: a call the engine answered in place (O3) is a
turn, so ``max_turns=2`` allows two tool calls either way, and the transcripts are equal."""

from __future__ import annotations

import json

import pytest

import spectool
from spectool.testing import ScriptedModel, call, openai_client, read_body, say, send_json

pytestmark = pytest.mark.anyio

SCRIPT = [call("lookup", key="a"), call("lookup", key="b"), call("lookup", key="c"), say("done")]


def value_of(key: str) -> str:
    return f"value of {key}"


@spectool.tool(effect="pure")
def lookup(key: str) -> str:
    """Look a key up."""
    return value_of(key)


def _call(i: int, c) -> dict:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
    }


class InPlaceEngine:
    """A stand-in for spectool's engine answering one call per response in place (O3, as with
    ``max_rounds=1``): the scripted call of this turn comes back resolved, with the output the
    tool gives, and the next scripted step is the response's own message. Why a fake: the real
    engine needs a language model that would have to write exactly this script."""

    def __init__(self, script) -> None:
        self.script = script

    def respond(self, messages: list[dict]) -> dict:
        turn = sum(1 for m in messages if m["role"] == "assistant")
        first, then = self.script[turn], self.script[turn + 1]
        resolved = [{"content": None, "tool_call": _call(turn, first), "output": value_of(**first.arguments)}]
        message: dict = {"role": "assistant", "content": getattr(then, "text", None)}
        if not hasattr(then, "text"):
            message["tool_calls"] = [_call(turn + 1, then)]
        finish = "tool_calls" if "tool_calls" in message else "stop"
        choice = {
            "index": 0,
            "message": message,
            "finish_reason": finish,
            "spectool_resolved_calls": resolved,
        }
        return {
            "id": f"chatcmpl-{turn}",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [choice],
        }

    async def __call__(self, scope, receive, send) -> None:
        body = await read_body(receive)
        if scope["path"].rstrip("/").endswith("/chat/completions"):
            status, out = 200, self.respond(json.loads(body)["messages"])
        else:  # no /cache-tool-output here: the client stops posting
            status, out = 404, {"error": {"message": "not found"}}
        await send_json(send, status, out)


async def _transcript(client, max_turns: int = 2, **options):
    async with spectool.speculative(client, [lookup], **options) as agent:
        return await spectool.run_agent(agent, model="m", messages="go", max_turns=max_turns)


def _shape(transcript: list[dict]) -> list[tuple]:
    return [
        (m["role"], m.get("content"), tuple(c["function"]["arguments"] for c in m.get("tool_calls") or ()))
        for m in transcript
    ]


async def test_max_turns_bounds_tool_calls_in_engine_mode_as_in_client_mode() -> None:
    client_mode = await _transcript(openai_client(ScriptedModel(SCRIPT)))
    engine_mode = await _transcript(openai_client(InPlaceEngine(SCRIPT)), mode="engine")
    for result in (client_mode, engine_mode):
        assert result.stop_reason == "max_turns" and result.turns == 2
        assert sum(m["role"] == "tool" for m in result.transcript) == 2
    assert _shape(engine_mode.transcript) == _shape(client_mode.transcript)


async def test_an_engine_answer_is_kept_whole_when_turns_remain() -> None:
    client_mode = await _transcript(openai_client(ScriptedModel(SCRIPT)), max_turns=4)
    engine_mode = await _transcript(openai_client(InPlaceEngine(SCRIPT)), max_turns=4, mode="engine")
    for result in (client_mode, engine_mode):
        assert result.stop_reason == "answer" and result.turns == 4 and result.final_text == "done"
    assert _shape(engine_mode.transcript) == _shape(client_mode.transcript)
