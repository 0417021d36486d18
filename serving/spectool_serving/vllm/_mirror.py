"""The worker-side copy of what O2 needs from the tool cache, and its draft counters.

The authoritative :class:`spectool_serving.store.ToolOutputStore` lives in the API server
process (owner, TTL, canonical keys). The proposer runs in a worker process, so the endpoint
pushes each accepted entry here over vLLM's ``collective_rpc``: only ``(name, arguments
text)`` per response, newest first, with a wall-clock expiry. No vLLM imports: unit-testable.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["DraftMirror", "ProposerCounters"]


@dataclass
class ProposerCounters:
    """Proposed and accepted draft tokens, tool-call drafts apart from text (fallback) drafts."""

    tool_drafts: int = 0
    tool_proposed: int = 0
    tool_accepted: int = 0
    text_drafts: int = 0
    text_proposed: int = 0
    text_accepted: int = 0
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        d["tool_acceptance"] = self.tool_accepted / self.tool_proposed if self.tool_proposed else None
        d["text_acceptance"] = self.text_accepted / self.text_proposed if self.text_proposed else None
        return {**d, **{k: list(v) if isinstance(v, deque) else v for k, v in self.extra.items()}}


class DraftMirror:
    """response id -> [(name, arguments text, expires)], newest first; bounded."""

    def __init__(
        self, max_responses: int = 4096, max_entries: int = 256, clock: Callable[[], float] = time.time
    ) -> None:
        self._items: OrderedDict[str, list[tuple[str, str, float]]] = OrderedDict()
        self.max_responses, self.max_entries, self._clock = max_responses, max_entries, clock

    def put(self, response_id: str, name: str, arguments: str, expires: float) -> None:
        entries = [e for e in self._items.pop(response_id, []) if (e[0], e[1]) != (name, arguments)]
        entries.insert(0, (name, arguments, expires))
        self._items[response_id] = entries[: self.max_entries]
        while len(self._items) > self.max_responses:
            self._items.popitem(last=False)

    def drop(self, response_id: str) -> None:
        self._items.pop(response_id, None)

    def entries(self, response_id: str) -> list[tuple[str, str]]:
        """Live (name, arguments) pairs, newest first."""
        found = self._items.get(response_id)
        if not found:
            return []
        now = self._clock()
        return [(n, a) for n, a, exp in found if exp >= now]

    def __len__(self) -> int:
        return len(self._items)
