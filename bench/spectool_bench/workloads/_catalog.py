"""One door to every workload's tasks and worlds: BFCL categories and τ² domains (``tau2_<domain>``).

A *world* is what a task's tools run against (BFCL's multi-turn class instances, a τ² domain's
database): ``call(ToolCall) -> str``, ``effect(name)``, ``scope(name)`` and ``state()`` (a digest
of everything the tools can change, compared by ``same``). Single-turn BFCL tasks have none:
their stub tools change nothing.
"""

from __future__ import annotations

from typing import Protocol

from spectool import Effect, ToolCall
from spectool.errors import ConfigError

from ..bfcl._tasks import ALL_CATEGORIES, Task, load_tasks

__all__ = ["World", "is_known", "load_category", "open_world", "split_tasks", "world_state"]


class World(Protocol):
    def call(self, call: ToolCall) -> str: ...
    def effect(self, name: str) -> Effect: ...
    def scope(self, name: str) -> str: ...
    def state(self) -> str: ...


def open_world(task: Task) -> World | None:
    """A fresh world for one run of ``task`` (None for stub-tool tasks)."""
    if task.world is not None:
        return task.world()  # type: ignore[no-any-return]
    if task.classes:
        from ..bfcl._executable import Environment

        return Environment(list(task.classes), task.initial_config, task.long_context)
    return None


def world_state(world: World | None) -> str | None:
    return world.state() if world is not None else None


def is_known(category: str) -> bool:
    from ..bfcl._unused import UNUSED_CATEGORIES
    from ..tau2._tasks import all_categories, is_tau2

    return (
        category in ALL_CATEGORIES
        or category in UNUSED_CATEGORIES
        or (is_tau2(category) and category in all_categories())
    )


def load_category(category: str) -> list[Task]:
    """Every task of a BFCL category or τ² domain (τ²: those with gold actions)."""
    from ..tau2._tasks import category_domain, is_tau2, load_domain

    if is_tau2(category):
        return list(load_domain(category_domain(category)).tasks)
    from ..bfcl._unused import UNUSED_CATEGORIES, load_unused

    if category in UNUSED_CATEGORIES:
        return list(load_unused(category))
    return load_tasks(category)


def split_tasks(category: str, split: str | None) -> list[Task]:
    """A category's tasks in ``split``: BFCL's split rule, or τ²'s own ``split_tasks.json``."""
    from ..tau2._tasks import category_domain, is_tau2, load_domain

    if is_tau2(category):
        return list(load_domain(category_domain(category), split or "all").tasks)
    from ..bfcl._unused import UNUSED_CATEGORIES, unused_split

    if category in UNUSED_CATEGORIES:
        return unused_split(category, split or "all")
    from ..bfcl._splits import in_split

    return in_split(load_tasks(category), split) if split else load_tasks(category)


def skipped(category: str, split: str | None) -> list[str]:
    """Ids of the category's tasks left out for having no gold call (τ² only; BFCL: none)."""
    from ..tau2._tasks import category_domain, is_tau2, load_domain

    if not is_tau2(category):
        return []
    return list(load_domain(category_domain(category), split or "all").skipped)


def check_categories(names: tuple[str, ...]) -> None:
    unknown = [c for c in names if not is_known(c)]
    if unknown:
        raise ConfigError(f"unknown categor(y/ies) {unknown}: BFCL categories or tau2_<domain>")
