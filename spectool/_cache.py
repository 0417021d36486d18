"""The futures-keyed tool cache: canonical key -> one run of a tool, shared by all who ask.

The first proposal of a call starts the tool; duplicate proposals join it; when the main model
asks for the call, a valid entry is awaited (a *hit* if finished, a *join* if still running)
and anything else runs now (a *miss*). Validity depends on the tool's effect:

* ``pure``      reusable until its TTL passes (results of the main path are kept too);
* ``read_only`` valid only if no mutating tool of the same scope started since the entry
                started (state epochs), and used at most once;
* ``mutating``  never run early; running one bumps its scope's epoch before and after.

An exception raised by a speculative run is stored and re-raised only when the main model asks
for that call, exactly as if the tool had run then. Speculative runs live in a task group owned
by ``async with ToolCache(...)``; on exit unused runs are cancelled (``on_close="cancel"``) or
awaited (``"finish"``), never leaked.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup

from ._observe import hooks as _observe
from ._outcome import CacheCounters, OnComplete, Outcome, foreign_cancellation, run_tool, sole_exception
from ._tools import Effect, Toolbox, ToolSpec, json_round_trip
from ._types import ToolCall
from .errors import ConfigError, SpectoolError

__all__ = ["ToolCache"]

log = logging.getLogger("spectool.cache")


@dataclass(eq=False)
class _Entry:
    key: str
    call: ToolCall
    spec: ToolSpec
    epoch: int
    started: float
    speculative: bool
    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: Outcome | None = None
    used: bool = False
    waiters: int = 0
    scope: anyio.CancelScope | None = None


class ToolCache:
    """Key -> future of one tool run, for one agent session.

    ``capacity`` bounds the entries kept; ``ttl`` is the default lifetime of an entry (a
    tool's own ``ToolSpec.ttl`` wins); ``max_concurrency`` bounds speculative runs in flight
    (per tool: ``ToolSpec.max_concurrency``). Proposals over a bound are skipped, never queued,
    so speculation cannot delay the main path. Tools declared ``external=True`` are run early
    only with ``speculate_external=True``; tools declared ``gated=True`` never are.
    """

    def __init__(
        self,
        tools: Toolbox | Any,
        *,
        capacity: int = 256,
        ttl: float | None = 300.0,
        max_concurrency: int = 16,
        on_close: Literal["cancel", "finish"] = "cancel",
        on_complete: OnComplete | None = None,
        clock: Callable[[], float] = time.monotonic,
        speculate_external: bool = False,
    ) -> None:
        if capacity < 1 or max_concurrency < 1:
            raise ConfigError("capacity and max_concurrency must be >= 1")
        if on_close not in ("cancel", "finish"):
            raise ConfigError(f"on_close must be 'cancel' or 'finish', got {on_close!r}")
        self.toolbox = tools if isinstance(tools, Toolbox) else Toolbox(tools)
        self.capacity, self.ttl, self.on_close = capacity, ttl, on_close
        self.on_complete = on_complete
        #: Opt-in: run tools declared ``external=True`` early (a third party sees every
        #: speculative run, including calls the model never makes).
        self.speculate_external = speculate_external
        self.counters = CacheCounters()
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._epochs: dict[str, int] = {}
        self._limiter = anyio.CapacityLimiter(max_concurrency)
        self._tool_limiters: dict[str, anyio.CapacityLimiter] = {}
        self._tg: TaskGroup | None = None
        self._closing = False

    # -- session ----------------------------------------------------------------------------

    async def __aenter__(self) -> ToolCache:
        if self._tg is not None:
            raise ConfigError("this ToolCache is already open")
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        assert self._tg is not None
        self._closing = True
        if self.on_close == "cancel" or exc[0] is not None:
            for entry in self._entries.values():
                if entry.scope is not None:
                    entry.scope.cancel()
            self._tg.cancel_scope.cancel()
        single: BaseException | None = None
        try:
            return await self._tg.__aexit__(*exc)
        except BaseExceptionGroup as group:
            # The one boundary where the task group's wrapping comes off: a lone error (the
            # SDK's APIConnectionError raised in the body) escapes as itself, so the caller's
            # `except` keeps working; real multiples stay a group.
            single = sole_exception(group)
            if single is None:
                raise
        finally:
            unused = [e for e in self._entries.values() if e.speculative and not e.used]
            self.counters.wasted_runs += len(unused)
            for e in unused:
                _observe.wasted(e.call, e.spec, e.outcome)
            self._entries.clear()
            self._tg = None
        raise single  # outside the handler: its own cause and context, not the group's

    def unused_finished(self) -> int:
        """Speculative runs that finished and were not used (yet): wasted so far."""
        return sum(
            1 for e in self._entries.values() if e.speculative and not e.used and e.outcome is not None
        )

    @property
    def task_group(self) -> TaskGroup:
        """The session's task group (drafts run here too). Only while open."""
        if self._tg is None or self._closing:
            raise ConfigError("the ToolCache is not open; use `async with ToolCache(...)`")
        return self._tg

    @property
    def is_open(self) -> bool:
        return self._tg is not None and not self._closing

    # -- state epochs -----------------------------------------------------------------------

    def epoch(self, scope: str) -> int:
        return self._epochs.get(scope, 0)

    def epochs(self) -> dict[str, int]:
        """A snapshot of every scope's epoch (a response created now sees this state)."""
        return dict(self._epochs)

    def invalidate(self, scope: str = "default") -> None:
        """Mark that state in ``scope`` changed outside spectool: read_only entries go stale."""
        self._epochs[scope] = self.epoch(scope) + 1

    def _valid(self, entry: _Entry, now: float) -> bool:
        ttl = entry.spec.ttl if entry.spec.ttl is not None else self.ttl
        if ttl is not None and now - entry.started > ttl:
            return False
        if entry.spec.effect is Effect.READ_ONLY:
            return not entry.used and entry.epoch == self.epoch(entry.spec.scope)
        return True

    def may_run_early(self, spec: ToolSpec) -> bool:
        """Whether proposals of ``spec`` may start before the model asks for them."""
        if spec.gated:  # an approval or guardrail comes first, always
            return False
        return spec.speculable and (self.speculate_external or not spec.external)

    def postable(self, key: str, epochs: dict[str, int] | None = None) -> ToolSpec | None:
        """The spec of a finished, successful, still-valid speculative entry (an engine may be
        handed its output), else None. ``epochs``: the scope epochs when the response that
        would receive it was created; a read_only entry from another epoch is never posted.
        An entry gone stale is dropped and counted in ``stale_discards``."""
        entry = self._entries.get(key)
        if entry is None or entry.outcome is None or not entry.outcome.ok:
            return None
        if not self._valid(entry, self._clock()):
            if entry.speculative and not entry.used and entry.spec.effect is Effect.READ_ONLY:
                self.counters.stale_discards += 1
            self._discard(key)
            return None
        if (
            entry.spec.effect is Effect.READ_ONLY
            and epochs is not None
            and epochs.get(entry.spec.scope, 0) != entry.epoch
        ):
            return None
        return entry.spec

    def _discard(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        if entry.speculative and not entry.used:
            self.counters.wasted_runs += 1
            _observe.wasted(entry.call, entry.spec, entry.outcome)
            if entry.scope is not None and entry.waiters == 0:
                entry.scope.cancel()

    def _make_room(self, now: float) -> bool:
        if len(self._entries) < self.capacity:
            return True
        for key, entry in list(self._entries.items()):  # oldest first (insertion order)
            if not self._valid(entry, now) and entry.waiters == 0:
                self._discard(key)
        for key, entry in list(self._entries.items()):
            if len(self._entries) < self.capacity:
                break
            if entry.outcome is not None and entry.waiters == 0:
                self._discard(key)
        return len(self._entries) < self.capacity

    # -- speculative side -------------------------------------------------------------------

    def speculate(self, call: ToolCall) -> bool:
        """Start ``call`` early if its tool is speculable; join an existing valid entry.

        Returns True if the call is now running or cached. Never raises for a bad proposal
        (unknown tool, malformed arguments, mutating tool): it is refused (False).
        """
        spec = self.toolbox._specs.get(call.name) if isinstance(call.name, str) else None
        if spec is None or not self.may_run_early(spec) or not self.is_open:
            self.counters.skipped_proposals += spec is not None and self.may_run_early(spec)
            return False
        arguments = json_round_trip(dict(call.arguments)) if isinstance(call.arguments, Mapping) else None
        if arguments is None:  # not what a model's JSON call could carry: never stand in for one
            return False
        call = ToolCall(call.name, arguments, call.id)
        try:
            key = spec.key(call.arguments)
        except SpectoolError:
            return False
        now = self._clock()
        entry = self._entries.get(key)
        if entry is not None and self._valid(entry, now):
            self.counters.duplicate_proposals += 1  # λ samples agreeing: join, no re-validation
            return True
        try:
            spec.validate(call.arguments)  # never start a tool with arguments it would refuse
        except SpectoolError:
            return False
        if entry is not None:
            if entry.spec.effect is Effect.READ_ONLY and not entry.used:
                self.counters.stale_discards += 1
                _observe.resolved("stale", entry.call, entry.spec, started=now, outcome=entry.outcome)
            self._discard(key)
        entry = _Entry(key, call, spec, self.epoch(spec.scope), now, speculative=True)
        if not self._make_room(now) or not self._acquire(entry):
            self.counters.skipped_proposals += 1
            return False
        entry.scope = anyio.CancelScope()
        self._entries[key] = entry
        self.counters.speculative_started += 1
        self.task_group.start_soon(self._run_speculative, entry, name=f"spectool:{spec.name}")
        return True

    def _acquire(self, entry: _Entry) -> bool:
        """Take a global and a per-tool slot for ``entry`` without waiting (False if full)."""
        try:
            self._limiter.acquire_on_behalf_of_nowait(entry)
        except anyio.WouldBlock:
            return False
        limiter = self._tool_limit(entry.spec)
        if limiter is not None:
            try:
                limiter.acquire_on_behalf_of_nowait(entry)
            except anyio.WouldBlock:
                self._limiter.release_on_behalf_of(entry)
                return False
        return True

    def _tool_limit(self, spec: ToolSpec) -> anyio.CapacityLimiter | None:
        if spec.max_concurrency is None:
            return None
        if spec.name not in self._tool_limiters:
            self._tool_limiters[spec.name] = anyio.CapacityLimiter(spec.max_concurrency)
        return self._tool_limiters[spec.name]

    async def _run_speculative(self, entry: _Entry) -> None:
        assert entry.scope is not None
        outcome: Outcome | None = None
        try:
            with entry.scope:
                outcome = await self._execute(entry.call, entry.spec, speculative=True)
        finally:
            self._release(entry)
            if outcome is None:  # cancelled: anyone waiting re-runs the call
                outcome = Outcome(
                    cancelled=True, started=entry.started, finished=self._clock(), speculative=True
                )
            entry.outcome = outcome
            entry.done.set()
        if outcome.error is not None:
            self.counters.speculative_errors += 1
        if self.on_complete is not None and not outcome.cancelled:
            await self._notify(entry, outcome)

    def _release(self, entry: _Entry) -> None:
        self._limiter.release_on_behalf_of(entry)
        limiter = self._tool_limit(entry.spec)
        if limiter is not None:
            limiter.release_on_behalf_of(entry)

    async def _notify(self, entry: _Entry, outcome: Outcome) -> None:
        assert self.on_complete is not None
        try:
            result = self.on_complete(entry.call, entry.key, outcome)
            if inspect.isawaitable(result):
                await result
        except BaseException as exc:  # a sink failure must never reach the agent
            if not isinstance(exc, Exception) and not foreign_cancellation(exc):
                raise
            log.warning("on_complete hook failed for %s", entry.spec.name, exc_info=True)

    async def _execute(self, call: ToolCall, spec: ToolSpec, *, speculative: bool) -> Outcome:
        return await run_tool(call, spec, self._clock, speculative=speculative)

    # -- main path --------------------------------------------------------------------------

    def consume(self, call: ToolCall) -> bool:
        """Record that ``call`` was answered elsewhere (a spectool engine spliced in the output
        this cache posted): count it as a hit and consume a read_only entry, as a main-path
        use would. False if no finished, valid entry matches."""
        spec = self.toolbox._specs.get(call.name)
        if spec is None or not spec.speculable:
            return False
        try:
            key = spec.key(call.arguments)
        except SpectoolError:
            return False
        entry = self._entries.get(key)
        now = self._clock()
        if entry is not None and not self._valid(entry, now):
            if entry.speculative and not entry.used and entry.spec.effect is Effect.READ_ONLY:
                self.counters.stale_discards += 1
            self._discard(key)
            return False
        if entry is None or entry.outcome is None or not self._valid(entry, now):
            return False
        if entry.speculative and not entry.used:
            self.counters.time_saved += entry.outcome.duration
        entry.used = True
        self.counters.hits += 1
        _observe.resolved("hit", call, spec, started=now, outcome=entry.outcome)
        if spec.effect is Effect.READ_ONLY:
            self._entries.pop(key, None)
        return True

    async def resolve(self, call: ToolCall) -> Outcome:
        """The outcome of ``call`` as the main model asked for it: cached if valid, else run.

        Unknown tools raise ``ToolNotFoundError``; malformed arguments come back as an outcome
        holding ``ToolArgumentsError`` (as running the tool would have).
        """
        spec = self.toolbox.get(call.name)
        if not spec.speculable:
            return await self._run_mutating(call, spec)
        try:
            key = spec.key(call.arguments)
        except SpectoolError as exc:
            now = self._clock()
            self.counters.misses += 1
            _observe.resolved("miss", call, spec, started=now)
            return Outcome(error=exc, started=now, finished=now)
        asked = self._clock()
        outcome = await self._cached(key)
        if outcome is not None:
            self._observe_use(call, spec, asked, outcome)
            return outcome
        self.counters.misses += 1
        _observe.resolved("miss", call, spec, started=asked)
        outcome = await self._execute(call, spec, speculative=False)
        if spec.effect is Effect.PURE and outcome.ok and self._make_room(self._clock()):
            fresh = _Entry(key, call, spec, 0, outcome.started, speculative=False, used=True, outcome=outcome)
            fresh.done.set()
            self._entries[key] = fresh
        return outcome

    async def lookup(self, call: ToolCall) -> Outcome | None:
        """Like :meth:`resolve`, but never runs the tool: the outcome of a valid entry (awaited
        if still running; a hit or a join, a read_only entry consumed), else None and the
        caller runs the call its own way (counted as a miss). Unknown or mutating tools: None,
        uncounted (the caller runs them, and bumps the scope of a mutating one with
        :meth:`invalidate`)."""
        spec = self.toolbox._specs.get(call.name) if isinstance(call.name, str) else None
        if spec is None or not spec.speculable:
            return None
        asked = self._clock()
        try:
            outcome = await self._cached(spec.key(call.arguments))
        except SpectoolError:  # malformed arguments: no entry can match
            outcome = None
        if outcome is None:
            self.counters.misses += 1
            _observe.resolved("miss", call, spec, started=asked)
        else:
            self._observe_use(call, spec, asked, outcome)
        return outcome

    @staticmethod
    def _observe_use(call: ToolCall, spec: ToolSpec, asked: float, outcome: Outcome) -> None:
        # A run still going when the main path asked was joined; one already done was a hit.
        kind: Literal["join", "hit"] = "join" if outcome.finished > asked else "hit"
        _observe.resolved(kind, call, spec, started=asked, outcome=outcome)

    async def _cached(self, key: str) -> Outcome | None:
        """A valid entry's finished outcome (awaited), or None; stale entries are dropped."""
        now = self._clock()
        entry = self._entries.get(key)
        if entry is not None and self._valid(entry, now):
            outcome = await self._use(entry, now)
            return None if outcome.cancelled else outcome
        if entry is not None:
            if entry.speculative and not entry.used and entry.spec.effect is Effect.READ_ONLY:
                self.counters.stale_discards += 1
                _observe.resolved("stale", entry.call, entry.spec, started=now, outcome=entry.outcome)
            self._discard(key)
        return None

    async def _use(self, entry: _Entry, now: float) -> Outcome:
        in_flight = entry.outcome is None
        entry.waiters += 1
        try:
            await entry.done.wait()
        finally:
            entry.waiters -= 1
        outcome = entry.outcome
        assert outcome is not None
        if outcome.cancelled:
            self._entries.pop(entry.key, None)
            return outcome
        if entry.speculative and not entry.used:
            self.counters.time_saved += max(0.0, min(now, outcome.finished) - outcome.started)
        entry.used = True
        if in_flight:
            self.counters.joins += 1
        else:
            self.counters.hits += 1
        if entry.spec.effect is Effect.READ_ONLY:
            self._entries.pop(entry.key, None)  # consumed: a second read must read again
        return outcome

    async def _run_mutating(self, call: ToolCall, spec: ToolSpec) -> Outcome:
        # Bump before and after: a read that started during the mutation is stale too.
        self.invalidate(spec.scope)
        self.counters.mutating_runs += 1
        try:
            return await self._execute(call, spec, speculative=False)
        finally:
            self.invalidate(spec.scope)
