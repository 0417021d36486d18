"""Offline drafter evaluation on BFCL / τ² ground truth: no main model, no injected latency.

Each task's ground truth is replayed as the replay main model serves it
(:mod:`spectool_bench.workloads._replay`). Before every response the drafter sees exactly the
conversation the main model saw — the true history, never its own earlier guesses — and its
proposals are scored by :mod:`._metrics`.

A fresh drafter is built per (drafter, category, λ) and sees that category's tasks in order, so
anything it learns online (the history drafter's session memory) comes only from tasks it has
already been scored on.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spectool import Drafter, DraftRequest, ToolCall
from spectool.drafters import tool_schemas
from spectool.errors import ConfigError

from ..bfcl._tasks import Task
from ..report._progress import Progress
from ..workloads._catalog import split_tasks
from ..workloads._replay import Step, replay_steps
from ._metrics import StepScore, score_step, summarize
from ._misses import classify_misses, told_text

__all__ = ["Prepared", "check_samples", "evaluate", "prepare", "run_grid"]


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
