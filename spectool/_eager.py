"""Eager dispatch: start a call the model streams as soon as its arguments are complete.

The model's own calls are the one prediction that is always right: once a streamed call's
arguments JSON closes, the call is known, and running it need not wait for the rest of the
response (more calls, text, the final chunk, the usage record). :class:`EagerBatch` starts each
call of one response on the session's main path as it becomes known and hands the outcomes to
``run_tool_calls`` when it asks, so the results are exactly those of resolving the finished
response (same calls, same cache, same ordering rule as :meth:`Speculator.resolve_all`).

Policies (``eager=`` on the wrapper):

* ``"speculable"`` (default) pure and read_only calls start when their JSON closes, under
                   exactly drafting's admission (:meth:`ToolCache.may_run_early`: an
                   ``external=True`` tool only with ``speculate_external=True``); mutating
                   calls wait for ``run_tool_calls`` as before.
* ``"all"``        mutating calls also start before ``run_tool_calls``, once their arguments
                   are final: when the stream has ended (a malformed stream may still send a
                   fragment for any call until then), in order behind the calls they depend
                   on, and never for a broken stream. Opt in only if every streamed
                   response's calls reach ``run_tool_calls``: a mutating call has run by then.
* ``False``        off.

A fragment for a call after a later call began, or for a call whose JSON had closed, means a
broken stream: nothing further starts early, and whatever started is checked against the
final message (a changed call is resolved again). A finished message's calls are matched to
an unfinished batch only by call id, and an eager read whose scope changed since it ran
(another write, an ``invalidate``) is resolved again, as a drafted read would be.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import anyio

from ._outcome import Outcome
from ._speculator import Speculator, _depends_on
from ._tools import Effect
from ._types import ToolCall
from ._wire import _get

__all__ = ["EagerBatch", "EagerPolicy", "StreamWatcher", "eager_policy"]

log = logging.getLogger("spectool.eager")

EagerPolicy = Literal["speculable", "all", "off"]


def eager_policy(value: Any) -> EagerPolicy:
    """The wrapper's ``eager=`` option as a policy (True means "speculable")."""
    from .errors import ConfigError

    if value is True or value == "speculable":
        return "speculable"
    if value is False or value is None or value == "off":
        return "off"
    if value == "all":
        return "all"
    raise ConfigError(f"eager must be 'speculable', 'all' or False, got {value!r}")


def _same(a: ToolCall, b: ToolCall, *, ids: bool = False) -> bool:
    """Same name and arguments (``ids``: and the same call id where either has one)."""
    if ids and (a.id or b.id) and a.id != b.id:
        return False
    return a.name == b.name and dict(a.arguments) == dict(b.arguments)


