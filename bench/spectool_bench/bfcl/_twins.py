"""Content twins: held-out tasks whose content a tuning set already holds.

Independent of how the split is made (:mod:`._splits` hashes one key; this looks at every
request's content), so it can check any split, or a file of traces against a held-out set.
A task is reduced to the drafting requests it can produce — one per user turn: the user turns so
far and the tools — and two requests are twins when they share any of:

* the question so far (every normalized user message, in order) or its content digest (question
  and functions);
* the opening user message (the first request a drafter sees for the task);
* any user message of at least :data:`MIN_MESSAGE` characters (a variant that pads the state or
  rewords one turn keeps the others word for word; shorter ones — "hi", "test", "let's do 100
  shares." — recur across unrelated tasks);

and two tasks are twins too when their gold calls (all turns, in order) are the same: the
drafter's target is. Messages compare as case-folded words (:func:`._splits.normalize`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from spectool import TraceExample

from ._splits import content_digest, normalize, question
from ._tasks import Task

__all__ = ["MIN_MESSAGE", "example_keys", "task_keys", "trace_twins", "twins"]

MIN_MESSAGE = 40
Key = tuple[str, str]


def _request_keys(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> Iterator[Key]:
    q = [normalize(m) for m in question(messages)]
    if not q:
        return
    yield ("question", "\x1f".join(q))
    yield ("content", content_digest(messages, tools))
    yield ("opening", q[0])
    yield from (("message", m) for m in q if len(m) >= MIN_MESSAGE)


def task_keys(task: Task) -> set[Key]:
    """The keys of every request the task can produce (one per user turn), and its calls."""
    keys: set[Key] = set()
    messages: list[Mapping[str, Any]] = []
    for turn in task.turns:
        messages.extend(turn)
        keys.update(_request_keys(messages, task.tools))
    calls = [[c.name, c.arguments] for turn in task.ground_truth for c in turn]
    if calls:
        keys.add(("calls", json.dumps(calls, sort_keys=True, ensure_ascii=False)))
    return keys


def example_keys(example: TraceExample) -> set[Key]:
    """The keys of a recorded example, computed from its request (never from its metadata)."""
    return set(_request_keys(list(example.request.messages), list(example.request.tools)))


def _matches(held_out: Iterable[Task], seen: Iterable[tuple[str, set[Key]]]) -> list[tuple[str, str, str]]:
    index: dict[Key, str] = {}
    for name, keys in seen:
        for k in keys:
            index.setdefault(k, name)
    out = []
    for task in held_out:
        for kind, value in sorted(task_keys(task)):
            if (kind, value) in index:
                out.append((task.id, index[(kind, value)], kind))
                break
    return out


def twins(held_out: Iterable[Task], seen: Iterable[Task]) -> list[tuple[str, str, str]]:
    """(held-out id, seen id, kind of match) for each held-out task with a twin in ``seen``."""
    return _matches(held_out, ((t.id, task_keys(t)) for t in seen))


def trace_twins(held_out: Iterable[Task], examples: Iterable[TraceExample]) -> list[tuple[str, str, str]]:
    """The same against recorded traces (named by ``meta["task"]`` when present)."""
    seen = ((str(e.meta.get("task", f"example {i}")), example_keys(e)) for i, e in enumerate(examples))
    return _matches(held_out, seen)
