"""Per-agent tools for one task: its world's tools (BFCL's classes, τ²'s domain) or stubs.

Every tool runs its body first and then sleeps its injected latency: the output reflects the
state when the call started, like a real remote tool, and the sleep is what speculation hides.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import anyio

from spectool import Effect, Toolbox, ToolCall, ToolSpec, canonical_key

from ..bfcl._tasks import Task
from ._catalog import open_world
from ._latency import Latency

__all__ = ["ToolStats", "build_toolbox", "precomputed_output", "task_output"]


@dataclass
class ToolStats:
    """What the tools of one agent did: runs, injected seconds, and runs per call key."""

    runs: int = 0
    seconds: float = 0.0
    by_key: dict[str, int] = field(default_factory=dict)
    durations: list[float] = field(default_factory=list)

    def record(self, key: str, seconds: float) -> None:
        self.runs += 1
        self.seconds += seconds
        self.durations.append(seconds)
        self.by_key[key] = self.by_key.get(key, 0) + 1


def precomputed_output(task_id: str, call: ToolCall, schema: Any = None) -> str:
    """The stub output of a single-turn call: fixed per (task, canonical call), no execution.

    Keyed with the tool's parameter ``schema``, as the cache keys calls: two calls the cache
    treats as one (a default filled in, ``2`` vs ``2.0`` for a number) get one output."""
    key = canonical_key(call.name, dict(call.arguments), schema)
    digest = hashlib.sha256(f"{task_id}\x00{key}".encode()).hexdigest()[:12]
    return json.dumps({"tool": call.name, "status": "ok", "result_id": digest})


def task_output(task: Task, call: ToolCall) -> str:
    """:func:`precomputed_output` keyed with the task's own schema for ``call``'s tool: what
    the bench's stub returns, so drafter prompts and traces show the bench's very outputs."""
    body = next((t["function"] for t in task.tools if t["function"]["name"] == call.name), None)
    return precomputed_output(task.id, call, body.get("parameters") if body else None)


def build_toolbox(task: Task, latency: Latency, stats: ToolStats, env: Any = None) -> Toolbox:
    """A toolbox for one agent and one task over ``env``, the task's world (a fresh one when not
    given; None for stub tools): state is per agent."""
    if env is None and task.multi_turn:
        env = open_world(task)
    box = Toolbox()
    for schema in task.tools:
        name = schema["function"]["name"]
        params = schema["function"]["parameters"]
        if env is not None:
            effect, scope = env.effect(name), env.scope(name)
        else:
            effect, scope = Effect.PURE, "stub"  # precomputed: the output depends on the args only
        box.add(
            ToolSpec.from_schema(
                schema, fn=_runner(task, env, name, params, latency, stats), effect=effect, scope=scope
            )
        )
    return box


def _runner(task: Task, env: Any, name: str, params: Any, latency: Latency, stats: ToolStats):
    async def run(**arguments: Any) -> str:
        call = ToolCall(name, arguments)
        key = canonical_key(name, arguments, params)
        out = env.call(call) if env is not None else precomputed_output(task.id, call, params)
        delay = latency.draw(task.id, key)
        stats.record(key, delay)
        await anyio.sleep(delay)
        return out

    return run
