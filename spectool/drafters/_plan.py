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

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ._common import assistant_calls
from ._patterns import CONTEXT, USER, Patterns, event, outcome

__all__ = ["events_of", "plan_scores"]


def events_of(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The conversation's events so far, oldest first (as :func:`._patterns.mine` counts them)."""
    events: list[str] = []
    pending: dict[str, int] = {}  # tool_call_id -> index of its event
    for m in messages:
        role = m.get("role")
        if role == "user":
            events.append(USER)
        elif role == "assistant":
            for call in assistant_calls(m):
                pending[str(call.id)] = len(events)
                events.append(call.name)
        elif role == "tool":
            i = pending.get(str(m.get("tool_call_id")))
            if i is not None:
                events[i] = event(events[i], outcome(m.get("content")))
    return events


def plan_scores(
    patterns: Patterns, events: Sequence[str], context: int = CONTEXT, backoff: float = 0.4
) -> dict[str, float]:
    """Tool -> score: the share of each context's next tools, longest context seen first."""
    scores: dict[str, float] = defaultdict(float)
    weight = 1.0
    for k in range(min(context, len(events)), -1, -1):
        nexts = patterns.plan.get(tuple(events[len(events) - k :]))
        if not nexts:
            continue
        total = sum(nexts.values())
        for name, n in nexts.items():
            scores[name] += weight * n / total
        weight *= backoff
    return dict(scores)
