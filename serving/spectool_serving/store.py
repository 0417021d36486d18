"""The engine-side tool-output store: speculative tool outputs posted by clients (Algorithm 5).

A response is a *scope* named by ``(tenant, response id)``: ids are namespaced by tenant, so
a second tenant can neither re-open nor choose another's scope (the same id string opened by
another tenant is a different scope), and re-opening a live id is refused (409) rather than
silently replacing it. Entries are found two ways: by full key — the same
:func:`spectool.keys.canonical_key` the client uses, with the tool's schema from the
request — and by tool name, newest first, for drafting a started call (O2).

Effects (the client declares them per entry): a ``pure`` entry may be served any number of
times; a ``read_only`` entry (the default) is bound to the response it was posted to, served
at most once, and dropped for good once that response emitted a call the engine did not serve
(:meth:`fence`): the client may be running a write the engine cannot see.

Bounds: a TTL per entry (``keep_alive``, capped), entries per response, open responses per
tenant (a tenant over its quota loses its own oldest open response, never another's) and in
all (a new open past it is refused, 429). :meth:`sweep` drops expired scopes and entries; it
runs by itself at most every ``sweep_every`` seconds from :meth:`open` and :meth:`post`.
Thread-safe; no engine imports, so any backend (this engine, the vLLM plugin) can hold one.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from spectool.errors import ToolCacheError
from spectool.keys import canonical_key

__all__ = ["Effect", "StoredOutput", "ToolOutputStore"]

Effect = Literal["pure", "read_only"]
_Scope = tuple[str, str]  # (tenant, response id)


@dataclass(frozen=True)
class StoredOutput:
    name: str
    params: Mapping[str, Any]
    output: Any
    expires: float
    effect: Effect = "read_only"


@dataclass
class _Response:
    schemas: Mapping[str, Mapping[str, Any] | None]
    expires: float
    open: bool = True
    fenced: bool = False  # a call left the engine unserved: read-only entries are over
    by_key: OrderedDict[str, StoredOutput] = field(default_factory=OrderedDict)


def _schemas(tools: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any] | None]:
    out = {}
    for t in tools or ():
        fn = t.get("function", t)
        out[fn["name"]] = fn.get("parameters")
    return out


@dataclass(eq=False, kw_only=True)
class ToolOutputStore:
    """Posted tool outputs keyed by (tenant, response id) and canonical call key."""

    ttl: float = 300.0  # seconds an entry lives at most; a post's keep_alive may shorten it
    max_entries: int = 256  # per response: past it the oldest entry goes
    max_responses: int = 4096  # scopes in all (finished ones go first); past it an open is 429
    max_open_per_tenant: int = 256  # past it the tenant's own oldest open response goes
    grace: float = 60.0  # seconds a finished response's id stays known (its posts get 410)
    open_ttl: float = 3600.0  # seconds a response may stay open
    sweep_every: float = 10.0  # seconds between sweeps of expired scopes and entries
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._responses: OrderedDict[_Scope, _Response] = OrderedDict()
        self._next_sweep = self.clock() + self.sweep_every

    def __len__(self) -> int:
        return len(self._responses)

    # -- lifecycle of a response --------------------------------------------------------------
    def open(self, response_id: str, owner: str, tools: Iterable[Mapping[str, Any]] = ()) -> None:
        """Start accepting posts for a response (called when the request is admitted).

        Raises :class:`ToolCacheError` 409 if this tenant already holds the id (live or in
        its grace period) and 429 when the store holds ``max_responses`` open responses."""
        self._maybe_sweep()
        scope = (owner, response_id)
        with self._lock:
            if scope in self._responses:
                raise ToolCacheError(f"response id {response_id!r} is already in use", status_code=409)
            mine = [s for s, r in self._responses.items() if s[0] == owner and r.open]
            while len(mine) >= self.max_open_per_tenant:
                del self._responses[mine.pop(0)]  # the tenant's own oldest, never another's
            if len(self._responses) >= self.max_responses:
                for s in [s for s, r in self._responses.items() if not r.open]:
                    del self._responses[s]
                    if len(self._responses) < self.max_responses:
                        break
            if len(self._responses) >= self.max_responses:
                raise ToolCacheError("too many open responses; retry later", status_code=429)
            self._responses[scope] = _Response(_schemas(tools), self.clock() + self.open_ttl)

    def close(self, response_id: str, owner: str) -> None:
        """The response finished: later posts get 410; the id is forgotten after ``grace``."""
        with self._lock:
            r = self._responses.get((owner, response_id))
            if r is not None:
                r.open, r.by_key = False, OrderedDict()
                r.expires = self.clock() + self.grace

    def fence(self, response_id: str, owner: str) -> None:
        """The response emitted a call the engine did not serve: the client may run a write
        next, so no read-only entry posted to this response is served any more."""
        with self._lock:
            r = self._responses.get((owner, response_id))
            if r is not None:
                r.fenced = True
                for k in [k for k, e in r.by_key.items() if e.effect == "read_only"]:
                    del r.by_key[k]

    # -- the endpoint -----------------------------------------------------------------------------
    def post(self, response_id: str, owner: str, items: Iterable[Any]) -> int:
        """Store posted entries (``ToolOutputItem`` models or equivalent mappings); returns how
        many were kept (read-only entries posted after :meth:`fence` are not).

        Raises :class:`ToolCacheError` with an HTTP status: 404 unknown id (or another
        tenant's: ids are per tenant), 410 finished, 422 malformed items."""
        entries = [_fields(i, item) for i, item in enumerate(items)]
        self._maybe_sweep()
        now = self.clock()
        kept = 0
        with self._lock:
            r = self._live(response_id, owner)
            for name, params, output, keep_alive, effect in entries:
                if r.fenced and effect == "read_only":
                    continue
                try:
                    key = canonical_key(name, params, r.schemas.get(name))
                except ValueError as exc:
                    raise ToolCacheError(f"item for {name!r}: {exc}", status_code=422) from exc
                ttl = min(self.ttl, keep_alive) if keep_alive is not None else self.ttl
                r.by_key.pop(key, None)  # re-posting refreshes recency
                r.by_key[key] = StoredOutput(name, params, output, now + ttl, effect)
                kept += 1
                while len(r.by_key) > self.max_entries:
                    r.by_key.popitem(last=False)
        return kept

    def _live(self, response_id: str, owner: str) -> _Response:
        r = self._responses.get((owner, response_id))
        if r is None:
            # another tenant's id answers the same: its existence is not this tenant's business
            raise ToolCacheError(f"unknown response id {response_id!r}", status_code=404)
        if not r.open:
            raise ToolCacheError(f"response {response_id!r} has finished or expired", status_code=410)
        return r

    # -- lookups (engine side) -----------------------------------------------------------------
    def take(
        self, response_id: str, owner: str, name: str, arguments: str | Mapping[str, Any]
    ) -> StoredOutput | None:
        """Full-key hit (O3) or None; a read-only entry is consumed by the hit. Never raises
        on odd arguments."""
        with self._lock:
            r = self._responses.get((owner, response_id))
            if r is None or not r.open:
                return None
            try:
                key = canonical_key(name, arguments, r.schemas.get(name))
            except ValueError:
                return None
            entry = r.by_key.get(key)
            if entry is None or entry.expires < self.clock():
                return None
            if entry.effect == "read_only":
                del r.by_key[key]
            return entry

    def by_name(self, response_id: str, owner: str, name: str) -> list[StoredOutput]:
        """Live entries of one tool, newest first (O2 drafts from these; drafts are verified,
        so reading them consumes nothing)."""
        now = self.clock()
        with self._lock:
            r = self._responses.get((owner, response_id))
            if r is None or not r.open:
                return []
            return [e for e in reversed(r.by_key.values()) if e.name == name and e.expires >= now]

    def sweep(self) -> None:
        """Forget expired responses (finished past their grace, or open past ``open_ttl``)
        and expired entries."""
        now = self.clock()
        with self._lock:
            self._next_sweep = now + self.sweep_every
            for s in [s for s, r in self._responses.items() if r.expires < now]:
                del self._responses[s]
            for r in self._responses.values():
                for k in [k for k, e in r.by_key.items() if e.expires < now]:
                    del r.by_key[k]

    def _maybe_sweep(self) -> None:
        if self.clock() >= self._next_sweep:
            self.sweep()


def _fields(i: int, item: Any) -> tuple[str, dict, Any, float | None, Effect]:
    """(name, params, output, keep_alive, effect) of one item, a model or a mapping."""
    from .schemas import ToolOutputItem

    if not isinstance(item, ToolOutputItem):
        try:
            item = ToolOutputItem.model_validate(item)
        except ValueError as exc:
            raise ToolCacheError(f"item {i}: {exc}", status_code=422) from exc
    return item.name, dict(item.params or {}), item.output, item.keep_alive, item.effect
