"""Deterministic train / dev / test splits of BFCL tasks, by content (never by id).

One rule for every command that tunes or reports (drafter eval, traces and tuning, the main job,
the soak): a task's split is a hash of its *question* — its user turns, each whitespace-collapsed
and case-folded — so a figure reported on ``test`` never saw a copy of a task that tuning used.
BFCL repeats content under new ids, so an id can't be the key:

* single-turn questions recur across categories with other tool lists (``simple_python_12`` is
  ``multiple_98`` with three distractor tools; ``live_simple_33-10-0`` is ``live_simple_32-9-0``
  with a reworded description): the functions are therefore left out of the split key;
* ``multi_turn_long_context_N`` / ``miss_param_N`` / ``miss_func_N`` are ``multi_turn_base_N``
  padded or with a parameter / function withheld: a multi-turn task is keyed by its base
  scenario's question, so every variant goes where its base goes.

The bucket is the first 8 hex digits of sha256(key) modulo 100: 0–59 train, 60–69 dev, 70–99
test. :func:`content_digest` (question *and* functions, tools in name order, keys sorted) is
what a training example records (``meta["content"]``) and the adapter manifest lists.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from ._tasks import ALL_CATEGORIES, Task, load_tasks

__all__ = [
    "SPLITS",
    "Split",
    "base_id",
    "content_digest",
    "in_split",
    "question",
    "split_key",
    "split_of",
    "split_of_id",
]

Split = Literal["train", "dev", "test"]
SPLITS: tuple[Split, ...] = ("train", "dev", "test")
_BOUNDS: tuple[tuple[int, Split], ...] = ((60, "train"), (70, "dev"), (100, "test"))
#: multi-turn categories built from ``multi_turn_base_N`` (same N)
_VARIANTS = ("multi_turn_long_context", "multi_turn_miss_param", "multi_turn_miss_func")
_BASE = "multi_turn_base"


def _text(value: Any) -> str:
    """Whitespace-collapsed, case-folded text (content parts joined, as a chat template does)."""
    if isinstance(value, list):
        value = " ".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in value)
    return " ".join(str(value or "").split()).casefold()


def question(messages: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The normalized user messages of a conversation, in order."""
    return tuple(_text(m.get("content")) for m in messages if m.get("role") == "user")


def _normal(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {str(k): _normal(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_normal(v) for v in node]
    return " ".join(node.split()) if isinstance(node, str) else node


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def content_digest(messages: Iterable[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> str:
    """sha256 (16 hex) of a request's question and functions: whitespace, key order and tool
    order do not change it."""
    fns = sorted((_normal(t) for t in tools), key=lambda t: json.dumps(t, sort_keys=True))
    return _digest({"question": list(question(messages)), "functions": fns})


def _turns(task: Task) -> list[Mapping[str, Any]]:
    return [m for turn in task.turns for m in turn]


def base_id(task: Task) -> str | None:
    """The ``multi_turn_base`` id a multi-turn variant was built from (None for the rest)."""
    if task.category not in _VARIANTS and not task.id.startswith(_VARIANTS):
        return None
    return f"{_BASE}_{task.id.rsplit('_', 1)[1]}"


@functools.cache
def _bases() -> dict[str, Task]:
    return {t.id: t for t in load_tasks(_BASE)}


def split_key(task: Task) -> str:
    """What the split hashes: the question of the task's base scenario (its own if none)."""
    base = base_id(task)
    source = _bases().get(base, task) if base else task
    return _digest(list(question(_turns(source))[:1]))


def _bucket(key: str) -> Split:
    bucket = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 100
    return next(name for bound, name in _BOUNDS if bucket < bound)


def split_of(task: Task) -> Split:
    """The split a task belongs to (stable across runs, machines, Python versions and ids)."""
    return _bucket(split_key(task))


def split_of_id(task_id: str) -> Split:
    """The split of the BFCL task with this id (its category is the id without the last ``_N``)."""
    category = task_id.rsplit("_", 1)[0]
    if category not in ALL_CATEGORIES:
        raise ValueError(f"{task_id!r} names no BFCL category")
    task = next((t for t in load_tasks(category) if t.id == task_id), None)
    if task is None:
        raise ValueError(f"no BFCL task {task_id!r} in {category}")
    return split_of(task)


def in_split(tasks: Iterable[Task], split: str) -> list[Task]:
    """The tasks whose content falls in ``split`` (``"all"`` keeps every task)."""
    if split == "all":
        return list(tasks)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)} or 'all'")
    return [t for t in tasks if split_of(t) == split]
