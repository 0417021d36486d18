"""The tasks serving chat requests in vLLM's API server, cancelled once the engine stops.

On SIGTERM vLLM stops its engine first, then asks uvicorn to shut down, and uvicorn waits for
open connections to close. A request still streaming from the stopped engine never gets
another token, so without this the API server waited forever (and needed SIGKILL).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["InFlight"]

log = logging.getLogger("vllm.spectool")


def _stopped(engine: Any) -> bool:
    try:
        return bool(getattr(engine, "errored", False))
    except Exception:  # an engine half torn down: stopped
        return True


class InFlight:
    def __init__(self, period: float = 0.5) -> None:
        self.period = period
        self.tasks: set[asyncio.Task] = set()
        self._watch: asyncio.Task | None = None

    def watch(self, engine: Any) -> None:
        """Start watching ``engine`` (from the running event loop)."""
        if self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watchdog(engine))

    async def _watchdog(self, engine: Any) -> None:
        while True:
            if _stopped(engine) and self.tasks:
                log.info("spectool: engine stopped; ending %d open chat request(s)", len(self.tasks))
                for task in list(self.tasks):
                    task.cancel()
            await asyncio.sleep(self.period)

    @contextmanager
    def track(self) -> Iterator[None]:
        """Mark the current task as serving a request until the block ends."""
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            yield
        finally:
            self.tasks.discard(task)
