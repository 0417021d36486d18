"""Offline drafter evaluation on BFCL / τ² ground truth: no main model, no injected latency.

Each task's ground truth is replayed as the replay main model serves it (multi-turn and τ²: one
call per response, outputs from the task's world — BFCL's classes on the task's initial state,
τ²'s tools on a fresh copy of its database; single-turn:
the turn's calls together, stub outputs; a short final message ends each user turn). Before
every response the drafter sees exactly the conversation the main model saw — the true history,
never its own earlier guesses — and its proposals are scored by :mod:`._drafter_metrics`.

A fresh drafter is built per (drafter, category, λ) and sees that category's tasks in order, so
anything it learns online (the history drafter's session memory) comes only from tasks it has
already been scored on.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spectool import Drafter, DraftRequest, Effect, ToolCall
from spectool.drafters import tool_schemas
from spectool.errors import ConfigError

from ..bfcl._tasks import Task
from ..bfcl._workload import task_output
from ..harness._workloads import open_world, split_tasks
from ..report._progress import Progress
from ._metrics import StepScore, score_step, summarize
from ._misses import classify_misses, told_text

__all__ = [
    "Prepared",
    "Step",
    "check_samples",
    "evaluate",
    "prepare",
    "replay",
    "replay_steps",
    "run_grid",
    "speculable_tools",
    "train_traces",
]

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


async def _draft(drafter: Drafter, request: DraftRequest) -> tuple[list[ToolCall], float, bool]:
    t0 = time.perf_counter()
    try:
        proposals = await drafter.propose(request)
        ok = isinstance(proposals, list)
    except Exception:  # noqa: BLE001 - a failing drafter scores as no proposals, as in the speculator
        proposals, ok = [], False
    seconds = time.perf_counter() - t0
    return [p for p in (proposals if ok else []) if isinstance(p, ToolCall)], seconds, not ok


@dataclass
class Prepared:
    """A task's replayed steps, computed once and shared by every drafter and λ."""

    task: Task
    steps: list[Step]
    speculable: set[str]


def prepare(category: str, split: str, limit: int | None) -> list[Prepared]:
    tasks = split_tasks(category, split)[:limit]
    return [Prepared(t, *replay_steps(t)) for t in tasks]


async def evaluate(
    drafter: Drafter,
    prepared: Sequence[Prepared],
    samples: int,
    progress: Callable[[int, int], None] | None = None,
    score_from: int = 0,
) -> list[StepScore]:
    """Score a (fresh) drafter at λ = ``samples`` on the prepared tasks, in order; the first
    ``score_from`` tasks are drafted for (a learning drafter learns from them) but not scored."""
    scores: list[StepScore] = []
    for done, item in enumerate(prepared, 1):
        for step in item.steps:
            if done <= score_from:
                await _draft(drafter, DraftRequest(list(step.messages), list(step.tools), samples))
                continue
            request = DraftRequest(list(step.messages), list(step.tools), samples)
            proposals, seconds, failed = await _draft(drafter, request)
            schemas = tool_schemas(step.tools)
            score = score_step(proposals, step.calls, item.speculable, schemas, seconds, failed)
            misses = classify_misses(
                proposals, step.calls, item.speculable, schemas, told_text(step.messages)
            )
            scores.append(replace(score, misses=tuple(misses.items())))
        if progress is not None:
            progress(done, len(prepared))
    return scores


def _progress_printer(label: str) -> Callable[[int, int], None]:
    """A :class:`Progress` bar over one arm's tasks (tasks done / total, rate, ETA)."""
    bar: list[Progress] = []

    def show(done: int, total: int) -> None:
        if not bar:
            bar.append(Progress(total, unit="task"))
            bar[0].label = label
        bar[0].step(done - bar[0].done)
        if done >= total:
            bar[0].close()

    return show


async def run_grid(
    drafters: Mapping[str, Callable[[str], Drafter]],
    categories: Sequence[str],
    split: str,
    samples: Sequence[int],
    limit: int | None,
    progress: bool = True,
    second_half: bool = False,
) -> list[dict[str, Any]]:
    """One row per drafter × category × λ (fields: see :func:`summarize`). ``drafters`` maps
    a name to a factory called with the category (a mining drafter mines that category's
    train split). ``second_half``: every drafter drafts for the whole split in order and only
    the second half of its tasks is scored (what a drafter learning from nothing has learnt by
    then)."""
    rows: list[dict[str, Any]] = []
    for category in categories:
        prepared = prepare(category, split, limit)
        if progress:
            n = sum(len(p.steps) for p in prepared)
            print(f"{category} [{split}]: {len(prepared)} tasks, {n} responses", file=sys.stderr, flush=True)
        for name, make in drafters.items():
            for lam in samples:
                show = _progress_printer(f"{name} λ={lam}") if progress else None
                start = len(prepared) // 2 if second_half else 0
                scores = await evaluate(make(category), prepared, lam, show, start)
                rows.append(
                    {
                        "drafter": name,
                        "category": category,
                        "split": split + (" (2nd half)" if second_half else ""),
                        "samples": lam,
                        "n_tasks": len(prepared) - start,
                        **summarize(scores),
                    }
                )
    return rows


def check_samples(samples: Sequence[int]) -> None:
    if not samples or any(s < 1 for s in samples):
        raise ConfigError(f"--samples must be integers ≥ 1, got {list(samples)}")