class EagerBatch:
    """The calls of one streamed response, started one by one as they become known."""

    def __init__(self, speculator: Speculator, policy: EagerPolicy) -> None:
        self.speculator, self.policy = speculator, policy
        self.known: dict[int, ToolCall] = {}  # ordinal -> call whose arguments closed
        self.final: set[int] = set()  # ordinals the model has moved past
        self.started: dict[int, ToolCall] = {}
        self._done: dict[int, anyio.Event] = {}
        self._outcomes: dict[int, Outcome] = {}
        self._epochs: dict[int, int] = {}  # started call -> its scope's epoch when it ran
        self.finished = False
        self.broken = False  # the stream sent something a well-formed one cannot: start nothing more
        self.ended = False  # the stream is over: every call's arguments are final

    def break_stream(self) -> None:
        if not self.broken:
            log.warning("malformed tool-call stream: nothing further starts early")
        self.broken = True

    def end(self) -> None:
        """The stream ended: arguments are final, so a mutating call may start ("all")."""
        self.ended = True
        if not self.finished and not self.broken:
            self._try_start()

    def offer(self, i: int, call: ToolCall, *, final: bool) -> None:
        """Call ``i`` is complete (``final``: and the model has moved past it); maybe start it."""
        if self.finished or self.policy == "off":
            return
        if i in self.known and not _same(self.known[i], call, ids=True):
            self.break_stream()  # a closed call changed: the stream is not well formed
            return
        self.known.setdefault(i, call)
        if final:
            self.final.add(i)
        self._try_start()

    def _admissible(self, spec: Any, i: int) -> bool:
        """Exactly what drafting admits (effect, ``external``, the session's opt-ins); under
        "all" also a mutating call, once the stream has ended (its arguments are final)."""
        cache = self.speculator.cache
        if spec.gated:  # an approval or guardrail comes first
            return False
        if spec.speculable:
            return cache.may_run_early(spec)
        return (
            self.policy == "all"
            and self.ended
            and i in self.final
            and (cache.speculate_external or not spec.external)
        )

    def _try_start(self) -> None:
        if self.broken:
            return
        specs = self._specs()
        for i in range(len(specs)):
            spec = specs[i]
            if i in self.started or spec is None:  # unknown tools are answered at resolve time
                continue
            allowed = self._admissible(spec, i)
            # Start only behind calls already started: no task waits on one that may never run.
            if not allowed or any(j not in self.started for j in _depends_on(specs, i)):
                continue
            if not self.speculator.cache.is_open:
                return
            self.started[i] = self.known[i]
            self._done[i] = anyio.Event()
            self.speculator.cache.task_group.start_soon(
                self._run, i, self.started[i], self._done[i], specs, name="spectool:eager"
            )

    def _specs(self) -> list[Any]:
        """Specs of the calls 0..n-1 known so far (the contiguous prefix)."""
        out: list[Any] = []
        while len(out) in self.known:
            out.append(self.speculator.toolbox._specs.get(self.known[len(out)].name))
        return out

    async def _run(self, i: int, call: ToolCall, done: anyio.Event, specs: Sequence[Any]) -> None:
        outcome = Outcome(cancelled=True)
        try:
            for j in _depends_on(specs, i):
                await self._done[j].wait()
            self._epochs[i] = self.speculator.cache.epoch(specs[i].scope)
            outcome = await self.speculator.resolve(call)
        except Exception as exc:  # noqa: BLE001 - never let one call break the session's task group
            outcome = Outcome(error=exc)
        finally:
            if self.started.get(i) is call:
                self._outcomes[i] = outcome
            done.set()

    def matches(self, calls: Sequence[ToolCall]) -> bool:
        """Whether ``calls`` are this response's calls: by call id (and name and arguments).
        Calls without ids match no batch: an abandoned response's runs are never handed to
        a later call that merely looks the same."""
        if self.finished or not self.known or len(calls) < len(self.known):
            return False
        for i, c in self.known.items():
            k = calls[i] if i < len(calls) else None
            if not isinstance(k, ToolCall) or not k.id or not _same(k, c, ids=True):
                return False
        return True

    async def resolve_all(self, calls: Sequence[Any]) -> list[Outcome]:
        """Outcomes of the response's calls, in order: the eager runs awaited, the rest run now
        with the same ordering rule (earlier mutating calls of the scope first). ``calls`` are
        :func:`extract_calls`'s items: a malformed one is its error tuple, answered as such."""
        self.finished = True
        self.speculator.end_turn([c for c in calls if isinstance(c, ToolCall)])
        calls = list(calls)
        for i, call in list(self.started.items()):
            now = calls[i] if i < len(calls) else None
            if not isinstance(now, ToolCall) or not _same(now, call, ids=True):  # a malformed stream
                log.warning("eagerly started call %d differs from the final one; resolving again", i)
                del self.started[i]
                self._done[i] = anyio.Event()
        await self._drop_stale(calls)
        specs = [
            self.speculator.toolbox._specs.get(c.name) if isinstance(c, ToolCall) else None for c in calls
        ]
        for i, c in enumerate(calls):
            self._done.setdefault(i, anyio.Event())
            if not isinstance(c, ToolCall):
                self._outcomes[i] = Outcome(error=c[2])
                self._done[i].set()

        async def rest(i: int) -> None:
            try:
                for j in _depends_on(specs, i):
                    await self._done[j].wait()
                self._outcomes[i] = await self.speculator.resolve(calls[i])
            finally:
                self._done[i].set()

        async with anyio.create_task_group() as tg:
            for i, c in enumerate(calls):
                if i not in self.started and isinstance(c, ToolCall):
                    tg.start_soon(rest, i)
        for i in self.started:
            await self._done[i].wait()
        return [self._outcomes[i] for i in range(len(calls))]

    async def _drop_stale(self, calls: Sequence[Any]) -> None:
        """Forget eager reads whose scope changed other than by this batch's own later writes
        (state epochs, as for drafted reads): resolved now, they see the current state."""
        specs = self.speculator.toolbox._specs
        for i in sorted(self.started):
            spec = specs.get(self.started[i].name)
            if spec is None or spec.effect is not Effect.READ_ONLY:
                continue
            await self._done[i].wait()
            later = [
                j for j in self.started if j > i and _mutates(specs.get(self.started[j].name), spec.scope)
            ]
            # the epoch when this batch's first later write of the scope began (now if it has
            # not begun yet: nothing awaits between here and the check)
            now = self.speculator.cache.epoch(spec.scope)
            seen = self._epochs.get(min(later), now) if later else now
            if i in self._epochs and seen != self._epochs[i]:
                log.info("eager read %d is stale (its scope changed); resolving again", i)
                del self.started[i]
                self._outcomes.pop(i, None)
                self._done[i] = anyio.Event()


