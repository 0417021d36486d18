"""``same`` means same: transcripts AND final world state against an independent run without
speculation; negative controls show each half can come out NO.

The main model is the replay of a τ² task's gold actions (the real peer here: it is what the
benchmark runs) on τ²'s real tools and database. The faults are planted on purpose, each a
stand-in for a bug ``same`` exists to catch: a cache subclass that hands a call another call's
output, and a toolbox that mis-declares τ²'s writes read-only so a drafted write runs early.
"""

from __future__ import annotations

import dataclasses

import anyio
import pytest
from openai import AsyncOpenAI

from spectool import Effect, Toolbox, ToolCache, ToolCall
from spectool.testing import ScriptedDrafter
from spectool_bench.harness._agents import AgentResult, Setup, run_agents
from spectool_bench.harness._metrics import run_row
from spectool_bench.harness._replay import ReplayModel, next_step_call
from spectool_bench.harness._sweep import CLOCK_FREE
from spectool_bench.tau2._tasks import load_domain
from spectool_bench.workloads._latency import Latency

META = {"config": "client", "agents": 1, "samples": 1, "drafter": "x", "tool_latency_mean": 0.0}


def _task():
    """An airline test task whose gold actions read (user, reservations) and then write once."""
    for t in load_domain("airline", "test").tasks:
        names = [c.name for c in t.ground_truth[0]]
        if len(names) >= 3 and names[0] == "get_user_details" and names[-1] == "send_certificate":
            if "send_certificate" not in names[:-1]:
                return t
    raise AssertionError("no such task in the wheel")


def _setup(task, **extra) -> Setup:
    replay = ReplayModel([task], CLOCK_FREE)
    return Setup(
        make_client=lambda: AsyncOpenAI(
            api_key="replay", base_url="http://replay.local/v1", http_client=replay.http_client()
        ),
        latency=Latency(0.05),  # a tool takes a moment: a drafted call can start before it is asked
        stream=True,
        request_options={"stream": True, "stream_options": {"include_usage": True}},
        **extra,
    )


def _oracle(task):
    """Drafts exactly the call the replay will make next (every read a hit)."""

    def next_calls(messages):
        nxt = next_step_call(task, messages)
        return [nxt] if isinstance(nxt, ToolCall) else []

    return lambda: ScriptedDrafter(next_calls)


def _run(task, **extra) -> list[AgentResult]:
    return anyio.run(run_agents, [[task]], _setup(task, **extra))


class WrongOutputCache(ToolCache):
    """Broken on purpose: answers each call with the output of the call resolved before it."""

    _last = None

    async def resolve(self, call):
        outcome = await super().resolve(call)
        last, self._last = self._last, outcome
        return last if last is not None else outcome


def _writes_declared_read_only(task, box: Toolbox) -> Toolbox:
    """Broken on purpose: τ²'s writes declared read_only, so the speculator runs them early."""
    return Toolbox(
        dataclasses.replace(s, effect=Effect.READ_ONLY) if s.effect is Effect.MUTATING else s for s in box
    )


@pytest.fixture(scope="module")
def runs():
    task = _task()
    return task, _run(task), _run(task)  # the reference (independent run) and the baseline


def test_speculation_that_hits_is_same_and_the_baseline_is_checked_against_the_reference(runs):
    task, truth, base = runs
    spec = _run(task, drafter=_oracle(task))
    assert spec[0].hits >= 3  # every read was served by a speculative run
    row = run_row(META, base, spec, truth=truth)
    assert row["same"] is True and row["same_world_state"] is True
    assert row["same_against"] == "independent run without speculation"
    baseline = run_row({**META, "config": "baseline"}, base, base, truth=truth)
    assert baseline["same"] is True and baseline["same_against"].startswith("independent")
    # without a reference run the baseline row is not compared with itself
    assert run_row({**META, "config": "baseline"}, base, base)["same"] == "ref"
    assert truth[0].world_states[0] is not None


def test_a_cache_serving_another_calls_output_flips_same_to_no(runs):
    task, truth, base = runs
    spec = _run(task, drafter=_oracle(task), cache=lambda box: WrongOutputCache(box))
    row = run_row(META, base, spec, truth=truth)
    assert row["same_transcripts"] is False and row["same"] is False


def test_a_write_that_runs_early_flips_same_to_no_through_the_world_state(runs):
    task, truth, base = runs
    reads = len(task.ground_truth[0]) - 1
    read = next(c for c in task.ground_truth[0] if c.name == "get_reservation_details")
    stray = ToolCall("cancel_reservation", {"reservation_id": read.arguments["reservation_id"]})

    def next_calls(messages):
        # before the model's last call (its write), draft a write it never makes
        done = sum(1 for m in messages if m.get("role") == "tool")
        return [stray] if done == reads else []

    # declared as τ² types it (WRITE → mutating), the drafted write never runs early
    safe = _run(task, drafter=lambda: ScriptedDrafter(next_calls))
    assert run_row(META, base, safe, truth=truth)["same"] is True
    spec = _run(task, drafter=lambda: ScriptedDrafter(next_calls), tools_hook=_writes_declared_read_only)
    row = run_row(META, base, spec, truth=truth)
    # the agent saw the same conversation (nothing after the write reads it) …
    assert row["same_transcripts"] is True
    # … but the database holds a cancellation no one asked for
    assert row["same_world_state"] is False and row["same"] is False


def test_bfcl_multi_turn_world_state_sees_a_write():
    from spectool_bench.bfcl._executable import Environment
    from spectool_bench.bfcl._tasks import load_tasks

    task = load_tasks("multi_turn_base", limit=1)[0]
    env = Environment(task.classes, task.initial_config)
    fresh = Environment(task.classes, task.initial_config)
    assert env.state() == fresh.state()
    env.call(ToolCall("mkdir", {"dir_name": "spectool_same_probe"}))
    assert env.state() != fresh.state()
