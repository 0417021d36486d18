"""Properties of whole agent runs (issue 18): random read/write scripts, parallel calls
included, under random hostile drafters, in client mode and in engine mode.

For every script: the transcript and the final world equal those of a run without speculation,
the run returns (no drafter behaviour abandons it), and in engine mode no read_only output
reaches a response created after a write in its scope (checked on every post the engine got).

Drafter behaviours, drawn per turn: right (the script's next calls), wrong (near misses),
mutate (edits its request in place), cancel (raises CancelledError), raise, slow (past the
draft timeout), garbage (non-calls, non-JSON arguments), huge (hundreds of proposals).
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import anyio.lowlevel
from hypothesis import given
from hypothesis import strategies as st

import spectool
from spectool import ToolCall
from spectool.testing import ScriptedModel, call, openai_client, say
from tests.core.helpers import kv_tools
from tests.engine_fake import RecordingEngine

KEYS, VALUES = ["a", "b", "c"], ["1", "2", "x"]

reads = st.builds(lambda k: call("get", key=k), st.sampled_from(KEYS))
writes = st.builds(lambda k, v: call("put", key=k, value=v), st.sampled_from(KEYS), st.sampled_from(VALUES))
pures = st.builds(lambda t: call("upper", text=t), st.sampled_from(VALUES))
turns = st.lists(st.one_of(reads, writes, pures), min_size=1, max_size=3)  # >1: parallel calls
scripts = st.lists(turns, min_size=1, max_size=4)
BEHAVIOURS = ["right", "wrong", "mutate", "cancel", "raise", "slow", "garbage", "huge"]


class Hostile:
    """Per turn, one behaviour from ``plan`` (cycled); right/wrong guesses come from the model's
    own script (an oracle, used here only to make hits likely, never as a figure)."""

    def __init__(self, model: ScriptedModel, plan: list[str]) -> None:
        self.model, self.plan, self.n = model, plan, 0

    async def propose(self, request):
        kind = self.plan[self.n % len(self.plan)]
        self.n += 1
        truth = self.model.next_calls(list(request.messages))
        if kind == "mutate":
            request.messages.clear()
            for t in request.tools:
                t["function"]["parameters"] = {"type": "object", "properties": {}}
            return truth
        if kind == "cancel":
            raise asyncio.CancelledError()
        if kind == "raise":
            raise RuntimeError("drafter down")
        if kind == "slow":
            await anyio.sleep(5)
        if kind == "garbage":
            return [
                None,
                "get(a)",
                {"name": "get", "arguments": {"key": ("a",)}},
                ToolCall("get", {1: "a"}),
                ToolCall("put", {"key": "a", "value": "evil"}),
            ]
        if kind == "huge":
            return [ToolCall("get", {"key": k}) for k in KEYS] * 200
        if kind == "wrong":
            return [ToolCall("get", {"key": k}) for k in KEYS] + [ToolCall("upper", {"text": "zz"})]
        return truth


async def run(script: list, plan: list[str] | None, mode: str) -> tuple[list, dict, RecordingEngine]:
    world = {"a": "0"}
    model = ScriptedModel([*script, say("done")])
    engine = RecordingEngine(model, state=lambda: dict(world))
    drafter = Hostile(model, plan) if plan is not None else None
    options: dict[str, Any] = {"mode": "engine"} if mode == "engine" else {}
    async with spectool.speculative(
        openai_client(engine), kv_tools(world), drafter, samples=2, draft_timeout=0.05, **options
    ) as agent:
        with anyio.fail_after(20):
            result = await spectool.run_agent(
                agent, model="m", messages="go", max_turns=len(script) + 2, stream=mode == "engine"
            )
    assert result.stop_reason == "answer"
    return result.transcript, world, engine


@given(
    scripts,
    st.lists(st.sampled_from(BEHAVIOURS), min_size=1, max_size=4),
    st.sampled_from(["client", "engine"]),
)
def test_random_scripts_under_hostile_drafters_are_lossless(script, plan, mode) -> None:
    async def go() -> None:
        reference, ref_world, _ = await run(script, None, mode)
        transcript, world, engine = await run(script, plan, mode)
        assert transcript == reference
        assert world == ref_world
        for post in engine.posts:  # engine mode: never a read from before a write
            if post.item["name"] == "get":
                assert post.item.get("effect") == "read_only"
                assert post.item["output"] == post.state_at_creation.get(post.item["params"]["key"], ""), post

    anyio.run(go)
