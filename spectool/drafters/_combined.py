"""CombinedDrafter: run several drafters at once and merge their proposals.

Each drafter gets its own timeout; one that raises, hangs or returns garbage is dropped for
this request and never delays or breaks the others. Proposals are merged in drafter order and
deduplicated by canonical key (the tool's schema or a Toolbox's per-tool key function).

With ``rank="confidence"`` the merge is ordered by calibrated per-tool confidence instead: each
request shows the calls the main model made since the previous one, so the drafter scores its
members' previous proposals against them and keeps, per (member, tool), a Laplace-smoothed
hit rate (hits + 1) / (proposals + 2). Proposals are then ranked by that estimate, so the
member that has been right about a tool comes first for that tool.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from .._types import Drafter, DraftRequest, ToolCall
from ..errors import ConfigError, DrafterError
from ._common import assistant_calls, call_key, tool_schemas
from .history._history import _session_key

__all__ = ["CombinedDrafter", "DrafterStats"]

log = logging.getLogger("spectool.drafters")


@dataclass
class DrafterStats:
    """Per-drafter counters of a CombinedDrafter."""

    requests: int = 0
    proposals: int = 0
    failures: int = 0
    timeouts: int = 0


class CombinedDrafter:
    """Several drafters concurrently; ``drafters`` items are a drafter or ``(drafter, timeout)``.

    ``timeout`` is the default per-drafter limit in seconds (None: no limit of its own; the
    speculator's limit still applies). ``toolbox`` (a :class:`~spectool.Toolbox`) supplies
    custom key functions for deduplication. ``max_calls`` caps the merged list.
    """

    def __init__(
        self,
        drafters: Sequence[Any],
        *,
        timeout: float | None = None,
        toolbox: Any = None,
        max_calls: int | None = None,
        rank: str = "order",
    ) -> None:
        if rank not in ("order", "confidence"):
            raise ConfigError(f"rank must be 'order' or 'confidence', got {rank!r}")
        self.rank = rank
        #: (member index, tool) -> [proposals scored, hits]
        self.calibration: dict[tuple[int, str], list[int]] = {}
        self._last: tuple[str | None, int, list[list[tuple[str, str]]]] | None = None
        self._entries: list[tuple[Drafter, float | None]] = []
        for item in drafters:
            drafter, limit = item if isinstance(item, tuple) else (item, timeout)
            if not callable(getattr(drafter, "propose", None)):
                raise ConfigError(f"{drafter!r} is not a drafter (no propose method)")
            if limit is not None and limit <= 0:
                raise ConfigError(f"drafter timeout must be positive, got {limit}")
            self._entries.append((drafter, limit))
        if not self._entries:
            raise ConfigError("CombinedDrafter needs at least one drafter")
        self.toolbox = toolbox
        self.max_calls = max_calls
        self.stats = [DrafterStats() for _ in self._entries]

    @property
    def drafters(self) -> list[Drafter]:
        return [d for d, _ in self._entries]

    async def propose(self, request: DraftRequest) -> list[ToolCall]:
        results: list[list[ToolCall] | None] = [None] * len(self._entries)
        errors: list[BaseException] = []
        async with anyio.create_task_group() as tg:
            for i, (drafter, limit) in enumerate(self._entries):
                tg.start_soon(self._run_one, i, drafter, limit, request, results, errors)
        if errors and len(errors) == len(self._entries):
            raise DrafterError(f"all {len(errors)} drafters failed; first: {errors[0]!r}") from errors[0]
        schemas = tool_schemas(request.tools)
        if self.rank == "confidence":
            self._calibrate(request.messages, schemas)
            self._last = (
                _session_key(request.messages),
                len(request.messages),
                [[(self._key(c, schemas), c.name) for c in calls or ()] for calls in results],
            )
        candidates = [(i, call) for i, calls in enumerate(results) for call in calls or ()]
        if self.rank == "confidence":  # stable: ties keep member order, then each member's order
            candidates.sort(key=lambda ic: -self.confidence(ic[0], ic[1].name))
        merged: list[ToolCall] = []
        seen: set[str] = set()
        for _, call in candidates:
            key = self._key(call, schemas)
            if key not in seen:
                seen.add(key)
                merged.append(call)
        return merged[: self.max_calls] if self.max_calls is not None else merged

    def confidence(self, member: int, tool: str) -> float:
        """Smoothed hit rate of ``member``'s proposals of ``tool`` so far (0.5 with no data)."""
        n, hits = self.calibration.get((member, tool), (0, 0))
        return (hits + 1) / (n + 2)

    def _calibrate(self, messages: Sequence[Any], schemas: dict[str, Any]) -> None:
        """Score the previous request's proposals against the calls made since (same session)."""
        if self._last is None:
            return
        session, start, proposed = self._last
        if session != _session_key(messages) or len(messages) < start:
            return
        made = {
            self._key(c, schemas)
            for m in messages[start:]
            if m.get("role") == "assistant"
            for c in assistant_calls(m)
        }
        if not made:
            return
        for member, props in enumerate(proposed):
            for key, tool in dict(props).items():
                counts = self.calibration.setdefault((member, tool), [0, 0])
                counts[0] += 1
                counts[1] += key in made

    async def _run_one(
        self,
        i: int,
        drafter: Drafter,
        limit: float | None,
        request: DraftRequest,
        results: list[list[ToolCall] | None],
        errors: list[BaseException],
    ) -> None:
        stats = self.stats[i]
        stats.requests += 1
        try:
            with anyio.fail_after(limit):
                calls = await drafter.propose(request)
            kept = [c for c in calls if isinstance(c, ToolCall)]  # garbage items dropped
            results[i] = kept
            stats.proposals += len(kept)
        except TimeoutError:
            stats.timeouts += 1
            log.debug("drafter %r timed out after %ss", drafter, limit)
        except Exception as exc:  # a drafter's failure stays its own
            stats.failures += 1
            errors.append(exc)
            log.debug("drafter %r failed: %r", drafter, exc)

    def _key(self, call: ToolCall, schemas: dict[str, Any]) -> str:
        if self.toolbox is not None and call.name in self.toolbox:
            try:
                return self.toolbox.key(call.name, call.arguments)
            except Exception:  # unkeyable under the tool's key function: schema key instead
                pass
        return call_key(call, schemas)
