"""One conversation's speculation, on spectool's core, from the agent's loop or any thread.

``invoke()`` uses spectool's :class:`~spectool.SyncSpeculator` (thread-safe: ToolNode's pool
threads call it at once). ``ainvoke()`` uses the async :class:`~spectool.Speculator` on the
agent's own loop, so async tool bodies run where they would have run; the hooks are separate
calls, so a small owner task holds its ``async with`` open between them.

Only calls the drafts ran are served (``lookup``, which never runs a tool); every other call
runs through LangChain exactly as without spectool.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from spectool import Outcome, SpectoolError, Speculator, SyncSpeculator, ToolCall, ToolSpec, Turn

log = logging.getLogger("langchain_spectool")

__all__ = ["AsyncSession", "Sessions", "SyncSession"]

Drafts = list[dict[str, Any]]
_failures_lock = threading.Lock()  # guards the sessions' served-failure lists (short holds)


def _served(outcome: Outcome | None) -> Outcome | None:
    """The tool's own outcome, or None: spectool's argument check failing is not the tool's
    result, so LangChain runs (and validates) the call itself."""
    if outcome is None or isinstance(outcome.error, SpectoolError):
        return None
    return outcome


class _Session:
    """What both session kinds share: ``core`` is a Speculator or a SyncSpeculator."""

    def __init__(self, core: Any, speculator: Speculator) -> None:
        self.core, self._speculator = core, speculator
        self._turn: Turn | None = None
        self._failed: deque[Outcome] = deque(maxlen=64)  # the failures served, and their calls' ids
        self._failed_ids: deque[str] = deque(maxlen=64)

    def spec(self, name: str) -> ToolSpec | None:
        box = self._speculator.toolbox
        return box.get(name) if name in box else None

    def start_turn(self, messages: Sequence[Mapping[str, Any]], tools: Drafts) -> None:
        self._turn = self.core.start_turn(messages, tools or None)

    def _retried(self, call: ToolCall) -> bool:
        """The same call (its id) was served a recorded failure already: a retry runs it for
        real, and the cache is not asked again (so it counts no second hit)."""
        with _failures_lock:
            return call.id is not None and call.id in self._failed_ids

    def _once(self, call: ToolCall, outcome: Outcome | None) -> Outcome | None:
        """A recorded early failure is served at most once: asked again (a retry), the call
        runs for real. (A pure tool's entry stays in the cache; its error must not.)"""
        if outcome is None or outcome.error is None:
            return outcome
        with _failures_lock:  # ToolNode's pool threads look up at once
            if any(o is outcome for o in self._failed):
                return None
            self._failed.append(outcome)
            if call.id is not None:
                self._failed_ids.append(call.id)
        return outcome

    @property
    def policy(self) -> Any:
        """The conversation's PolicyDrafter (None without a drafter)."""
        return self._speculator.drafter

    @contextmanager
    def mutating(self, scope: str) -> Iterator[None]:
        # Bump before and after, as spectool does for the mutating runs it makes itself.
        self.core.invalidate(scope)
        try:
            yield
        finally:
            self.core.invalidate(scope)

    def stats(self) -> dict[str, Any]:
        return self.core.stats()


class SyncSession(_Session):
    """A conversation driven by sync hooks: a :class:`SyncSpeculator` plus the open turn."""

    def __init__(self, core: SyncSpeculator) -> None:
        super().__init__(core.open(), core.speculator)

    def end_turn(self) -> None:
        turn, self._turn = self._turn, None
        if turn is not None:
            self.core.cancel_turn(turn)  # the model answered: late drafts are moot

    def lookup(self, call: ToolCall) -> Outcome | None:
        if self._retried(call):
            return None
        return self._once(call, _served(self.core.lookup(call)))

    def close(self) -> None:
        self.core.close()


class AsyncSession(_Session):
    """A conversation driven by async hooks: a :class:`Speculator` on the agent's loop."""

    def __init__(self, core: Speculator) -> None:
        super().__init__(core, core)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self.loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        async def own() -> None:  # anyio's task group enters and exits in one task
            async with self.core:
                ready.set()
                await self._stop.wait()

        self._task = self.loop.create_task(own(), name="spectool-session")
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            waiter.cancel()
            await self._task  # raises what the speculator raised on entry

    @property
    def alive(self) -> bool:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return self._task is not None and not self._task.done() and running is self.loop

    def end_turn(self) -> None:
        turn, self._turn = self._turn, None
        if turn is not None:
            turn.cancel()

    async def lookup(self, call: ToolCall) -> Outcome | None:
        if self._retried(call):
            return None
        return self._once(call, _served(await self.core.lookup(call)))

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._stop.set()
            await self._task


def _merge(total: dict[str, Any], part: Mapping[str, Any]) -> None:
    for k, v in part.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            total[k] = total.get(k, 0) + v


class Sessions:
    """Conversations by key, at most ``max_sessions`` of each kind (oldest closed first).
    ``make(Speculator or SyncSpeculator, tool_specs)`` builds a conversation's core."""

    def __init__(self, make: Callable[[type[Any], list[ToolSpec]], Any], max_sessions: int = 64) -> None:
        self._make, self._max = make, max_sessions
        self._sync: OrderedDict[str, SyncSession] = OrderedDict()
        self._async: OrderedDict[str, AsyncSession] = OrderedDict()
        self._lock = threading.Lock()
        self._atexit = False
        self.totals: dict[str, Any] = {}

    # -- sync -------------------------------------------------------------------------------

    def open_sync(self, key: str, tools: list[ToolSpec]) -> SyncSession:
        with self._lock:
            session = self._sync.get(key)
            if session is None:
                if not self._atexit:  # a session's loop thread would block interpreter exit
                    atexit.register(self.close)
                    self._atexit = True
                session = self._sync[key] = SyncSession(self._make(SyncSpeculator, tools))
                while len(self._sync) > self._max:
                    self._retire(self._sync.popitem(last=False)[1])
            self._sync.move_to_end(key)
            return session

    def find_sync(self, key: str) -> SyncSession | None:
        with self._lock:
            return self._sync.get(key)

    def close_sync(self, key: str) -> dict[str, Any] | None:
        """Close the conversation's session; its counters (None if it had none)."""
        with self._lock:
            session = self._sync.pop(key, None)
            return self._retire(session) if session is not None else None

    def _retire(self, session: SyncSession) -> dict[str, Any] | None:
        try:
            stats = session.stats()
            _merge(self.totals, stats)
            session.close()
            return stats
        except Exception:  # closing speculation must never fail the agent
            log.warning("closing a speculation session failed", exc_info=True)
            return None

    # -- async ------------------------------------------------------------------------------

    async def open_async(self, key: str, tools: list[ToolSpec]) -> AsyncSession:
        session = self._async.get(key)
        if session is not None and session.alive:
            self._async.move_to_end(key)
            return session
        if session is not None:
            _merge(self.totals, session.stats())  # its loop is gone; so are its runs
        session = AsyncSession(self._make(Speculator, tools))
        await session.open()
        self._async[key] = session
        while len(self._async) > self._max:
            await self._aretire(self._async.popitem(last=False)[1])
        return session

    def find_async(self, key: str) -> AsyncSession | None:
        session = self._async.get(key)
        return session if session is not None and session.alive else None

    async def close_async(self, key: str) -> dict[str, Any] | None:
        session = self._async.pop(key, None)
        return await self._aretire(session) if session is not None else None

    async def _aretire(self, session: AsyncSession) -> dict[str, Any]:
        stats = session.stats()
        _merge(self.totals, stats)
        if session.alive:
            try:
                await session.aclose()
            except Exception:
                log.warning("closing a speculation session failed", exc_info=True)
        return stats

    # -- all --------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters of closed sessions plus the live ones."""
        total = dict(self.totals)
        with self._lock:
            for s in self._sync.values():
                _merge(total, s.stats())
        for a in self._async.values():
            _merge(total, a.stats())
        return total

    def close(self) -> None:
        """Close every sync session and its loop thread (async ones end with their loop)."""
        with self._lock:
            while self._sync:
                self._retire(self._sync.popitem(last=False)[1])
