"""Where a response lives when vLLM runs several API-server processes, ranks or replicas.

The tool-output store lives in the API-server process that streams the response. With
``--api-server-count N`` (or ``--data-parallel-size N``, which starts N API servers) the
kernel spreads connections over the processes, so a cache post may reach a process that did
not open the response. Each process therefore records the responses it opens in a small
shared folder (one JSON file per scope) and keeps an inbox per scope:

* a post reaching a *sibling* (the same server: same host and port) is checked against the
  record's tools and written to the owner's inbox; the owner reads its inbox before it
  serves a call from its store (O3), and the sibling mirrors the entries to the engine for O2
  itself (every API process reaches the same engine cores);
* a post reaching *another replica* (a record from another server in a folder shared by
  several replicas) cannot be served there: the endpoint answers 421 with the owner's URL.

Scopes are ``(tenant tag, response id)`` as in the store; files are named by a hash of both,
so one tenant's id is never found under another's, and tokens never reach the disk. No vLLM
imports: unit-testable.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from spectool.errors import ConfigError, ToolCacheError

__all__ = ["Record", "Registry"]


@dataclass(frozen=True)
class Record:
    """What a sibling or another replica needs to know about a response."""

    server: str  # "host:port" of the server whose API process streams it
    url: str  # where that server answers (what a 421 tells the client)
    tools: list[dict]
    open: bool
    expires: float  # wall clock: open past ``open_ttl`` or closed past ``grace`` is forgotten


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid != os.getuid():  # entries hold tenants' tool outputs
        raise ConfigError(f"{path} belongs to another user; set SPECTOOL_VLLM_SHARED_DIR")
    return path


@dataclass(eq=False)
class Registry:
    """Records and inboxes under ``root``; ``server`` and ``url`` name this server."""

    root: Path
    server: str
    url: str
    _: KW_ONLY
    grace: float = 60.0
    open_ttl: float = 3600.0
    sweep_every: float = 60.0
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        self.root = _private_dir(Path(self.root))
        self._records = _private_dir(self.root / "responses")
        self._inboxes = _private_dir(self.root / "inbox")
        self._next_sweep = self.clock() + self.sweep_every

    # -- paths ---------------------------------------------------------------------------------
    @staticmethod
    def _key(tag: str, response_id: str) -> str:
        return hashlib.sha256(f"{tag}\0{response_id}".encode("utf-8", "surrogatepass")).hexdigest()[:40]

    def _record_path(self, tag: str, response_id: str) -> Path:
        return self._records / f"{self._key(tag, response_id)}.json"

    def _inbox(self, tag: str, response_id: str) -> Path:
        return self._inboxes / self._key(tag, response_id)

    def _write(self, path: Path, data: Any) -> None:
        """Atomic: a reader sees the old file or the new one, never half of one."""
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        tmp.write_text(json.dumps(data, ensure_ascii=False))
        os.replace(tmp, path)

    # -- the owner ------------------------------------------------------------------------------
    def open(self, tag: str, response_id: str, tools: Iterable[Mapping[str, Any]]) -> None:
        """Record that this server streams the response; 409 if a live record exists (the
        same tenant reusing a live id in another process or replica)."""
        if self.clock() >= self._next_sweep:  # one file per response: finished ones must go
            self.sweep()
        current = self.find(tag, response_id)
        if current is not None:
            raise ToolCacheError(f"response id {response_id!r} is already in use", status_code=409)
        record = Record(self.server, self.url, [dict(t) for t in tools], True, self.clock() + self.open_ttl)
        self._write(self._record_path(tag, response_id), record.__dict__)
        self._inbox(tag, response_id).mkdir(mode=0o700, exist_ok=True)

    def close(self, tag: str, response_id: str) -> None:
        """Finished: later posts anywhere get 410 until ``grace`` has passed; the inbox goes."""
        path = self._record_path(tag, response_id)
        record = self._read(path)
        if record is not None and record.server == self.server:
            closed = Record(record.server, record.url, [], False, self.clock() + self.grace)
            self._write(path, closed.__dict__)
        self.drain(tag, response_id)
        with contextlib.suppress(OSError):
            self._inbox(tag, response_id).rmdir()

    def drain(self, tag: str, response_id: str) -> list[dict]:
        """Items siblings relayed to this response, oldest first; each is read once."""
        inbox = self._inbox(tag, response_id)
        try:
            names = sorted(p for p in os.listdir(inbox) if not p.startswith("."))
        except OSError:
            return []
        items: list[dict] = []
        for name in names:
            path = inbox / name
            try:
                items.extend(json.loads(path.read_text()))
                path.unlink()
            except (OSError, ValueError):
                continue  # taken by a concurrent drain, or half-gone: never fatal
        return items

    # -- anyone ---------------------------------------------------------------------------------
    def find(self, tag: str, response_id: str) -> Record | None:
        """The live record of a scope (open, or closed within ``grace``), or None."""
        path = self._record_path(tag, response_id)
        record = self._read(path)
        if record is not None and record.expires < self.clock():
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        return record

    def relay(self, tag: str, response_id: str, items: list[dict]) -> None:
        """Hand items to the owner's inbox (a sibling process of the same server)."""
        # ns time first: the owner drains in posting order
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex}.json"
        self._write(self._inbox(tag, response_id) / name, items)

    def sweep(self) -> int:
        """Forget expired records (a crashed owner's included); returns how many."""
        gone = 0
        self._next_sweep = self.clock() + self.sweep_every
        for path in self._records.glob("*.json"):
            record = self._read(path)
            if record is None or record.expires < self.clock():
                with contextlib.suppress(OSError):
                    path.unlink()
                    gone += 1
        for inbox in self._inboxes.iterdir():
            if not (self._records / f"{inbox.name}.json").exists():
                shutil.rmtree(inbox, ignore_errors=True)
        return gone

    @staticmethod
    def _read(path: Path) -> Record | None:
        try:
            return Record(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None
