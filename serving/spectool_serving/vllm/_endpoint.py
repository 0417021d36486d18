"""The endpoint plugin: tool cache routes and the O3 chat route, in vLLM's API server process.

Routes (added through vLLM's ``EndpointPlugin`` contract; the chat route replaces vLLM's
``POST /v1/chat/completions`` the way that contract allows and calls vLLM's own handler):

* ``POST /cache-tool-output/{response_id}``: body ``[{name, params?, output, keep_alive?,
  effect?}]`` → ``200 {"cached": n}``; 404 unknown id (ids are per tenant), 410 finished, 422
  malformed. Same :class:`~spectool_serving.store.ToolOutputStore` and tenancy as the torch
  backend: the tenant is the bearer token, and the id a client picks with ``X-Request-Id``
  names a scope inside that tenant only (another tenant sending the same header gets its own
  scope; the same tenant reusing a live id gets 409).
* ``GET /spectool/stats``: tool-cache, O2 (tool vs text drafts) and O3 counters, behind the
  same credentials as the posts; the sampled rejected drafts are the asking tenant's only.
* ``POST /v1/chat/completions``: vLLM's handler, plus: the response id is fixed before the
  engine sees the request (so posts can arrive while it streams), the id is opened in the
  store, O3 continues cached calls (a request opts out with header ``x-spectool-o3: off``),
  and the store (and the worker mirror) is closed at the end.

Several API processes (``--api-server-count``, ``--data-parallel-size``) or replicas sharing
``SPECTOOL_VLLM_SHARED_DIR``: a post for a response another process streams is relayed to it
(same server) or answered 421 with the owner's URL (another replica); see :mod:`._registry`.
"""

# no `from __future__ import annotations`: FastAPI must see the route annotations as classes

import json
import logging
import os
import socket
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from spectool.errors import ToolCacheError
from spectool.settings import settings

from ..schemas import ToolOutputItems
from ..store import ToolOutputStore
from . import _continue
from ._inflight import InFlight
from ._mirror import tenant_tag
from ._registry import Registry

__all__ = ["SpectoolEndpoint"]

log = logging.getLogger("vllm.spectool")  # under "vllm": vLLM's handlers print it

# --tool-call-parser -> the shared prompt format whose call layout that parser reads
_PARSER_FORMATS = {"hermes": "chatml", "xlam": "xlam", "llama3_json": "llama3"}


def _owner(request: Any) -> str:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else ""


