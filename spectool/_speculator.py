"""One agent session's speculation: draft at request time, resolve the model's calls.

At every model request the speculator asks the drafter for λ samples of the next tool calls,
concurrently with the main call and bounded by ``draft_timeout``. Proposed calls of speculable
tools start in the cache at once. When the main model answers, its calls are resolved through
the cache. Drafter failures (raising, hanging, garbage) are counted and otherwise ignored: the
main path never waits on a drafter.
"""

from __future__ import annotations

import copy
import json
import logging
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import anyio

from ._auto import DEFAULT_RUN_COST_S, AutoSamples
from ._cache import ToolCache
from ._observe import hooks as _observe
from ._options import check_options
from ._outcome import CacheCounters, OnComplete, Outcome, foreign_cancellation
from ._tools import Effect, Toolbox, ToolSpec
from ._types import Drafter, DraftRequest, ToolCall
from .drafters._named import resolve_drafter
from .errors import ConfigError, DrafterError, SpectoolError

__all__ = ["DraftCounters", "Speculator", "Turn", "chat_tools"]

log = logging.getLogger("spectool.speculator")


@dataclass
class DraftCounters:
    """What the drafter did across the session."""

    drafts: int = 0  # propose() calls started
    draft_errors: int = 0  # propose() raised or returned something that is not a list
    draft_timeouts: int = 0  # propose() ran past draft_timeout
    proposals: int = 0  # proposed calls seen
    admitted: int = 0  # proposals handed to the cache (started or joined)
    rejected: int = 0  # unknown tool, malformed arguments, not speculable, or garbage
    undrafted_turns: int = 0  # model requests samples="auto" chose not to draft for (λ = 0)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _never_early(spec: ToolSpec, cache: ToolCache) -> str:
    """Why ``spec`` never runs early in a session with ``cache`` ('' if it may)."""
    if not spec.declared:
        return "not declared, so mutating: declare it with @spectool.tool(effect=...)"
    if spec.gated:
        return "gated"
    if not spec.speculable:
        return spec.effect.value
    if spec.external and not cache.speculate_external:
        return "external: the session has speculate_external=False"
    return ""


