"""Each agent run's own speculation counters, where LangChain users look for them: in the agent
state (key ``spectool``) and as a custom callback event ``spectool`` on the run (callbacks and
LangSmith see it). ``SpeculativeToolMiddleware.stats()`` still sums every conversation."""

from __future__ import annotations

import logging
from typing import Any, NotRequired

from langchain.agents.middleware import AgentState

__all__ = ["EVENT", "SpectoolState", "apublish", "publish"]

log = logging.getLogger("langchain_spectool")

#: The custom event's name (``on_custom_event(name, data, …)`` in a callback handler).
EVENT = "spectool"


class SpectoolState(AgentState):
    """The agent state with the last run's counters (hits, joins, misses, time_saved, …)."""

    spectool: NotRequired[dict[str, Any]]


def publish(stats: dict[str, Any] | None) -> dict[str, Any] | None:
    """The state update for a run's counters, also sent as the run's custom event."""
    if stats is None:
        return None
    try:
        from langchain_core.callbacks.manager import dispatch_custom_event

        dispatch_custom_event(EVENT, stats)
    except Exception:  # no run to attach it to (a hook called outside a graph): state only
        log.debug("no run for the spectool event", exc_info=True)
    return {EVENT: stats}


async def apublish(stats: dict[str, Any] | None) -> dict[str, Any] | None:
    if stats is None:
        return None
    try:
        from langchain_core.callbacks.manager import adispatch_custom_event

        await adispatch_custom_event(EVENT, stats)
    except Exception:
        log.debug("no run for the spectool event", exc_info=True)
    return {EVENT: stats}
