"""The client half of the engine-side algorithm (Algorithm 4), behind ``mode="engine"``.

:class:`EngineClient` is the :class:`~spectool._openai.EngineSink` the wrapper calls: it learns
each response id from the stream's first chunk and posts finished speculative outputs to
``POST /cache-tool-output/{response_id}`` on the serving engine (through the wrapped SDK
client), so the engine can verify the call (O2) and continue in place (O3). Outputs that
finish before an id is known are posted as soon as it is, and re-posted to later responses
only while the session's cache still holds them valid: the engine cannot see the client's
writes, so a read_only output never reaches a response created after a mutating call in its
scope (withheld, counted in ``stale_discards``). Each entry carries its ``effect``. On a miss
the wrapper already awaits the run in flight in the client cache.

Posting never breaks the main path: errors are counted and swallowed, and a server without
the endpoint (a 404/405 that is not our "unknown response id") switches posting off, which
leaves plain client-side mode. :func:`resolved_messages` rebuilds the messages of calls the
engine resolved internally (``spectool_resolved_calls``) so the transcript is exact.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from typing import Any

import httpx

from ._outcome import Outcome
from ._types import ToolCall
from ._wire import format_output

__all__ = ["EngineClient", "create_sink", "resolved_messages"]


class EngineClient:
    """Posts finished speculative outputs to the engine that serves the current response.

    Pass the wrapped SDK client as ``client`` (posts go through it: its auth, its HTTP client,
    its transport) or an ``http_client``; with neither, one is made. Bound to the session's
    cache (:meth:`bind`, done by the wrapper), it posts an entry only while the cache still
    holds it valid: a read_only output is never posted to a response created after a mutating
    call in its scope (the engine cannot see that write), and one the client consumed is not
    posted again. Each posted entry says its effect (``"pure"`` or ``"read_only"``) so the
    engine may consume read_only entries after one use.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        post_timeout: float = 5.0,
        http_client: Any = None,
        keep_alive: float | None = None,
        replay: int = 64,
        client: Any = None,
    ) -> None:
        root = str(base_url).rstrip("/")
        self.root = root[: -len("/v1")] if root.endswith("/v1") else root
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.post_timeout = post_timeout
        self._sdk = client if client is not None and hasattr(client, "post") else None
        self._http = http_client
        self._own_http = False
        self.keep_alive = keep_alive
        self.response_id: str | None = None
        self._response_epochs: dict[str, int] | None = None
        self._finished: deque[tuple[str, dict[str, Any]]] = deque(maxlen=replay)  # (key, item)
        self._cache: Any = None
        self.enabled = True
        self.send_effect = True  # off once a server refuses the field (422 naming it)
        self._pending: list[tuple[list[dict[str, Any]], str]] = []
        self.counters = {"posted": 0, "cached": 0, "failed": 0, "withheld": 0}

    def bind(self, cache: Any) -> None:
        """Check every post against ``cache`` (a :class:`~spectool._cache.ToolCache`)."""
        self._cache = cache

    # -- the EngineSink protocol ------------------------------------------------------------------
    def prepare(self, request: Any) -> None:
        """Nothing to change: the id comes from the stream (non-streamed responses reveal it
        only at the end, when posting no longer helps — use ``stream=True``)."""

    def on_response_id(self, response_id: str) -> None:
        """A new response streams: replay what is still valid to it, in the background."""
        self.response_id = response_id
        # The state this response was created in: a read from an older epoch is not for it.
        self._response_epochs = self._cache.epochs() if self._cache is not None else None
        items = self._postable([key for key, _ in self._finished])
        if not items or not self.enabled:
            return
        if self._cache is not None and self._cache.is_open:  # in the session's task group
            self._cache.task_group.start_soon(self._post, items, response_id, name="spectool:post")
        else:  # unbound: posted on close (or lost with the response)
            self._pending.append((items, response_id))

    async def on_tool_output(self, call: ToolCall, key: str, outcome: Outcome) -> None:
        if not outcome.ok:
            return  # a failed speculative run is re-run on demand, never cached server-side
        item: dict[str, Any] = {
            "name": call.name,
            "params": dict(call.arguments),
            "output": format_output(outcome.value),
        }
        if self.keep_alive is not None:
            item["keep_alive"] = self.keep_alive
        self._finished.append((key, item))
        await self._post(self._postable([key]), self.response_id)

    async def aclose(self) -> None:
        pending, self._pending = self._pending, []
        for items, rid in pending:
            await self._post(items, rid)
        if self._own_http and self._http is not None:
            await self._http.aclose()

    # -- what may be posted -----------------------------------------------------------------------
    def _postable(self, keys: list[str]) -> list[dict[str, Any]]:
        """The finished items of ``keys`` still valid for the current response, with effects."""
        by_key = dict(self._finished)
        out = []
        for key in dict.fromkeys(keys):
            item = by_key.get(key)
            if item is None:
                continue
            if self._cache is None:  # unbound (direct use): effects unknown, engine assumes read_only
                out.append(item)
                continue
            spec = self._cache.postable(key, self._response_epochs)
            if spec is None:
                self.counters["withheld"] += 1
                continue
            out.append({**item, "effect": "pure" if spec.effect.value == "pure" else "read_only"})
        return out

    # -- posting ------------------------------------------------------------------------------------
    async def _post(self, items: list[dict[str, Any]], rid: str | None) -> None:
        if not self.enabled or rid is None or not items:
            return
        self.counters["posted"] += len(items)
        url = f"{self.root}/cache-tool-output/{rid}"
        if not self.send_effect:
            items = [{k: v for k, v in item.items() if k != "effect"} for item in items]
        status, body = await self._send(url, items)
        if status == 422 and self.send_effect and "effect" in body:
            # A server from before the effect field: post without it from now on (it then
            # treats every entry as it always did; the client still never posts across a write).
            self.send_effect = False
            items = [{k: v for k, v in item.items() if k != "effect"} for item in items]
            status, body = await self._send(url, items)
        if status == 200:
            try:
                self.counters["cached"] += int(json.loads(body).get("cached", 0))
            except (ValueError, AttributeError):
                self.counters["failed"] += 1
        elif status in (404, 405) and "response id" not in body:
            self.enabled = False  # no such endpoint: this server is client-side mode only
        else:
            self.counters["failed"] += 1  # finished/expired response, network error: harmless

    async def _send(self, url: str, items: list[dict[str, Any]]) -> tuple[int, str]:
        """(status, body text); status 0 when nothing came back. Foreign errors stop here."""
        if self._sdk is not None:
            return await _sdk_post(self._sdk, url, items, self.post_timeout)
        if self._http is None:
            self._http, self._own_http = httpx.AsyncClient(timeout=self.post_timeout), True
        try:
            r = await self._http.post(url, json=items, headers=self._headers)
        except (httpx.HTTPError, OSError):
            return 0, ""
        return r.status_code, r.text


