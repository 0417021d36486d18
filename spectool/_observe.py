"""Observers: what the cache and the speculator did, as it happens, for tracing and pictures.

The core calls a handful of hook points (a tool run starting and ending, a main-path call
served or missed, a stale entry discarded, an early run wasted, a draft starting and ending);
each forwards to the observers registered with :func:`add_observer`. With none registered a
hook is one list check. An observer's failure is logged and never reaches the agent.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ._outcome import Outcome
    from ._tools import ToolSpec
    from ._types import DraftRequest, ToolCall

__all__ = ["Observer", "Resolution", "add_observer", "observers", "remove_observer"]

log = logging.getLogger("spectool.observe")

#: How a main-path call was answered, or that a speculative entry was thrown away as stale.
Resolution = Literal["hit", "join", "miss", "stale"]


class Observer:
    """Subclass and override what you need. ``*_started`` return a token handed back to the
    matching ``*_finished`` call (a span, a timestamp …)."""

    def tool_started(self, call: ToolCall, spec: ToolSpec, speculative: bool) -> Any:
        """A tool run begins (speculative or on the main path)."""

    def tool_finished(self, token: Any, outcome: Outcome) -> None:
        """The run begun with ``token`` ended (value, error, or cancelled)."""

    def resolved(
        self,
        kind: Resolution,
        call: ToolCall,
        spec: ToolSpec,
        *,
        started: float,
        outcome: Outcome | None = None,
    ) -> None:
        """A main-path call was a hit / join / miss, or a speculative entry went stale.
        ``started``: the cache clock when the main path asked (or the entry was dropped)."""

    def draft_started(self, request: DraftRequest) -> Any:
        """A drafter's ``propose`` begins."""

    def draft_by(self, token: Any, drafter: Any) -> None:
        """The draft begun with ``token`` is made by ``drafter`` (right after ``draft_started``)."""

    def draft_finished(self, token: Any, status: str, proposals: int, admitted: int) -> None:
        """It ended: ``status`` is ok, timeout, error or cancelled."""

    def wasted(self, call: ToolCall, spec: ToolSpec, outcome: Outcome | None) -> None:
        """A speculative run was dropped unused (evicted, expired, stale, or the session closed);
        ``outcome`` is None while it was still running."""


_observers: list[Observer] = []


def add_observer(observer: Observer) -> Observer:
    """Register ``observer`` for every session in this process; returns it."""
    if observer not in _observers:
        _observers.append(observer)
    return observer


def remove_observer(observer: Observer) -> None:
    if observer in _observers:
        _observers.remove(observer)


def observers() -> list[Observer]:
    return list(_observers)


class _Fanout:
    """The hooks the core calls; each observer's failure is contained."""

    @staticmethod
    def _each(method: str, *args: Any, **kwargs: Any) -> list[Any]:
        out = []
        for obs in _observers:
            try:
                out.append(getattr(obs, method)(*args, **kwargs))
            except Exception:  # an observer must never break the agent
                log.warning("observer %r failed in %s", obs, method, exc_info=True)
                out.append(None)
        return out

    def tool_started(self, call: ToolCall, spec: ToolSpec, speculative: bool) -> list[Any] | None:
        if not _observers:
            return None
        return list(zip(list(_observers), self._each("tool_started", call, spec, speculative)))

    def tool_finished(self, tokens: list[Any] | None, outcome: Outcome) -> None:
        for obs, token in tokens or ():
            try:
                obs.tool_finished(token, outcome)
            except Exception:
                log.warning("observer %r failed in tool_finished", obs, exc_info=True)

    def resolved(
        self,
        kind: Resolution,
        call: ToolCall,
        spec: ToolSpec,
        *,
        started: float,
        outcome: Outcome | None = None,
    ) -> None:
        if _observers:
            self._each("resolved", kind, call, spec, started=started, outcome=outcome)

    def draft_started(self, request: DraftRequest) -> list[Any] | None:
        if not _observers:
            return None
        return list(zip(list(_observers), self._each("draft_started", request)))

    def draft_by(self, tokens: list[Any] | None, drafter: Any) -> None:
        for obs, token in tokens or ():
            try:
                obs.draft_by(token, drafter)
            except Exception:
                log.warning("observer %r failed in draft_by", obs, exc_info=True)

    def wasted(self, call: ToolCall, spec: ToolSpec, outcome: Outcome | None) -> None:
        if _observers:
            self._each("wasted", call, spec, outcome)

    def draft_finished(self, tokens: list[Any] | None, status: str, proposals: int, admitted: int) -> None:
        for obs, token in tokens or ():
            try:
                obs.draft_finished(token, status, proposals, admitted)
            except Exception:
                log.warning("observer %r failed in draft_finished", obs, exc_info=True)


hooks = _Fanout()
