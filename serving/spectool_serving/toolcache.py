"""The engine-side tool cache: speculative tool outputs posted by clients (Algorithm 5).

Entries live under a response id and are found two ways: by full key ``(response id,
canonical key)`` — the same :func:`spectool.keys.canonical_key` the client cache uses, with
the tool's schema from the request — and by ``(response id, tool name)``, newest first, for
drafting a started call (O2). Each response has an owner (the tenant: API key or bearer
token); only the owner may post, and lookups happen only inside the owner's own response, so
no tenant ever sees another's entries. Bounded by TTL (per entry ``keep_alive``, capped), by
entries per response and by the number of open responses. Thread-safe; no engine imports, so
any backend (this engine, a vLLM plugin) can hold one.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from spectool.errors import ToolCacheError
from spectool.keys import canonical_key

__all__ = ["CacheEntry", "ToolCache"]


@dataclass(frozen=True)
class CacheEntry:
    name: str
    params: Mapping[str, Any]
    output: Any
    expires: float


@dataclass
class _Response:
    owner: str
    schemas: Mapping[str, Mapping[str, Any] | None]
    expires: float
    open: bool = True
    by_key: "OrderedDict[str, CacheEntry]" = field(default_factory=OrderedDict)


class ToolCache:
    """Store keyed by (response id, canonical key) and (response id, tool name)."""

    def __init__(self, *, ttl: float = 300.0, max_entries: int = 256, max_responses: int = 4096,
                 grace: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.max_entries, self.max_responses, self.grace = ttl, max_entries, max_responses, grace
        self._clock = clock
        self._lock = threading.Lock()
        self._responses: OrderedDict[str, _Response] = OrderedDict()

    # -- lifecycle of a response --------------------------------------------------------------
    def open(self, response_id: str, owner: str, tools: list[Mapping[str, Any]] = ()) -> None:
        """Start accepting posts for a response (called when the request is admitted)."""
        schemas = {}
        for t in tools or ():
            fn = t.get("function", t)
            schemas[fn["name"]] = fn.get("parameters")
        with self._lock:
            self._responses[response_id] = _Response(owner, schemas, float("inf"))  # open: no expiry
            while len(self._responses) > self.max_responses:
                self._responses.popitem(last=False)

    def close(self, response_id: str) -> None:
        """The response finished: later posts get 410; the id is forgotten after ``grace``."""
        with self._lock:
            r = self._responses.get(response_id)
            if r is not None:
                r.open, r.by_key = False, OrderedDict()
                r.expires = self._clock() + self.grace

    # -- the endpoint -----------------------------------------------------------------------------
    def post(self, response_id: str, owner: str, items: Any) -> int:
        """Validate and store a posted array; returns how many entries were cached.

        Raises :class:`ToolCacheError` with an HTTP status: 404 unknown id, 410 expired or
        finished, 403 another tenant, 422 malformed items.
        """
        entries = self._validate(items)
        now = self._clock()
        with self._lock:
            r = self._live(response_id, owner, now)
            for name, params, output, keep_alive in entries:
                try:
                    key = canonical_key(name, params, r.schemas.get(name))
                except ValueError as exc:
                    raise ToolCacheError(f"item for {name!r}: {exc}", status_code=422) from exc
                ttl = min(self.ttl, keep_alive) if keep_alive is not None else self.ttl
                r.by_key.pop(key, None)  # re-posting refreshes recency
                r.by_key[key] = CacheEntry(name, params, output, now + ttl)
                while len(r.by_key) > self.max_entries:
                    r.by_key.popitem(last=False)
        return len(entries)

    def _live(self, response_id: str, owner: str, now: float) -> _Response:
        r = self._responses.get(response_id)
        if r is None:
            raise ToolCacheError(f"unknown response id {response_id!r}", status_code=404)
        if r.owner != owner:
            # same answer shape as unknown would leak existence; 403 is clearer and leaks nothing
            raise ToolCacheError("this response belongs to another API key", status_code=403)
        if not r.open:
            raise ToolCacheError(f"response {response_id!r} has finished or expired", status_code=410)
        return r

    @staticmethod
    def _validate(items: Any) -> list[tuple[str, dict, Any, float | None]]:
        if not isinstance(items, list):
            raise ToolCacheError("body must be a JSON array of {name, params?, output, keep_alive?}",
                                 status_code=422)
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ToolCacheError(f"item {i}: must be an object", status_code=422)
            unknown = set(item) - {"name", "params", "output", "keep_alive"}
            if unknown:
                raise ToolCacheError(f"item {i}: unknown fields {sorted(unknown)}", status_code=422)
            name, params = item.get("name"), item.get("params", {})
            if not isinstance(name, str) or not name:
                raise ToolCacheError(f"item {i}: 'name' must be a non-empty string", status_code=422)
            if params is None:
                params = {}
            if not isinstance(params, Mapping):
                raise ToolCacheError(f"item {i}: 'params' must be an object", status_code=422)
            if "output" not in item:
                raise ToolCacheError(f"item {i}: 'output' is required", status_code=422)
            keep = item.get("keep_alive")
            if keep is not None and (isinstance(keep, bool) or not isinstance(keep, (int, float)) or keep <= 0):
                raise ToolCacheError(f"item {i}: 'keep_alive' must be a positive number", status_code=422)
            out.append((name, dict(params), item["output"], keep))
        return out

    # -- lookups (engine side) -----------------------------------------------------------------
    def get(self, response_id: str, name: str, arguments: str | Mapping[str, Any]) -> CacheEntry | None:
        """Full-key hit (O3) or None; never raises on odd arguments."""
        with self._lock:
            r = self._responses.get(response_id)
            if r is None or not r.open:
                return None
            try:
                key = canonical_key(name, arguments, r.schemas.get(name))
            except ValueError:
                return None
            entry = r.by_key.get(key)
            return entry if entry is not None and entry.expires >= self._clock() else None

    def by_name(self, response_id: str, name: str) -> list[CacheEntry]:
        """Live entries of one tool, newest first (O2 drafts from these)."""
        now = self._clock()
        with self._lock:
            r = self._responses.get(response_id)
            if r is None or not r.open:
                return []
            return [e for e in reversed(r.by_key.values()) if e.name == name and e.expires >= now]

    def sweep(self) -> None:
        """Forget expired responses and entries."""
        now = self._clock()
        with self._lock:
            for rid in [k for k, r in self._responses.items() if r.expires < now]:
                del self._responses[rid]
            for r in self._responses.values():
                for k in [k for k, e in r.by_key.items() if e.expires < now]:
                    del r.by_key[k]
