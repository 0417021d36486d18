"""One conversation's speculation, driven from the agent's event loop or from any thread.

``ainvoke()`` runs speculation on the agent's own loop (an owner task holds the speculator's
task group open), so async tools run where they would have run. ``invoke()`` runs it on one
background loop per :class:`Sessions` (an anyio blocking portal), which every sync hook, from
any thread (ToolNode's pool), reaches through the portal: the core is single-threaded, so it
needs no locks of its own.

Only calls the drafter proposed in this conversation go through the cache; any other call
runs through LangChain as it would have without spectool.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import anyio.from_thread

from spectool import Effect, SpectoolError, Toolbox, ToolCall, ToolSpec
from spectool._speculator import Speculator

log = logging.getLogger("langchain_spectool")

__all__ = ["AsyncSession", "Sessions", "ThreadSession"]


class _Core:
    """A speculator plus the keys its drafts admitted. Runs on the speculator's loop only."""

    def __init__(self, speculator: Speculator) -> None:
        self.speculator = speculator
        self.admitted: set[str] = set()
        self._turn: Any = None

    def spec(self, name: str) -> ToolSpec | None:
        box = self.speculator.toolbox
        return box.get(name) if name in box else None

    def start_turn(self, messages: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]]) -> None:
        self._turn = self.speculator.start_turn(messages, tools or None)

    def end_turn(self) -> None:
        """The model answered: note what the drafts admitted, stop drafts still running."""
        turn, self._turn = self._turn, None
        if turn is None:
            return
        for call in turn.admitted:
            spec = self.spec(call.name)
            if spec is not None:
                self.admitted.add(spec.key(call.arguments))
        turn.cancel()

    async def resolve(self, call: ToolCall) -> Any:
        """The cached outcome of a call the drafts admitted; None means: run it for real."""
        spec = self.spec(call.name)
        if spec is None or not spec.speculable:
            return None
        try:
            key = spec.key(call.arguments)
        except SpectoolError:
            return None
        if key not in self.admitted:
            return None
        if spec.effect is Effect.READ_ONLY:
            self.admitted.discard(key)  # a read_only result serves one call
        outcome = await self.speculator.resolve(call)
        if outcome.cancelled or isinstance(outcome.error, SpectoolError):
            return None  # not the tool's own result: let LangChain run it
        return outcome

    def mutation(self, scope: str) -> None:
        self.speculator.cache.invalidate(scope)

    def stats(self) -> dict[str, Any]:
        return self.speculator.stats()


class ThreadSession:
    """A conversation driven by sync hooks, through the shared background loop."""

    def __init__(self, core: _Core, portal: anyio.from_thread.BlockingPortal) -> None:
        self.core, self._portal = core, portal
        self._cm = portal.wrap_async_context_manager(core.speculator)
        self._cm.__enter__()

    def spec(self, name: str) -> ToolSpec | None:
        return self.core.spec(name)

    def start_turn(self, messages: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]]) -> None:
        self._portal.call(self.core.start_turn, messages, tools)

    def end_turn(self) -> None:
        self._portal.call(self.core.end_turn)

    def resolve(self, call: ToolCall) -> Any:
        return self._portal.call(self.core.resolve, call)

    @contextmanager
    def mutating(self, scope: str) -> Iterator[None]:
        # Bump before and after, as spectool does for its own mutating runs.
        self._portal.call(self.core.mutation, scope)
        try:
            yield
        finally:
            self._portal.call(self.core.mutation, scope)

    def stats(self) -> dict[str, Any]:
        return self._portal.call(self.core.stats)

    def close(self) -> None:
        self._cm.__exit__(None, None, None)


