"""How one run of a tool ends, and what a :class:`~spectool.ToolCache` counted of its runs.

:func:`run_tool` runs a tool once and turns however it ended into an :class:`Outcome`: its
value, its exception (kept, re-raised only when the main model asks for the call), or a
cancellation. A ``CancelledError`` that the tool raised itself, with no cancel scope cancelled,
is that tool's failure (:func:`foreign_cancellation`), not the caller's cancellation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import anyio

from ._observe import hooks as _observe
from ._tools import ToolSpec
from ._types import ToolCall
from .errors import SpectoolError, ToolError

__all__ = ["CacheCounters", "OnComplete", "Outcome", "foreign_cancellation", "run_tool", "sole_exception"]


def foreign_cancellation(exc: BaseException) -> bool:
    """True if ``exc`` is a cancellation nobody requested: a tool or drafter raised
    ``CancelledError`` itself while no cancel scope around it was cancelled. Such an error is
    that code's failure; letting it propagate would abandon the agent run without a trace.
    (Only asyncio lets user code raise its cancellation class: trio's has no public
    constructor.)"""
    if not isinstance(exc, anyio.get_cancelled_exc_class()):
        return False
    try:
        import asyncio

        task = asyncio.current_task()
    except RuntimeError:
        return False
    return task is not None and task.cancelling() == 0


@dataclass(frozen=True)
class Outcome:
    """How one run of a tool ended: a value, an exception, or cancelled before it finished."""

    value: Any = None
    error: BaseException | None = None
    cancelled: bool = False
    started: float = 0.0
    finished: float = 0.0
    speculative: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.cancelled

    @property
    def duration(self) -> float:
        return max(0.0, self.finished - self.started)

    def unwrap(self) -> Any:
        """The value, or raise the tool's exception as the tool itself raised it."""
        if self.error is not None:
            raise self.error
        if self.cancelled:  # pragma: no cover - callers re-run cancelled entries
            raise SpectoolError("tool run was cancelled")
        return self.value


#: Called when a speculative run finishes: ``on_complete(call, key, outcome)`` (sync or async).
OnComplete = Callable[[ToolCall, str, Outcome], "Awaitable[None] | None"]


@dataclass
class CacheCounters:
    """What the cache did. ``time_saved`` estimates seconds the main path did not wait."""

    hits: int = 0  # main-path call served by a finished entry
    joins: int = 0  # main-path call joined a run still in flight
    misses: int = 0  # main-path call ran the tool now
    speculative_started: int = 0
    speculative_errors: int = 0  # speculative runs that raised (surfaced only on use)
    duplicate_proposals: int = 0  # proposals that joined an existing entry
    skipped_proposals: int = 0  # refused: capacity, concurrency limit, or closed
    stale_discards: int = 0  # read_only entries invalidated by a mutation in their scope
    wasted_runs: int = 0  # speculative runs never used (evicted, expired, stale, closed)
    mutating_runs: int = 0  # main-path runs of mutating tools (never speculative)
    time_saved: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sole_exception(group: BaseExceptionGroup) -> BaseException | None:
    """The one exception a group (of groups) of one holds, else None."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup):
        if len(inner.exceptions) != 1:
            return None
        inner = inner.exceptions[0]
    return inner


async def run_tool(
    call: ToolCall, spec: ToolSpec, clock: Callable[[], float], *, speculative: bool
) -> Outcome:
    """Run ``call`` once; observers see its start and end (a real cancellation re-raises)."""
    started = clock()
    watch = _observe.tool_started(call, spec, speculative)
    try:
        value = await spec.invoke(call.arguments)
    except Exception as exc:  # the tool's own failure is its outcome
        outcome = Outcome(error=exc, started=started, finished=clock(), speculative=speculative)
    except BaseException as exc:
        if not foreign_cancellation(exc):
            # a real cancellation (ours or the caller's) goes on; observers still see the end
            _observe.tool_finished(
                watch, Outcome(cancelled=True, started=started, finished=clock(), speculative=speculative)
            )
            raise
        error = ToolError(
            f"tool {spec.name!r} raised {type(exc).__name__} without being cancelled", tool=spec.name
        )
        error.__cause__ = exc
        outcome = Outcome(error=error, started=started, finished=clock(), speculative=speculative)
    else:
        outcome = Outcome(value=value, started=started, finished=clock(), speculative=speculative)
    _observe.tool_finished(watch, outcome)
    return outcome
