"""BFCL / τ² ground truth replayed as the replay main model serves it: no main model, no latency.

Multi-turn and τ²: one call per response, outputs from the task's world (BFCL's classes on the
task's initial state, τ²'s tools on a fresh copy of its database); single-turn: the turn's calls
together, stub outputs; a short final message ends each user turn. Each response comes with the
true history before it, never a drafter's earlier guesses: what ``spectool drafters eval`` scores
drafters on, and the whole conversations the mining drafters learn from.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spectool import Effect, ToolCall

from ..bfcl._tasks import Task
from ._catalog import open_world, split_tasks
from ._toolbox import task_output

__all__ = ["Step", "replay", "replay_steps", "speculable_tools", "train_traces"]

_SPECULABLE = (Effect.PURE, Effect.READ_ONLY)


@dataclass(frozen=True)
class Step:
    """One ground-truth response: the conversation before it, the tools offered, its calls."""

    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]]
    calls: Sequence[ToolCall]


def speculable_tools(task: Task, env: Any = None) -> set[str]:
    """Tools the bench declares pure or read-only: the task's world says (BFCL's effect table,
    τ²'s tool types); every single-turn tool (the bench serves them from precomputed stubs,
    which are pure)."""
    names = [t["function"]["name"] for t in task.tools]
    if not task.multi_turn:
        return set(names)
    env = env or open_world(task)
    return {n for n in names if env.effect(n) in _SPECULABLE}


def replay_steps(task: Task) -> tuple[list[Step], set[str]]:
    """The task's responses with the true history before each, and its speculable tools."""
    steps, _, speculable = replay(task)
    return steps, speculable


@functools.lru_cache(maxsize=8)
def train_traces(category: str) -> tuple[list[dict[str, Any]], ...]:
    """The full ground-truth conversations of a category's train split (for mining drafters)."""
    return tuple(replay(t)[1] for t in split_tasks(category, "train"))


def replay(task: Task) -> tuple[list[Step], list[dict[str, Any]], set[str]]:
    """Steps, the whole conversation after the last turn, and the speculable tools."""
    env = open_world(task)
    messages: list[dict[str, Any]] = []
    steps: list[Step] = []
    serial = 0
    for turn_index, (turn, calls) in enumerate(zip(task.turns, task.ground_truth)):
        messages.extend(dict(m) for m in turn)
        tools = task.tools_at(turn_index)
        groups = [[c] for c in calls] if task.multi_turn else ([list(calls)] if calls else [])
        if not groups:  # no call expected: the drafter is still asked (what it proposes is waste)
            steps.append(Step(tuple(messages), tools, ()))
        for group in groups:
            steps.append(Step(tuple(messages), tools, tuple(group)))
            ids = [f"call_{task.id}_{serial + i}" for i in range(len(group))]
            serial += len(group)
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments_json},
                        }
                        for i, c in zip(ids, group)
                    ],
                }
            )
            for i, c in zip(ids, group):
                out = env.call(c) if env is not None else task_output(task, c)
                messages.append({"role": "tool", "tool_call_id": i, "content": out})
        messages.append(
            {
                "role": "assistant",
                "content": "Done: " + ", ".join(c.name for c in calls) + "." if calls else "Nothing to do.",
            }
        )
    return steps, messages, speculable_tools(task, env)
