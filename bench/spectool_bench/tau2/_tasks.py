"""τ² tasks as replayable tasks: gold actions are the main model's calls, in order.

For any domain in the wheel: τ²'s own split (``split_tasks.json``: train / test), the first user
message built from the scenario (reason for call, known info) and labelled as built, the
domain's tools as OpenAI tools, and a fresh :class:`~._world.Tau2World` per run. Tasks whose gold
actions are empty (policy refusals: the right answer is no call) are skipped and counted. Only
the agent's actions are replayed; actions τ² marks ``requestor: user`` are the customer's.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spectool import ToolCall
from spectool.errors import ConfigError

from ..bfcl._tasks import Task
from ._wheel import domain_data, domains
from ._world import Tau2World, template

__all__ = [
    "PREFIX",
    "Loaded",
    "category_domain",
    "is_tau2",
    "load_domain",
    "near_twins",
    "reason_for_call",
    "scenario_message",
]

PREFIX = "tau2_"  # category of a domain's tasks: tau2_<domain>
#: what opens every first user message: the words are built from τ²'s scenario, not a customer's
LABEL = "[τ²-bench scenario, built from the task's user instructions]"


def is_tau2(category: str) -> bool:
    return category.startswith(PREFIX)


def category_domain(category: str) -> str:
    return category[len(PREFIX) :]


@dataclass(frozen=True)
class Loaded:
    tasks: list[Task]  # tasks with gold actions, in the wheel's order
    skipped: list[str]  # ids of tasks with no gold agent action
    twins: tuple[str, ...] = ()  # train ids left out as (near) content twins of a test task


def scenario_message(task: Mapping[str, Any]) -> dict[str, str]:
    """The first user message: the scenario's reason for call and known info, labelled."""
    instructions = (task.get("user_scenario") or {}).get("instructions")
    if isinstance(instructions, str):  # some domains (mock) give free text
        parts = [instructions]
    else:
        instructions = instructions or {}
        parts = [
            f"Reason for call: {str(instructions.get('reason_for_call') or '').strip()}",
            f"Known info: {str(instructions.get('known_info') or '').strip()}",
        ]
    return {"role": "user", "content": "\n".join([LABEL, *parts])}


def _gold(task: Mapping[str, Any]) -> list[ToolCall]:
    actions = (task.get("evaluation_criteria") or {}).get("actions") or []
    return [
        ToolCall(a["name"], dict(a.get("arguments") or {}))
        for a in actions
        if (a.get("requestor") or "assistant") == "assistant"
    ]


def reason_for_call(task: Task) -> str:
    """The scenario's reason for call (case-folded words), "" when the opening has none."""
    text = str(task.turns[0][0].get("content") or "") if task.turns and task.turns[0] else ""
    m = re.search(r"^Reason for call:(.*)$", text, re.M)
    return " ".join(re.findall(r"\w+", m.group(1).lower())) if m else ""


def _call_tags(task: Task) -> Counter[str]:
    return Counter(
        json.dumps([c.name, c.arguments], sort_keys=True) for turn in task.ground_truth for c in turn
    )


def near_twins(held_out: Iterable[Task], seen: Iterable[Task]) -> list[tuple[str, str]]:
    """(held-out id, seen id) of near twins: the same reason for call and at least half of
    the gold calls in common (of the task with fewer), a variant that rewords the known info
    or adds a retry keeps both (retail test 68 and train 67)."""
    by_reason: dict[str, list[Task]] = {}
    for t in seen:
        if reason := reason_for_call(t):
            by_reason.setdefault(reason, []).append(t)
    out = []
    for task in held_out:
        calls = _call_tags(task)
        for other in by_reason.get(reason_for_call(task), ()):
            theirs = _call_tags(other)
            shared = sum((calls & theirs).values())
            if shared and 2 * shared >= min(sum(calls.values()), sum(theirs.values())):
                out.append((task.id, other.id))
                break
    return out


def _world(domain: str, initial_state: Any) -> Tau2World:
    return Tau2World(domain, initial_state)


@functools.cache
def load_domain(domain: str, split: str = "all") -> Loaded:
    """A domain's tasks in τ²'s ``split`` (train / test, or all); refusals skipped and counted."""
    data = domain_data(domain)
    raw = json.loads((data / "tasks.json").read_text())
    if split != "all":
        splits = json.loads((data / "split_tasks.json").read_text())
        if split not in splits:
            raise ConfigError(
                f"τ² {domain} has no {split!r} split (it has: {', '.join(sorted(splits))}, all)"
            )
        wanted = set(map(str, splits[split]))
        raw = [t for t in raw if str(t["id"]) in wanted]
    tools = template(domain).tools
    tasks, skipped = [], []
    for t in raw:
        gold = _gold(t)
        if not gold:
            skipped.append(str(t["id"]))
            continue
        tasks.append(
            Task(
                id=f"{PREFIX}{domain}_{t['id']}",
                category=f"{PREFIX}{domain}",
                turns=[[scenario_message(t)]],
                tools=tools,
                ground_truth=[gold],
                world=functools.partial(_world, domain, t.get("initial_state")),
            )
        )
    if split == "train":  # τ²'s split is by id: a train task may repeat a test task's content
        from ..bfcl._twins import twins

        test = load_domain(domain, "test").tasks
        dropped = {train for train, _, _ in twins(tasks, test)}
        # near twins too: same reason for call, half the gold calls (the twin rule's keys miss them)
        dropped |= {train for train, _ in near_twins(tasks, test)}
        return Loaded([t for t in tasks if t.id not in dropped], skipped, tuple(sorted(dropped)))
    return Loaded(tasks, skipped)


@functools.cache
def all_categories() -> tuple[str, ...]:
    """Every domain of the wheel whose split has train and test (mock has only ``base``)."""
    out = []
    for d in domains():
        splits = json.loads((domain_data(d) / "split_tasks.json").read_text())
        if {"train", "test"} <= set(splits):
            out.append(PREFIX + d)
    return tuple(out)
