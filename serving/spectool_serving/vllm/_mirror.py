"""The worker-side copy of what O2 needs from the tool cache, and its draft counters.

The authoritative :class:`spectool_serving.store.ToolOutputStore` lives in the API server
process (owner, TTL, canonical keys). The proposer runs in a worker process, so the endpoint
pushes each accepted entry here over vLLM's ``collective_rpc``: only ``(name, arguments
text)`` per response, newest first, with a wall-clock expiry. No vLLM imports: unit-testable.

Entries belong to a *scope* ``(tenant tag, response id)``, as in the store: a response id is
chosen by the client (``X-Request-Id``), so two tenants may hold the same one. The proposer
only sees engine request ids, so the endpoint registers, per scope, the exact engine ids its
requests run under (the response id and its O3 hop ids). An engine id registered by two live
scopes is ambiguous and drafts nothing: one tenant's cached arguments never reach another's
rows, a post lands in its own tenant's scope, and a close drops only its own scope.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable

__all__ = ["DraftMirror", "ProposerCounters", "Scope", "tenant_tag"]

Scope = tuple[str, str]  # (tenant tag, response id)


def tenant_tag(tenant: str) -> str:
    """A stable tag for a tenant (its bearer token): workers never hold the token itself."""
    return hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:24]


class ProposerCounters:
    """Drafts, proposed and accepted draft tokens of each kind: tool-call drafts apart from
    text (fallback) drafts, as ``tool_proposed`` and the like; ``extra``: more figures."""

    KINDS = ("tool", "text")

    def __init__(self, **counts: int) -> None:
        self.counts = {f"{k}_{n}": 0 for k in self.KINDS for n in ("drafts", "proposed", "accepted")}
        if unknown := counts.keys() - self.counts.keys():
            raise TypeError(f"no such counters: {sorted(unknown)}")
        self.counts.update(counts)
        self.extra: dict = {}

    def add(self, kind: str, **counts: int) -> None:
        """``add("tool", drafts=1, proposed=5)``: counters of one kind go up."""
        for name, n in counts.items():
            self.counts[f"{kind}_{name}"] += n

    def as_dict(self, tenant: str | None = None) -> dict:
        """Counters; sampled texts (``(tenant tag, sample)`` pairs in a deque) only for
        ``tenant``'s own rows: what a tenant's model wrote is that tenant's business."""
        d: dict = dict(self.counts)
        for k in self.KINDS:
            proposed = d[f"{k}_proposed"]
            d[f"{k}_acceptance"] = d[f"{k}_accepted"] / proposed if proposed else None
        for k, v in self.extra.items():
            d[k] = [s for t, s in v if t == tenant] if isinstance(v, deque) else v
        return d


class DraftMirror:
    """scope -> [(name, arguments text, expires)], newest first; engine id -> scopes; bounded."""

    def __init__(
        self, max_responses: int = 4096, max_entries: int = 256, clock: Callable[[], float] = time.time
    ) -> None:
        self._items: OrderedDict[Scope, list[tuple[str, str, float]]] = OrderedDict()
        self._ids: dict[Scope, tuple[str, ...]] = {}
        self._owners: dict[str, set[Scope]] = {}
        self.max_responses, self.max_entries, self._clock = max_responses, max_entries, clock

    def open(self, scope: Scope, engine_ids: Iterable[str]) -> None:
        """Register the exact engine request ids (vLLM's random suffix aside) of a scope."""
        self.drop(scope)
        ids = tuple(dict.fromkeys(engine_ids))
        self._ids[scope] = ids
        self._items[scope] = []
        for i in ids:
            self._owners.setdefault(i, set()).add(scope)
        while len(self._items) > self.max_responses:
            self.drop(next(iter(self._items)))

    def put(self, scope: Scope, name: str, arguments: str, expires: float) -> None:
        """Mirror one entry; a scope that is not open (closed, evicted) takes none."""
        if scope not in self._items:
            return
        entries = [e for e in self._items[scope] if (e[0], e[1]) != (name, arguments)]
        entries.insert(0, (name, arguments, expires))
        self._items[scope] = entries[: self.max_entries]

    def drop(self, scope: Scope) -> None:
        self._items.pop(scope, None)
        for i in self._ids.pop(scope, ()):
            owners = self._owners.get(i)
            if owners is not None:
                owners.discard(scope)
                if not owners:
                    del self._owners[i]

    def empty(self) -> bool:
        """No scope holds an entry: no row can get a tool draft this step (O2's fast path)."""
        return not any(self._items.values())

    def scope_of(self, engine_id: str) -> Scope | None:
        """The one live scope an engine id belongs to; None if none or ambiguous."""
        owners = self._owners.get(engine_id)
        return next(iter(owners)) if owners is not None and len(owners) == 1 else None

    def entries(self, engine_id: str) -> list[tuple[str, str]]:
        """Live (name, arguments) pairs of the scope an engine id runs under, newest first."""
        scope = self.scope_of(engine_id)
        found = self._items.get(scope) if scope is not None else None
        if not found:
            return []
        now = self._clock()
        return [(n, a) for n, a, exp in found if exp >= now]

    def __len__(self) -> int:
        return len(self._items)