def chat_tools(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tool entries in Chat Completions shape (Responses' flat function tools converted)."""
    out = []
    for t in tools:
        if t.get("type") == "function" and "function" not in t and "name" in t:
            body = {k: t[k] for k in ("name", "description", "parameters") if k in t}
            out.append({"type": "function", "function": body})
        else:
            out.append(dict(t))
    return out


def as_tool_call(obj: Any) -> ToolCall | None:
    """A drafter's proposal as a ToolCall, or None if it is not one (garbage is dropped)."""
    name: Any
    if isinstance(obj, ToolCall):
        name, args, cid = obj.name, obj.arguments, obj.id
    elif isinstance(obj, Mapping):
        body = obj.get("function", obj)
        if not isinstance(body, Mapping):
            return None
        name, args, cid = body.get("name"), body.get("arguments", {}), obj.get("id")
    else:
        return None
    if not isinstance(name, str):
        return None
    if isinstance(args, str):
        try:
            args = json.loads(args) if args else {}
        except ValueError:
            return None
    if not isinstance(args, Mapping):
        return None
    return ToolCall(name=name, arguments=dict(args), id=cid if isinstance(cid, str) else None)


class Turn:
    """The drafts started for one model request; ``cancel()`` once the model has answered."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.finished = anyio.Event()
        self.proposals: list[ToolCall] = []
        self.admitted: list[ToolCall] = []
        self.samples = 0  # λ drafted for this request (0: none)
        self.started = time.perf_counter()
        self.observed = False  # samples="auto" has recorded this request

    def cancel(self) -> None:
        if not self.finished.is_set():  # a finished turn has nothing to cancel (and it is cheaper)
            self.scope.cancel()

    async def wait(self) -> None:
        """Wait until drafting for this turn is over (done, failed, timed out or cancelled)."""
        await self.finished.wait()


class Speculator:
    """Speculative tool calling for one agent session (Algorithm 2).

    Use as ``async with Speculator(tools, drafter) as spec:``; per model request call
    :meth:`start_turn`, then :meth:`resolve_all` with the calls the model made.
    """

    def __init__(
        self,
        tools: Toolbox | Iterable[Any],
        drafter: Drafter | str | None = None,
        *,
        samples: int | str | AutoSamples = 3,
        draft_timeout: float = 5.0,
        max_proposals: int = 16,
        max_samples: int = 9,
        sample_cost: float = 0.0,
        run_cost: float = DEFAULT_RUN_COST_S,
        on_complete: OnComplete | None = None,
        cache: ToolCache | None = None,
        trace: Any = None,
        **cache_options: Any,
    ) -> None:
        # samples="auto": λ per request from running estimates (spectool._auto); sample_cost is
        # what one draft sample is worth in seconds of the agent's time (its price / your value).
        check_options(cache_options, "spectool.Speculator", Speculator, ToolCache)
        # An AutoSamples passed as ``samples`` is the caller's (or the wrapped client's, see
        # spectool._estimates): its estimates carry over from earlier sessions and on to later ones.
        kept = samples if isinstance(samples, AutoSamples) else None
        auto = kept is not None or samples == "auto"
        if not auto and (not isinstance(samples, int) or samples < 1):
            raise ConfigError(f"samples must be an int >= 1, 'auto' or an AutoSamples, got {samples!r}")
        if max_proposals < 0 or draft_timeout <= 0 or max_samples < 0 or sample_cost < 0 or not run_cost >= 0:
            raise ConfigError(
                "max_proposals >= 0, draft_timeout > 0, max_samples >= 0, sample_cost >= 0 and "
                "run_cost >= 0 required"
            )
        # run_cost: seconds one speculative tool run is worth; never free by default, so a
        # drafter that never hits converges to λ = 0 (spectool._auto).
        if kept is not None:
            self.auto: AutoSamples | None = kept
        else:
            self.auto = AutoSamples(max_samples, sample_cost, cost_per_run_s=run_cost) if auto else None
        self.toolbox = tools if isinstance(tools, Toolbox) else Toolbox(tools)
        self.drafter = resolve_drafter(drafter)  # a name ("history", "local", …) or an object
        #: λ drafted for each model request of this session, in order (0: auto chose not to draft)
        self.samples_chosen: list[int] = []
        self.samples: int | str = samples if isinstance(samples, int) else "auto"
        self.draft_timeout, self.max_proposals = draft_timeout, max_proposals
        self.cache = cache or ToolCache(self.toolbox, on_complete=on_complete, **cache_options)
        self.draft_counters = DraftCounters()
        self._turn: Turn | None = None
        #: opt-in TraceRecorder (spectool._traces): each request + the calls that followed it
        self.trace = trace
        self._traced_request: DraftRequest | None = None

    async def __aenter__(self) -> Speculator:
        await self.cache.__aenter__()
        quiet = [f"{spec.name} ({why})" for spec in self.toolbox if (why := _never_early(spec, self.cache))]
        if quiet:  # once per session: an undeclared tool is otherwise silently never speculated
            log.info(
                "%d of %d tools never run early in this session: %s",
                len(quiet),
                len(self.toolbox),
                "; ".join(quiet),
            )
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        if self._turn is not None:
            self._turn.cancel()
        return await self.cache.__aexit__(*exc)

    @property
    def counters(self) -> CacheCounters:
        return self.cache.counters

    def stats(self) -> dict[str, Any]:
        """Cache and draft counters in one flat dict, and ``samples_chosen``: λ per model request.
        ``wasted_runs`` is live: speculative runs discarded unused, plus those finished and not
        used so far."""
        out: dict[str, Any] = {**self.cache.counters.as_dict(), **self.draft_counters.as_dict()}
        out["wasted_runs"] += self.cache.unused_finished()
        out["samples_chosen"] = list(self.samples_chosen)
        return out

    # -- drafting ---------------------------------------------------------------------------

    def start_turn(
        self, messages: Sequence[Mapping[str, Any]], tools: Iterable[Mapping[str, Any]] | None = None
    ) -> Turn:
        """Start drafting for a model request with these messages; returns at once.

        The draft task runs from the caller's next checkpoint: ``await
        anyio.lowlevel.checkpoint()`` before a main call that might complete without
        suspending (the OpenAI wrapper does this), so the drafter's request goes out first.
        """
        self.end_turn(answered=False)
        turn = self._turn = Turn()
        if self.trace is not None:
            offered = chat_tools(tools) if tools is not None else self.toolbox.openai_tools("chat")
            self._traced_request = DraftRequest(messages=list(messages), tools=offered)
        if self.drafter is None or not self.cache.is_open:
            turn.finished.set()
            return turn
        turn.samples = self.auto.choose() if self.auto is not None else int(self.samples)
        self.samples_chosen.append(turn.samples)
        if turn.samples == 0:
            self.draft_counters.undrafted_turns += 1
            turn.finished.set()
            return turn
        offered = chat_tools(tools) if tools is not None else self.toolbox.openai_tools("chat")
        # The drafter gets its own deep copy: one that edits its request in place must not
        # rewrite the caller's transcript, the main model's request or the tools' schemas.
        try:
            request = DraftRequest(
                messages=copy.deepcopy(list(messages)), tools=copy.deepcopy(offered), samples=turn.samples
            )
        except Exception as exc:  # something in the transcript cannot be copied: no drafts
            log.debug("cannot copy the request for the drafter: %r", exc)
            turn.finished.set()
            return turn
        self.cache.task_group.start_soon(self._draft, turn, request, name="spectool:draft")
        return turn

    async def _draft(self, turn: Turn, request: DraftRequest) -> None:
        assert self.drafter is not None
        self.draft_counters.drafts += 1
        watch, status = _observe.draft_started(request), "cancelled"
        _observe.draft_by(watch, self.drafter)
        try:
            with turn.scope:
                try:
                    with anyio.move_on_after(self.draft_timeout) as timeout:
                        proposals = await self.drafter.propose(request)
                except anyio.get_cancelled_exc_class() as cancelled:
                    # The turn ended while the drafter was handling an error (the SDK backing
                    # off before a retry): that failure counts, though the turn ended first.
                    failure = _handled_failure(cancelled)
                    if failure is not None:
                        self._drafter_failed(failure)
                        status = "error"
                    raise
                if self.auto is not None:
                    self.auto.observe_draft(request.samples, time.perf_counter() - turn.started)
                if timeout.cancelled_caught:
                    self.draft_counters.draft_timeouts += 1
                    status = "timeout"
                    return
                self._admit(turn, proposals)
                status = "ok"
        except BaseException as exc:  # a drafter's failure never reaches the agent
            if not isinstance(exc, Exception) and not foreign_cancellation(exc):
                raise  # a real cancellation (the turn's or the session's) goes on
            self._drafter_failed(exc)
            status = "error"
        finally:
            turn.finished.set()
            _observe.draft_finished(watch, status, len(turn.proposals), len(turn.admitted))

    def _drafter_failed(self, exc: BaseException) -> None:
        """Count a drafter failure; the first one of each drafter is a WARNING with its cause
        (drafts are best effort, but a drafter that never works should not pass unnoticed)."""
        self.draft_counters.draft_errors += 1
        if _first_failure(self.drafter):
            # one line (a log viewer's row); the traceback is at DEBUG
            log.warning(
                "drafter %s failed (%s: %s); speculation goes on without its drafts, "
                "later failures are counted in draft_errors and logged at DEBUG",
                type(self.drafter).__name__,
                type(exc).__name__,
                " ".join(str(exc).split())[:300],
            )
            log.debug("drafter %s failed", type(self.drafter).__name__, exc_info=exc)
        else:
            log.debug("drafter failed: %r", exc)

    def _admit(self, turn: Turn, proposals: Any) -> None:
        if not isinstance(proposals, (list, tuple)):
            self._drafter_failed(DrafterError(f"propose() returned {type(proposals).__name__}, not a list"))
            return
        decided: list[tuple[ToolCall, str]] = []  # λ samples often agree: decide each call once
        for raw in proposals[: self.max_proposals]:
            self.draft_counters.proposals += 1
            call = as_tool_call(raw)
            spec = self.toolbox._specs.get(call.name) if call is not None else None
            if call is None or spec is None or not spec.speculable:
                self.draft_counters.rejected += 1
                continue
            turn.proposals.append(call)
            verdict = next(
                (v for prev, v in decided if prev.name == call.name and prev.arguments == call.arguments),
                None,
            )
            if verdict is None:
                verdict = self._decide(call)
                decided.append((call, verdict))
            elif verdict == "admitted":
                self.cache.counters.duplicate_proposals += 1
            elif verdict == "skipped":
                self.cache.counters.skipped_proposals += 1
            if verdict == "admitted":
                self.draft_counters.admitted += 1
                turn.admitted.append(call)
            elif verdict == "rejected":
                self.draft_counters.rejected += 1
        self.draft_counters.rejected += max(0, len(proposals) - self.max_proposals)

    def _decide(self, call: ToolCall) -> str:
        """Hand one new proposal to the cache: "admitted", "skipped" (a bound) or "rejected"."""
        skipped = self.cache.counters.skipped_proposals
        if self.cache.speculate(call):  # validates the arguments of new entries
            return "admitted"
        return "rejected" if self.cache.counters.skipped_proposals == skipped else "skipped"

    # -- main path --------------------------------------------------------------------------

    async def resolve(self, call: ToolCall) -> Outcome:
        """The outcome of one call the main model made (cached if valid, else run now)."""
        try:
            outcome = await self.cache.resolve(call)
        except SpectoolError as exc:  # unknown tool: an outcome, as running it would be
            return Outcome(error=exc)
        if self.auto is not None and outcome.ok:
            self.auto.observe_tool(call.name, outcome.duration)
        return outcome

    async def lookup(self, call: ToolCall) -> Outcome | None:
        """The outcome of a call the drafts already ran (or are running), else None: the
        caller runs it itself. Never runs a tool (see :meth:`ToolCache.lookup`)."""
        return await self.cache.lookup(call)

    def invalidate(self, scope: str = "default") -> None:
        """State in ``scope`` changed outside spectool (a mutating call the caller ran)."""
        self.cache.invalidate(scope)

    def end_turn(self, calls: Sequence[Any] = (), answered: bool = True) -> None:
        """The model has answered with ``calls``: drafts still running are moot; with
        samples="auto" the turn's G and per-call hits feed the estimates; a ``trace`` records it."""
        if answered and self.trace is not None and self._traced_request is not None:
            self.trace.record(self._traced_request, list(calls))  # eager dispatch ends turns here too
            self._traced_request = None
        turn = self._turn
        if turn is None:
            return
        turn.cancel()
        if self.auto is not None and self.drafter is not None and not turn.observed:
            turn.observed = True
            # A request answered without calls ends when the next one starts: no G from it.
            G = time.perf_counter() - turn.started if answered else None
            runs = len({(c.name, repr(sorted(c.arguments.items()))) for c in turn.admitted})
            self.auto.observe_turn(turn.samples, G, self._hits(turn, calls), runs)

    def _hits(self, turn: Turn, calls: Sequence[Any]) -> list[tuple[str, bool, bool]]:
        """(tool, speculable, drafted in time) for each known tool among the model's calls."""
        drafted = set()
        for c in turn.admitted:
            try:
                drafted.add(self.toolbox.key(c.name, c.arguments))
            except SpectoolError:
                pass
        seen = []
        for c in calls:
            spec = self.toolbox._specs.get(getattr(c, "name", None) or "")
            if spec is None:
                continue
            try:
                hit = spec.key(c.arguments) in drafted
            except SpectoolError:
                hit = False
            seen.append((c.name, spec.speculable and not spec.gated, hit))  # gated: never early
        return seen

    async def resolve_all(self, calls: Sequence[ToolCall]) -> list[Outcome]:
        """Resolve one response's calls concurrently, with in-order state semantics.

        Calls touching the same scope keep their order where one of them mutates (a read after
        a write sees the write; a write waits for the reads before it); everything else runs
        at once. Outcomes come back in the order of ``calls``.
        """
        calls = list(calls)
        self.end_turn(calls)  # the model answered: late drafts are moot
        specs = [self.toolbox._specs.get(c.name) for c in calls]
        done = [anyio.Event() for _ in calls]
        outcomes: list[Outcome | None] = [None] * len(calls)

        async def one(i: int) -> None:
            try:
                for j in _depends_on(specs, i):
                    await done[j].wait()
                outcomes[i] = await self.resolve(calls[i])
            finally:
                done[i].set()

        if len(calls) == 1:
            await one(0)
        else:
            async with anyio.create_task_group() as tg:
                for i in range(len(calls)):
                    tg.start_soon(one, i)
        return [o for o in outcomes if o is not None]


_WARNED: weakref.WeakSet[Any] = weakref.WeakSet()  # drafters whose first failure was logged
_WARNED_IDS: set[int] = set()  # ... for drafters that cannot be weakly referenced


def _first_failure(drafter: Any) -> bool:
    """True the first time ``drafter`` fails in this process."""
    try:
        if drafter in _WARNED:
            return False
        _WARNED.add(drafter)
    except TypeError:
        if id(drafter) in _WARNED_IDS:
            return False
        _WARNED_IDS.add(id(drafter))
    return True


def _handled_failure(cancelled: BaseException) -> Exception | None:
    """The error a cancelled drafter was handling when the cancellation came, if any."""
    seen: set[int] = set()
    inner = cancelled.__context__
    while inner is not None and id(inner) not in seen:
        seen.add(id(inner))
        if isinstance(inner, Exception):
            return inner
        inner = inner.__context__
    return None


def _depends_on(specs: Sequence[ToolSpec | None], i: int) -> list[int]:
    """Earlier calls that call ``i`` must wait for (same scope, at least one mutating)."""
    me = specs[i]
    if me is None or me.effect is Effect.PURE:
        return []
    out = []
    for j in range(i):
        other = specs[j]
        if other is None or other.effect is Effect.PURE or other.scope != me.scope:
            continue
        if Effect.MUTATING in (me.effect, other.effect):
            out.append(j)
    return out