async def _sdk_post(sdk: Any, url: str, items: list[dict[str, Any]], timeout: float) -> tuple[int, str]:
    """POST through an OpenAI SDK client (its auth, HTTP client and transport): an absolute
    URL, since the endpoint lives at the server root, not under ``/v1``; no retries."""
    import openai

    try:
        r = await sdk.post(
            url, cast_to=_raw_response_class(sdk), body=items, options={"max_retries": 0, "timeout": timeout}
        )
    except openai.APIStatusError as exc:
        return exc.status_code, exc.response.text
    except openai.APIError:  # connection, timeout
        return 0, ""
    return r.status_code, r.text


def _raw_response_class(sdk: Any) -> Any:
    """The response class the SDK returns unparsed (httpx's, or httpx2's for openai >= 3)."""
    http = getattr(sdk, "_client", None)
    module = type(http).__module__.split(".")[0] if http is not None else "httpx"
    return getattr(__import__(module), "Response", httpx.Response)


def create_sink(client: Any, **options: Any) -> EngineClient:
    """The seam ``SpeculativeOpenAI(mode="engine")`` calls: base URL and key from the SDK client."""
    base_url = options.pop("base_url", None) or getattr(client, "base_url", None)
    api_key = options.pop("api_key", None) or getattr(client, "api_key", None)
    if base_url is None:
        from .errors import ConfigError

        raise ConfigError("mode='engine' needs the engine's base URL (engine_options={'base_url': ...})")
    options.setdefault("client", client)
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