def _error(status: int, message: str) -> Any:
    from fastapi.responses import JSONResponse

    return JSONResponse(
        {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": status}},
        status_code=status,
    )


class SpectoolEndpoint:
    name = "spectool"
    required_tasks = ("generate",)

    def __init__(self) -> None:
        config = settings()  # SPECTOOL_TOOLCACHE_TTL, SPECTOOL_VLLM_MAX_HOPS, SPECTOOL_VLLM_O3, …
        self.cache = ToolOutputStore(ttl=config.toolcache_ttl)
        self.max_hops = config.vllm_max_hops
        self.o3 = config.vllm_o3
        self.default_max_tokens = config.vllm_default_max_tokens
        self.engine: Any = None
        self.inflight = InFlight()  # ended when the engine stops, so SIGTERM is never stuck on one
        self.o2 = False
        self.api_keys: set[str] = set()  # vLLM's --api-key: its middleware guards /v1 only
        self.registry: Registry | None = None  # on when responses can live in another process
        names = ("posts", "entries", "relayed", "o3_hits", "o3_round_trips_saved", "o3_responses")
        self.stats = dict.fromkeys(names, 0)

    # -- EndpointPlugin ---------------------------------------------------------------------
    def attach_router(self, app: Any) -> None:
        from fastapi import APIRouter, Request
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.serve.utils.api_utils import with_cancellation

        router = APIRouter()
        plugin = self

        @router.post("/cache-tool-output/{response_id}")
        async def cache_tool_output(response_id: str, raw_request: Request):
            return await plugin.post(response_id, raw_request)

        @router.get("/spectool/stats")
        async def stats(raw_request: Request):
            return await plugin.collect_stats(raw_request)

        @router.post("/v1/chat/completions")
        @with_cancellation  # vLLM's own: a client that disconnects stops its generation
        async def chat(request: ChatCompletionRequest, raw_request: Request):
            with plugin.inflight.track():
                return await plugin.chat(request, raw_request)

        app.include_router(router)

    async def init_state(self, engine_client: Any, state: Any, args: Any) -> None:
        self.engine = engine_client
        keys = getattr(args, "api_key", None)
        self.api_keys = {keys} if isinstance(keys, str) else set(keys or ())
        self.inflight.watch(engine_client)
        self.registry = _registry_for(args)
        fmt = _PARSER_FORMATS.get(getattr(args, "tool_call_parser", None) or "hermes", "chatml")
        try:
            self.o2 = any(await engine_client.collective_rpc("spectool_attach", args=(fmt,)))
        except Exception as exc:  # no worker extension configured: O2 stays off, rest works
            log.warning("spectool: O2 drafting off (worker extension not loaded: %s)", exc)
        log.info("spectool: endpoint ready (O2 %s, O3 %s, format %s)", self.o2, self.o3, fmt)

    # -- routes -----------------------------------------------------------------------------
    def _denied(self, raw_request: Any) -> Any:
        """401 unless the bearer token is one of vLLM's ``--api-key`` keys (when set)."""
        if self.api_keys and _owner(raw_request) not in self.api_keys:
            return _error(401, "missing or invalid API key")
        return None

    async def post(self, response_id: str, raw_request: Any) -> Any:
        if (denied := self._denied(raw_request)) is not None:
            return denied
        try:
            items = ToolOutputItems.model_validate_json(await raw_request.body()).root
        except ValidationError as exc:
            first = exc.errors()[0]
            return _error(400 if first["type"] == "json_invalid" else 422, f"{first['loc']}: {first['msg']}")
        try:
            n = self.cache.post(response_id, _owner(raw_request), items)
        except ToolCacheError as exc:
            if exc.status_code == 404 and self.registry is not None:
                return await self._post_elsewhere(response_id, raw_request, items, exc)
            return _error(exc.status_code or 400, str(exc))
        self.stats["posts"] += 1
        self.stats["entries"] += n
        await self._mirror_put(response_id, raw_request, items)
        return {"cached": n}

    async def _post_elsewhere(
        self, response_id: str, raw_request: Any, items: list, unknown: Exception
    ) -> Any:
        """A post for a response this process did not open: relay it to the sibling process
        that streams it, or name the replica that does (421); unknown anywhere stays 404."""
        assert self.registry is not None
        owner = _owner(raw_request)
        tag = tenant_tag(owner)
        record = self.registry.find(tag, response_id)
        if record is None:
            return _error(404, str(unknown))
        if record.server != self.registry.server:
            reply = _error(
                421,
                f"response {response_id!r} is streamed by {record.url}; post there "
                "(route /cache-tool-output/{id} by the response id)",
            )
            reply.headers["x-spectool-owner"] = record.url
            return reply
        if not record.open:
            return _error(410, f"response {response_id!r} has finished or expired")
        check = ToolOutputStore(ttl=self.cache.ttl)  # the owner's checks, before anything moves
        try:
            check.open(response_id, owner, record.tools)
            n = check.post(response_id, owner, items)
            self.registry.relay(tag, response_id, [it.model_dump(mode="json") for it in items])
        except ToolCacheError as exc:
            return _error(exc.status_code or 400, str(exc))
        except OSError:  # the owner closed the inbox meanwhile: finished
            return _error(410, f"response {response_id!r} has finished or expired")
        self.stats["posts"] += 1
        self.stats["entries"] += n
        self.stats["relayed"] += 1
        await self._mirror_put(response_id, raw_request, items)  # same engine: O2 needs no owner
        return {"cached": n, "relayed": True}

    async def _mirror(self, method: str, *args: Any) -> None:
        """Call the workers' mirror of the store (O2 only); a failure is logged, never raised."""
        if self.o2:
            try:
                await self.engine.collective_rpc(method, args=args)
            except Exception:
                log.exception("spectool: %s on the proposer failed", method)

    async def _mirror_put(self, response_id: str, raw_request: Any, items: list) -> None:
        now, ttl, tag = time.time(), self.cache.ttl, tenant_tag(_owner(raw_request))
        expiry = lambda it: now + min(ttl, it.keep_alive or ttl)  # noqa: E731
        params = lambda it: json.dumps(it.params or {}, ensure_ascii=False)  # noqa: E731
        await self._mirror(
            "spectool_put", [(tag, response_id, it.name, params(it), expiry(it)) for it in items]
        )

    async def collect_stats(self, raw_request: Any) -> Any:
        if (denied := self._denied(raw_request)) is not None:
            return denied
        workers = []
        if self.engine is not None:
            try:
                workers = await self.engine.collective_rpc(
                    "spectool_stats", args=(tenant_tag(_owner(raw_request)),)
                )
            except Exception as exc:
                workers = [{"o2": False, "error": str(exc)}]
        return {"endpoint": dict(self.stats), "o2": workers}

    async def chat(self, request: Any, raw_request: Any) -> Any:
        from fastapi.responses import JSONResponse, StreamingResponse

        handler = raw_request.app.state.openai_serving_chat
        unbounded = request.max_tokens is None and request.max_completion_tokens is None
        if unbounded and self.default_max_tokens > 0:  # vLLM's own: the rest of the context
            request.max_completion_tokens = self.default_max_tokens
        base = raw_request.headers.get("X-Request-Id") or uuid.uuid4().hex
        request.request_id = base
        rid = f"chatcmpl-{base}"
        tools = [t.model_dump() for t in (request.tools or [])]
        owner = _owner(raw_request)
        try:
            self.cache.open(rid, owner, tools)
            self._register(rid, owner, tools)
        except ToolCacheError as exc:  # this tenant's id is live already (409) or the store is full
            return _error(exc.status_code or 400, str(exc))
        await self._mirror_open(rid, owner)

        async def run(req: Any) -> Any:
            return await handler.create_chat_completion(req, raw_request)

        then = raw_request.headers.get("x-spectool-then-tool-choice") or None
        o3 = self.o3 and raw_request.headers.get("x-spectool-o3", "on").lower() not in ("off", "0")

        def lookup(name: str, arguments: str) -> Any:
            if not o3:
                return None
            self._ingest(rid, owner)
            return self.cache.take(rid, owner, name, arguments)

        hops = _continue.Continuation(run, request, rid, base, lookup, self.max_hops, then)
        if request.stream:
            first = await run(request)
            if not hasattr(first, "__aiter__"):
                await self._close(rid, owner)
                return JSONResponse(first.model_dump(), status_code=first.error.code)
            return StreamingResponse(
                self._streamed(hops, owner, first),
                media_type="text/event-stream",
            )
        try:
            body = await _continue.complete(hops)
        finally:
            await self._close(rid, owner)
        if not isinstance(body, dict):
            return JSONResponse(body.model_dump(), status_code=body.error.code)
        self._count(len(body["choices"][0]["spectool_resolved_calls"]), body["spectool"]["round_trips_saved"])
        return JSONResponse(body)

    async def _streamed(self, hops: _continue.Continuation, owner: str, first: Any) -> AsyncIterator[str]:
        report: dict = {}
        try:
            with self.inflight.track():  # the task streaming the response, not the route's
                async for chunk in _continue.stream(hops, first, report):
                    yield chunk
        finally:
            await self._close(hops.rid, owner)
            self._count(report.get("hits", 0), report.get("round_trips_saved", 0))

    def _count(self, hits: int, saved: int) -> None:
        self.stats["o3_responses"] += 1
        self.stats["o3_hits"] += hits
        self.stats["o3_round_trips_saved"] += saved

    async def _mirror_open(self, rid: str, owner: str) -> None:
        """Tell the workers the exact engine ids this response runs under: the id, and the
        O3 hops' ids (vLLM runs a hop under ``X-Request-Id`` when given, else ``<base>.h<n>``)."""
        engine_ids = [rid, *(f"{rid}.h{n}" for n in range(1, self.max_hops + 2))]
        await self._mirror("spectool_open", tenant_tag(owner), rid, engine_ids)

    def _register(self, rid: str, owner: str, tools: list) -> None:
        """Record the response for sibling processes; 409 if one of them holds the id."""
        if self.registry is None:
            return
        try:
            self.registry.open(tenant_tag(owner), rid, tools)
        except ToolCacheError:
            self.cache.close(rid, owner)
            raise
        except OSError:  # the shared folder failed: this process still serves its own posts
            log.exception("spectool: could not record response %s for sibling processes", rid)

    def _ingest(self, rid: str, owner: str) -> None:
        """Posts sibling processes relayed to this response, into this process's store."""
        if self.registry is None:
            return
        items = self.registry.drain(tenant_tag(owner), rid)
        if items:
            try:
                self.cache.post(rid, owner, items)
            except ToolCacheError:  # checked by the sibling; a race with close loses nothing live
                log.warning("spectool: relayed entries for %s refused", rid, exc_info=True)

    async def _close(self, rid: str, owner: str) -> None:
        self.cache.close(rid, owner)
        if self.registry is not None:
            try:
                self.registry.close(tenant_tag(owner), rid)
            except OSError:
                log.exception("spectool: could not close response %s for sibling processes", rid)
        await self._mirror("spectool_drop", tenant_tag(owner), rid)


def _registry_for(args: Any) -> Registry | None:
    """The shared record of responses, when another process may receive their posts: several
    API processes or ranks, or replicas given one ``SPECTOOL_VLLM_SHARED_DIR``."""
    config = settings()
    processes = max(
        getattr(args, "api_server_count", None) or 1, getattr(args, "data_parallel_size", None) or 1
    )
    if config.vllm_shared_dir is None and processes <= 1:
        return None
    host = getattr(args, "host", None) or "127.0.0.1"
    port = getattr(args, "port", 8000)
    root = config.vllm_shared_dir or Path(tempfile.gettempdir()) / f"spectool-vllm-{os.getuid()}-{port}"
    server = f"{socket.gethostname()}:{port}"
    url = (
        config.vllm_advertise_url
        or f"http://{socket.gethostname() if host in ('0.0.0.0', '::') else host}:{port}"
    )
    registry = Registry(root, server, url)
    registry.sweep()
    log.info("spectool: responses recorded in %s for %d API processes (this server %s)", root, processes, url)
    return registry
