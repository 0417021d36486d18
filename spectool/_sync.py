"""A blocking, thread-safe façade over the async :class:`Speculator`.

The async core runs on its own event loop in a background thread (an anyio blocking portal);
every method hands work to that loop, so any number of threads (a LangGraph ``ToolNode`` thread
pool, say) may call it at once. There is one implementation of speculation: this is a door to it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._outcome import CacheCounters, Outcome
from ._speculator import Speculator, Turn
from ._tools import Toolbox
from ._types import Drafter, ToolCall
from .errors import ConfigError

__all__ = ["SyncSpeculator"]


class SyncSpeculator:
    """``with SyncSpeculator(tools, drafter) as spec:`` — the same session as
    :class:`Speculator`, callable from plain threads. Options are Speculator's."""

    def __init__(
        self,
        tools: Toolbox | Iterable[Any],
        drafter: Drafter | str | None = None,
        *,
        backend: str = "asyncio",
        **options: Any,
    ) -> None:
        self.speculator = Speculator(tools, drafter, **options)
        self._backend = backend
        self._portal_cm: Any = None
        self._portal: Any = None
        self._session_cm: Any = None
        self._lock = threading.Lock()

    # -- lifetime ---------------------------------------------------------------------------

    def open(self) -> SyncSpeculator:
        from anyio.from_thread import start_blocking_portal

        with self._lock:
            if self._portal is not None:
                raise ConfigError("this SyncSpeculator is already open")
            self._portal_cm = start_blocking_portal(self._backend)
            self._portal = self._portal_cm.__enter__()
            # The session's task group must enter and exit in one task: let the portal own it.
            self._session_cm = self._portal.wrap_async_context_manager(self.speculator)
            self._session_cm.__enter__()
        return self

    def close(self) -> None:
        with self._lock:
            if self._portal is None:
                return
            try:
                self._session_cm.__exit__(None, None, None)
            finally:
                self._portal_cm.__exit__(None, None, None)
                self._portal = self._portal_cm = self._session_cm = None

    def __enter__(self) -> SyncSpeculator:
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, fn: Any, *args: Any) -> Any:
        portal = self._portal
        if portal is None:
            raise ConfigError("open the session first: `with SyncSpeculator(...) as spec:`")
        return portal.call(fn, *args)

    # -- the Speculator's API, blocking -----------------------------------------------------

    @property
    def counters(self) -> CacheCounters:
        return self.speculator.counters

    def stats(self) -> dict[str, Any]:
        return self._call(self.speculator.stats)

    def start_turn(
        self, messages: Sequence[Mapping[str, Any]], tools: Iterable[Mapping[str, Any]] | None = None
    ) -> Turn:
        """Start drafting for a model request; returns at once."""
        return self._call(self.speculator.start_turn, list(messages), tools)

    def resolve(self, call: ToolCall) -> Outcome:
        """Block until the outcome of one call the model made (cached if valid, else run)."""
        return self._call(self.speculator.resolve, call)

    def lookup(self, call: ToolCall) -> Outcome | None:
        """Block until the outcome of a call the drafts ran; None: run it yourself."""
        return self._call(self.speculator.lookup, call)

    def invalidate(self, scope: str = "default") -> None:
        """State in ``scope`` changed outside spectool: its early reads go stale."""
        self._call(self.speculator.invalidate, scope)

    def cancel_turn(self, turn: Turn) -> None:
        """The model answered: stop the turn's drafts still running (on the session's loop)."""
        self._call(turn.cancel)

    def resolve_all(self, calls: Sequence[ToolCall]) -> list[Outcome]:
        return self._call(self.speculator.resolve_all, list(calls))

    def run(self, call: ToolCall) -> Any:
        """The call's value, or its exception raised here (as if run in this thread)."""
        return self.resolve(call).unwrap()

    def wait_turn(self, turn: Turn) -> None:
        """Block until drafting for ``turn`` is over (useful in tests and demos)."""
        self._call(turn.wait)
