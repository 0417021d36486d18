"""The picture of a turn: TimelineRecorder on a real (offline) agent run with and without
speculation, and draw_timeline writing the PNG."""

from __future__ import annotations

from pathlib import Path

import pytest

import spectool
from spectool.testing import KeyValueWorld, ScriptedDrafter, ScriptedModel, call, openai_client, say
from spectool_bench import TimelineRecorder, draw_timeline

SCRIPT = [
    [call("get", key="a"), call("get", key="b")],
    call("put", key="a", value="3"),
    call("get", key="a"),
    say("done"),
]


async def record(drafter_on: bool):
    model = ScriptedModel(SCRIPT, first_token_latency=0.1)
    world = KeyValueWorld(latency=0.1)
    rec = TimelineRecorder()
    with rec.observing():
        drafter = ScriptedDrafter(model) if drafter_on else None
        async with spectool.speculative(openai_client(model), world.toolbox, drafter, hooks=[rec]) as agent:
            result = await spectool.run_agent(agent, model="scripted", messages="go")
    return rec.timeline(), result


@pytest.mark.anyio
async def test_timelines_and_picture(tmp_path: Path) -> None:
    plain, plain_result = await record(False)
    fast, fast_result = await record(True)
    assert fast_result.transcript_json() == plain_result.transcript_json()
    assert len(plain.lane("model")) == len(fast.lane("model")) == plain_result.turns == 4
    assert plain.lane("draft") == [] and plain.lane("tool (early)") == [] and plain.served == []
    assert [s.label for s in plain.lane("tool (main path)")] == ["get", "get", "put", "get"]
    # with speculation the reads ran early and were served; the write ran on the main path only
    assert {s.label for s in fast.lane("tool (early)")} == {"get"}
    assert [s.label for s in fast.lane("tool (main path)")] == ["put"]
    assert len(fast.served) == 3 and len(fast.lane("draft")) == 4
    assert all(0 <= s.start <= s.end for s in fast.spans)
    out = draw_timeline(plain, fast, tmp_path / "turn.png", title="offline agent")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
