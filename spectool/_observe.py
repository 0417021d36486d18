"""Observers: what the cache and the speculator did, as it happens, for tracing and pictures.

The core calls a handful of hook points (a tool run starting and ending, a main-path call
served or missed, a stale entry discarded, an early run wasted, a draft starting and ending);
each forwards to the observers registered with :func:`add_observer`. With none registered a
hook is one list check. An observer's failure is logged and never reaches the agent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, TypeAlias

if TYPE_CHECKING:
    from ._outcome import Outcome
    from ._tools import ToolSpec
    from ._types import DraftRequest, ToolCall

__all__ = ["Observer", "Resolution", "add_observer", "remove_observer"]

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


P = ParamSpec("P")
#: What a ``*_started`` hook hands to its ``*_finished`` one: each observer with its token.
Watch: TypeAlias = list[tuple[Observer, Any]] | None


def _call(obs: Observer, method: str, *args: Any, **kwargs: Any) -> Any:
    try:
        return getattr(obs, method)(*args, **kwargs)
    except Exception:  # an observer must never break the agent
        log.warning("observer %r failed in %s", obs, method, exc_info=True)
        return None


def _tell(method: Callable[Concatenate[Observer, P], None]) -> Callable[P, None]:
    """The hook for an event: every observer's ``method``."""

    def hook(*args: P.args, **kwargs: P.kwargs) -> None:
        for obs in _observers:
            _call(obs, method.__name__, *args, **kwargs)

    return hook


def _start(method: Callable[Concatenate[Observer, P], Any]) -> Callable[P, Watch]:
    """The hook for a start: each observer with the token its ``method`` returned (None: no observer)."""

    def hook(*args: P.args, **kwargs: P.kwargs) -> Watch:
        return [(obs, _call(obs, method.__name__, *args, **kwargs)) for obs in list(_observers)] or None

    return hook


def _finish(method: Callable[Concatenate[Observer, Any, P], None]) -> Callable[Concatenate[Watch, P], None]:
    """The hook for an end: ``method`` of each observer the start reached, with its own token."""

    def hook(watch: Watch, /, *args: P.args, **kwargs: P.kwargs) -> None:
        for obs, token in watch or ():
            _call(obs, method.__name__, token, *args, **kwargs)

    return hook


class _Fanout:
    """The hooks the core calls, with :class:`Observer`'s signatures; each observer's failure is contained."""

    tool_started = staticmethod(_start(Observer.tool_started))
    tool_finished = staticmethod(_finish(Observer.tool_finished))
    resolved = staticmethod(_tell(Observer.resolved))
    draft_started = staticmethod(_start(Observer.draft_started))
    draft_by = staticmethod(_finish(Observer.draft_by))
    draft_finished = staticmethod(_finish(Observer.draft_finished))
    wasted = staticmethod(_tell(Observer.wasted))


hooks = _Fanout()
