"""The drafter arms of a sweep: a factory and a label per drafter variant, and their warm-up.

A drafter that loads a model (``local``, ``tuned``) is built once per process and shared by every
agent and arm; the oracle has one variant per α.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from spectool.errors import ConfigError

from ._oracle import OracleDrafter
from ._plans import Plan

__all__ = ["drafter_arms", "warm_drafters"]


def drafter_arms(plan: Plan, name: str, tasks: list, seed: int) -> list[tuple[Callable[[], Any], str]]:
    """(factory, label) per drafter variant; the oracle has one variant per α."""
    if name == "oracle":
        return [
            (_oracle(tasks, a, plan.oracle_delay, seed), OracleDrafter(tasks, a, plan.oracle_delay).label)
            for a in plan.oracle_alphas
        ]
    return [_drafter(plan, name)]


def _oracle(tasks: list, alpha: float, delay: float, seed: int) -> Callable[[], Any]:
    return lambda: OracleDrafter(tasks, alpha, delay, seed=seed)


_SHARED: dict[str, tuple[Callable[[], Any], str]] = {}


def _drafter(plan: Plan, name: str) -> tuple[Callable[[], Any], str]:
    from spectool import drafters

    if name == "history":
        return (lambda: drafters.HistoryDrafter()), "history"
    if name == "mined":  # the history drafter seeded with the train split's replays
        from ..workloads._replay import train_traces

        traces = [t for c in plan.categories for t in train_traces(c)]
        return (lambda: drafters.HistoryDrafter.from_traces(traces)), "mined(train split)"
    if name in ("learning", "learning+train"):
        # One per arm, shared by its agents (as one client's sessions share it): it learns from
        # the arm's earlier tasks — from nothing, or primed with the train split's replays.
        if name == "learning":
            learning = drafters.LearningDrafter()
            return (lambda: learning), "learning(from nothing)"
        from ..workloads._replay import train_traces

        primed = drafters.LearningDrafter([t for c in plan.categories for t in train_traces(c)])
        return (lambda: primed), "learning(+train split)"
    if name in _SHARED:  # one loaded model per process: warm-up and every arm share it
        return _SHARED[name]
    if name == "local":
        shared = drafters.LocalDrafter()  # one loaded model for all agents
        _SHARED[name] = (lambda: shared), "local(embedded SmolLM2)"
        return _SHARED[name]
    if name == "tuned":
        from spectool.drafters import shipped_adapter_path

        tuned = drafters.LocalDrafter(adapter=shipped_adapter_path())  # ConfigError if missing
        _SHARED[name] = (lambda: tuned), "tuned(SmolLM2 + LoRA)"
        return _SHARED[name]
    if name == "endpoint":
        if not plan.drafter_base_url or not plan.drafter_model:
            raise ConfigError("the endpoint drafter needs --drafter-base-url and --drafter-model")
        return (
            lambda: drafters.EndpointDrafter(model=plan.drafter_model, base_url=plan.drafter_base_url)
        ), f"endpoint({plan.drafter_model})"
    raise ConfigError(
        f"unknown drafter {name!r} (oracle, history, mined, learning, learning+train, local, tuned, endpoint)"
    )


async def warm_drafters(plan: Plan, tasks: list) -> None:
    """One draft per drafter before any timed run (a local model loads and compiles its grammar
    here, not in the first timed draft), on a train-split task: nothing a timed run will ask."""
    from spectool import DraftRequest

    from ..workloads._catalog import split_tasks

    warm = (split_tasks(tasks[0].category, "train") or tasks)[0]
    request = DraftRequest(messages=[dict(m) for m in warm.turns[0]], tools=list(warm.tools), samples=1)
    for name in plan.drafters:
        if name == "oracle":
            continue
        for factory, _ in drafter_arms(plan, name, tasks, plan.seed):
            with anyio.move_on_after(120):
                try:
                    await factory().propose(request)
                except Exception:  # noqa: BLE001 - a failing drafter is measured as such later
                    pass
