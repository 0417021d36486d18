"""The client half of the engine-side algorithm (Algorithm 4), behind ``mode="engine"``.

:class:`EngineClient` is the :class:`~spectool._openai.EngineSink` the wrapper calls: it learns
each response id from the stream's first chunk and posts every finished speculative output to
``POST /cache-tool-output/{response_id}`` on the serving engine, so the engine can verify the
call (O2) and continue in place (O3). Outputs that finish before an id is known are posted as
soon as it is. On a miss the wrapper already awaits the run in flight in the client cache.

Posting never breaks the main path: errors are counted and swallowed, and a server without
the endpoint (a 404/405 that is not our "unknown response id") switches posting off, which
leaves plain client-side mode. :func:`resolved_messages` rebuilds the messages of calls the
engine resolved internally (``spectool_resolved_calls``) so the transcript is exact.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Mapping

import httpx

from ._cache import Outcome
from ._types import ToolCall
from ._wire import format_output

__all__ = ["EngineClient", "create_sink", "resolved_messages"]


class EngineClient:
    """Posts finished speculative outputs to the engine that serves the current response."""

    def __init__(self, base_url: str, api_key: str | None = None, *, post_timeout: float = 5.0,
                 http_client: httpx.AsyncClient | None = None, keep_alive: float | None = None,
                 replay: int = 64) -> None:
        root = str(base_url).rstrip("/")
        self.root = root[: -len("/v1")] if root.endswith("/v1") else root
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = http_client or httpx.AsyncClient(timeout=post_timeout)
        self._own_http = http_client is None
        self.keep_alive = keep_alive
        self.response_id: str | None = None
        self._finished: deque[dict[str, Any]] = deque(maxlen=replay)  # replayed to each new id
        self.enabled = True
        self._tasks: set = set()
        self.counters = {"posted": 0, "cached": 0, "failed": 0}

    # -- the EngineSink protocol ------------------------------------------------------------------
    def prepare(self, request: Any) -> None:
        """Nothing to change: the id comes from the stream (non-streamed responses reveal it
        only at the end, when posting no longer helps — use ``stream=True``)."""

    def on_response_id(self, response_id: str) -> None:
        """A new response streams: replay what already finished to it, in the background."""
        self.response_id = response_id
        if self._finished and self.enabled:
            import asyncio

            task = asyncio.get_running_loop().create_task(self._post(list(self._finished)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def on_tool_output(self, call: ToolCall, key: str, outcome: Outcome) -> None:
        if not outcome.ok:
            return  # a failed speculative run is re-run on demand, never cached server-side
        item = {"name": call.name, "params": dict(call.arguments), "output": format_output(outcome.value)}
        if self.keep_alive is not None:
            item["keep_alive"] = self.keep_alive
        self._finished.append(item)
        await self._post([item])

    async def aclose(self) -> None:
        for task in list(self._tasks):
            await task
        if self._own_http:
            await self._http.aclose()

    # -- posting ------------------------------------------------------------------------------------
    async def _post(self, items: list[dict[str, Any]]) -> None:
        rid = self.response_id
        if not self.enabled or rid is None or not items:
            return
        self.counters["posted"] += len(items)
        try:
            r = await self._http.post(f"{self.root}/cache-tool-output/{rid}", json=items, headers=self._headers)
        except (httpx.HTTPError, OSError):
            self.counters["failed"] += 1
            return
        if r.status_code == 200:
            self.counters["cached"] += int(r.json().get("cached", 0))
        elif r.status_code in (404, 405) and "response id" not in r.text:
            self.enabled = False  # no such endpoint: this server is client-side mode only
        else:
            self.counters["failed"] += 1  # finished/expired response etc.: harmless


def create_sink(client: Any, **options: Any) -> EngineClient:
    """The seam ``SpeculativeOpenAI(mode="engine")`` calls: base URL and key from the SDK client."""
    base_url = options.pop("base_url", None) or getattr(client, "base_url", None)
    api_key = options.pop("api_key", None) or getattr(client, "api_key", None)
    if base_url is None:
        from ._errors import ConfigError

        raise ConfigError("mode='engine' needs the engine's base URL (engine_options={'base_url': ...})")
    return EngineClient(str(base_url), api_key, **options)


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    extra = getattr(obj, "model_extra", None) or {}
    return extra.get(name, getattr(obj, name, None))


def resolved_messages(choice: Any) -> list[dict[str, Any]]:
    """The assistant/tool message pairs of calls the engine resolved inside one choice, in
    order; insert them before that choice's final message."""
    out: list[dict[str, Any]] = []
    for rec in _field(choice, "spectool_resolved_calls") or ():
        call = rec["tool_call"]
        out.append({"role": "assistant", "content": rec.get("content"), "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": call["id"], "content": rec["output"]})
    return out