def _mutates(spec: Any, scope: str) -> bool:
    return spec is not None and not spec.speculable and spec.scope == scope


class StreamWatcher:
    """Reads a stream's events and tells an :class:`EagerBatch` which calls closed, when the
    stream ended, and when it broke (a fragment for a call the model had moved past)."""

    def __init__(self, batch: EagerBatch) -> None:
        self.batch = batch
        self._closed: dict[int, ToolCall] = {}  # chat slot -> its call, once the JSON closed
        self._text: dict[int, tuple[Any, int]] = {}  # chat slot -> (name, arguments length)
        self._sent: set[tuple[int, bool]] = set()
        self._ordinal: dict[int, int] = {}  # responses output_index -> call ordinal
        self._items_done: set[int] = set()  # responses output indexes whose item is done

    def see_chat(self, slots: Mapping[int, Mapping[str, Any]], chunk: Any) -> None:
        """After the accumulator took ``chunk``: which slots closed, which the model left."""
        choices = [ch for ch in (_get(chunk, "choices") or ()) if _get(ch, "index", 0) == 0]
        finishing = any(_get(ch, "finish_reason") for ch in choices)
        self._check_order(slots)
        touched = {
            _get(tc, "index", 0)
            for ch in choices
            for tc in (_get(_get(ch, "delta") or {}, "tool_calls") or ())
        }
        for slot in sorted(slots):
            if slot not in self._closed and (slot in touched or finishing):
                call = _closed_call(slots[slot], finishing)
                if call is not None:
                    self._closed[slot] = call
        order = sorted(slots)
        for n, slot in enumerate(order):
            final = finishing or n + 1 < len(order)
            if slot in self._closed and (n, final) not in self._sent:
                self._sent.add((n, final))
                self.batch.offer(n, self._closed[slot], final=final)

    def _check_order(self, slots: Mapping[int, Mapping[str, Any]]) -> None:
        """A slot whose text changed after a later slot began, or after its JSON closed, is a
        broken stream (a well-formed one sends each call's fragments in one run)."""
        texts = {s: _progress(slots[s]) for s in slots}
        changed = [s for s, t in texts.items() if self._text.get(s) != t and s in self._text]
        if any(s in self._closed or any(o > s for o in self._text) for s in changed):
            self.batch.break_stream()
        self._text = texts

    def see_responses(self, event: Any) -> None:
        kind = _get(event, "type")
        item = _get(event, "item")
        index = _get(event, "output_index", 0)
        if kind == "response.output_item.added" and _get(item, "type") == "function_call":
            if index in self._ordinal or any(o > index for o in self._ordinal):
                self.batch.break_stream()
            self._ordinal[index] = len(self._ordinal)
        elif kind == "response.function_call_arguments.delta":
            if index in self._items_done or any(o > index for o in self._ordinal):
                self.batch.break_stream()  # a fragment for a call the model had left
        elif kind == "response.output_item.done" and _get(item, "type") == "function_call":
            i = self._ordinal.get(index)
            self._items_done.add(index)
            fn = {"name": _get(item, "name"), "arguments": _get(item, "arguments")}
            call = _closed_call({"id": _get(item, "call_id"), "function": fn}, True)
            if i is not None and call is not None:
                self.batch.offer(i, call, final=True)

    def end(self, slots: Mapping[int, Mapping[str, Any]] | None = None) -> None:
        """The stream is over: a chat call still open is judged as ended, then arguments are
        final and the batch may start what waited for that."""
        if slots is not None:
            for n, slot in enumerate(sorted(slots)):
                call = self._closed.get(slot) or _closed_call(slots[slot], True)
                if call is not None:
                    self.batch.offer(n, call, final=True)
        self.batch.end()


def _progress(slot: Mapping[str, Any]) -> tuple[Any, int]:
    """How far a chat slot has come (the accumulator only appends): name, arguments length."""
    fn = slot.get("function") or {}
    return fn.get("name"), len(fn.get("arguments") or "")


def _closed_call(slot: Mapping[str, Any], ended: bool) -> ToolCall | None:
    """The call in an accumulator slot if its arguments are a complete JSON object (``ended``:
    the call is over, so no arguments at all mean ``{}``)."""
    fn = slot.get("function") or {}
    name, text = fn.get("name"), fn.get("arguments") or ""
    if ended and not text.strip() and name:
        return ToolCall(name=name, arguments={}, id=slot.get("id"))
    if not name or "}" not in text:
        return None
    try:
        args = json.loads(text)
    except ValueError:
        return None
    if not isinstance(args, dict):
        return None
    return ToolCall(name=name, arguments=args, id=slot.get("id"))
