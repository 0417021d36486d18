"""Deterministic train / dev / test splits of BFCL tasks, by content (never by id).

One rule for every command that tunes or reports (drafter eval, traces and tuning, the main job,
the soak), so a figure reported on ``test`` never saw a copy of a task that tuning used. BFCL
repeats content under new ids, so an id can't be the key:

* single-turn questions recur across categories with other tool lists (``simple_python_12`` is
  ``multiple_98`` plus three distractor tools; ``live_simple_33-10-0`` is ``live_simple_32-9-0``
  with a reworded description; ``simple_python_172`` is ``multiple_138`` without quotes);
* ``multi_turn_long_context_N`` / ``miss_param_N`` / ``miss_func_N`` are ``multi_turn_base_N``
  padded or with a parameter / function withheld, and some bases open with the same request.

So tasks are grouped, over every category in the wheel: two tasks are in one group when they
open with the same user message (case-folded words: whitespace and punctuation aside) or have
the same gold calls, and a multi-turn variant is in its base's group. A group's split is the
first 8 hex digits of sha256(its smallest content key) modulo 100: 0–59 train, 60–69 dev,
70–99 test. :func:`content_digest` (question *and* functions, tools in name order, keys
sorted) is what a training example records (``meta["content"]``) and the adapter manifest lists.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from ._tasks import ALL_CATEGORIES, Task, load_tasks

__all__ = [
    "SPLITS",
    "Split",
    "base_id",
    "content_digest",
    "in_split",
    "normalize",
    "question",
    "split_key",
    "split_of",
    "split_of_id",
    "touches_held_out",
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


def normalize(text: str) -> str:
    """Case-folded words: punctuation and whitespace never make two questions differ."""
    return re.sub(r"[\W_]+", " ", text.casefold()).strip()


def _calls(task: Task) -> str | None:
    calls = [{"name": c.name, "arguments": c.arguments} for turn in task.ground_truth for c in turn]
    return json.dumps(calls, sort_keys=True, ensure_ascii=False) if calls else None


def _keys(task: Task) -> list[str]:
    """The content keys a task shares with its twins: its opening user message and its gold
    calls (all turns, in order)."""
    q = question(_turns(task))
    keys = [f"opening:{normalize(q[0])}"] if q else []
    calls = _calls(task)
    return keys + ([f"calls:{calls}"] if calls else [])


@functools.cache
def _groups() -> dict[str, str]:
    """Content key or ``id:`` key → the split key of its group, over every task in the wheel.

    Tasks that share a content key, and multi-turn variants with their base, are one group;
    the group's split key is its smallest content key (ids never choose the split)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for category in ALL_CATEGORIES:
        if category == "format_sensitivity":
            continue  # re-lists other categories' tasks
        for task in load_tasks(category):
            own = f"id:{task.id}"
            base = base_id(task)
            for key in _keys(task) + ([f"id:{base}"] if base else []):
                parent[find(key)] = find(own)
    members: dict[str, list[str]] = {}
    for key in parent:
        members.setdefault(find(key), []).append(key)
    out: dict[str, str] = {}
    for keys in members.values():
        content = [k for k in keys if not k.startswith("id:")]
        rep = min(content) if content else min(keys)
        out.update((k, rep) for k in keys)
    return out


def split_key(task: Task) -> str:
    """What the split hashes: the smallest content key of the task's group (a task from
    outside the wheel is its own group)."""
    keys = _keys(task)
    groups = _groups()
    found = next((groups[k] for k in keys if k in groups), None)
    if found is None and base_id(task):
        found = groups.get(f"id:{base_id(task)}")
    return found or (min(keys) if keys else f"id:{task.id}")


def touches_held_out(task: Task) -> bool:
    """True when any content key of ``task`` (opening user message, gold calls) belongs to a dev
    or test group of the wheel's scored categories: what an extra training set must not hold.
    A task twin to no scored task touches nothing held out."""
    groups = _groups()
    return any(_bucket(groups[k]) != "train" for k in _keys(task) if k in groups)


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
