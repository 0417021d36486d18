"""Plan context: the next tool from the ordered events before it, with back-off.

An *event* is a user turn or an earlier call with its outcome (:func:`._patterns.event`:
``get_order_details``, ``get_order_details!err``, ``…!empty``). The mined
:attr:`~._patterns.Patterns.plan` counts which tool followed each context of the last
0…:data:`~._patterns.CONTEXT` events; :func:`plan_scores` reads the longest context seen
before and backs off to shorter ones, each shorter one weighted by ``backoff`` (stupid
back-off), so ``find_user_id → get_user_details → get_order_details`` predicts the next
``get_order_details`` (the agent walks the user's orders) where the last event alone would
not, and an error predicts the retry the agent makes after errors.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ._patterns import CONTEXT, USER, EventLog, Patterns

__all__ = ["events_of", "own_plan", "plan_scores"]


def events_of(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The conversation's events so far, oldest first (as :func:`._patterns.mine` counts them)."""
    log = EventLog()
    for m in messages:
        log.read(m)
    return log.events


def own_plan(events: Sequence[str], context: int = CONTEXT) -> dict[tuple[str, ...], Counter[str]]:
    """The conversation's own plan counts so far: an agent that searched three times in a row
    searches again more often than the other sessions say."""
    plan: dict[tuple[str, ...], Counter[str]] = {}
    for i, ev in enumerate(events):
        if ev == USER:
            continue
        name = ev.split("!", 1)[0]
        for k in range(min(context, i) + 1):
            plan.setdefault(tuple(events[i - k : i]), Counter())[name] += 1
    return plan


def plan_scores(
    patterns: Patterns,
    events: Sequence[str],
    context: int = CONTEXT,
    backoff: float = 0.4,
    own: Mapping[tuple[str, ...], Counter[str]] | None = None,
) -> dict[str, float]:
    """Tool -> score: the share of each context's next tools, longest context seen first.
    ``own``: the conversation's own counts (:func:`own_plan`), added to the mined ones."""
    scores: dict[str, float] = defaultdict(float)
    weight = 1.0
    for k in range(min(context, len(events)), -1, -1):
        tail = tuple(events[len(events) - k :])
        nexts = patterns.plan.get(tail)
        if own and tail in own:
            nexts = (nexts or Counter()) + own[tail]
        if not nexts:
            continue
        total = sum(nexts.values())
        for name, n in nexts.items():
            scores[name] += weight * n / total
        weight *= backoff
    return dict(scores)