class AsyncSession:
    """A conversation driven by async hooks, on the agent's own event loop."""

    def __init__(self, core: _Core) -> None:
        self.core = core
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop, ready = asyncio.Event(), asyncio.Event()

        async def own() -> None:  # enters and exits the task group in one task, as anyio needs
            async with self.core.speculator:
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

    def spec(self, name: str) -> ToolSpec | None:
        return self.core.spec(name)

    def start_turn(self, messages: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]]) -> None:
        self.core.start_turn(messages, tools)

    def end_turn(self) -> None:
        self.core.end_turn()

    async def resolve(self, call: ToolCall) -> Any:
        return await self.core.resolve(call)

    @contextmanager
    def mutating(self, scope: str) -> Iterator[None]:
        self.core.mutation(scope)
        try:
            yield
        finally:
            self.core.mutation(scope)

    def stats(self) -> dict[str, Any]:
        return self.core.stats()

    async def aclose(self) -> None:
        if self._stop is not None and self._task is not None and not self._task.done():
            self._stop.set()
            await self._task


def _merge(total: dict[str, Any], part: Mapping[str, Any]) -> None:
    for k, v in part.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            total[k] = total.get(k, 0) + v


class Sessions:
    """Conversations by key, at most ``max_sessions`` of each kind (oldest closed first)."""

    def __init__(self, make: Callable[[Toolbox], Speculator], max_sessions: int = 64) -> None:
        self._make, self._max = make, max_sessions
        self._sync: OrderedDict[str, ThreadSession] = OrderedDict()
        self._async: OrderedDict[str, AsyncSession] = OrderedDict()
        self._lock = threading.Lock()
        self._portal_cm: Any = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self.totals: dict[str, Any] = {}

    # -- sync -------------------------------------------------------------------------------

    def _portal_now(self) -> anyio.from_thread.BlockingPortal:
        if self._portal is None:
            self._portal_cm = anyio.from_thread.start_blocking_portal()
            self._portal = self._portal_cm.__enter__()
            atexit.register(self.close)  # the portal's thread would block interpreter exit
        return self._portal

    def open_sync(self, key: str, tools: Iterable[ToolSpec]) -> ThreadSession:
        with self._lock:
            session = self._sync.get(key)
            if session is None:
                session = ThreadSession(_Core(self._make(Toolbox(tools))), self._portal_now())
                self._sync[key] = session
                while len(self._sync) > self._max:
                    self._retire(self._sync.popitem(last=False)[1])
            self._sync.move_to_end(key)
            return session

    def find_sync(self, key: str) -> ThreadSession | None:
        with self._lock:
            return self._sync.get(key)

    def close_sync(self, key: str) -> None:
        with self._lock:
            session = self._sync.pop(key, None)
            if session is not None:
                self._retire(session)

    def _retire(self, session: ThreadSession) -> None:
        try:
            _merge(self.totals, session.stats())
            session.close()
        except Exception:  # closing speculation must never fail the agent
            log.warning("closing a speculation session failed", exc_info=True)

    # -- async ------------------------------------------------------------------------------

    async def open_async(self, key: str, tools: Iterable[ToolSpec]) -> AsyncSession:
        session = self._async.get(key)
        if session is not None and session.alive:
            self._async.move_to_end(key)
            return session
        if session is not None:
            _merge(self.totals, session.stats())  # its loop is gone; so are its runs
        session = AsyncSession(_Core(self._make(Toolbox(tools))))
        await session.open()
        self._async[key] = session
        while len(self._async) > self._max:
            await self._aretire(self._async.popitem(last=False)[1])
        return session

    def find_async(self, key: str) -> AsyncSession | None:
        session = self._async.get(key)
        return session if session is not None and session.alive else None

    async def close_async(self, key: str) -> None:
        session = self._async.pop(key, None)
        if session is not None:
            await self._aretire(session)

    async def _aretire(self, session: AsyncSession) -> None:
        _merge(self.totals, session.stats())
        if session.alive:
            try:
                await session.aclose()
            except Exception:
                log.warning("closing a speculation session failed", exc_info=True)

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
        """Close every sync session and the background loop (async ones end with their loop)."""
        with self._lock:
            while self._sync:
                self._retire(self._sync.popitem(last=False)[1])
            if self._portal_cm is not None:
                cm, self._portal_cm, self._portal = self._portal_cm, None, None
                cm.__exit__(None, None, None)
