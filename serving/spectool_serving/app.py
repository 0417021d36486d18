"""FastAPI routes: the OpenAI Chat Completions API, the tool-output endpoint, health, metrics.

``POST /cache-tool-output/{response_id}`` takes a JSON array of ``{name, params?, output,
keep_alive?, effect?}`` (:class:`~.schemas.ToolOutputItem`) and answers ``200 {"cached": n}``.
The tenant is the bearer token (API key); response ids are per tenant, so only the tenant whose
request opened an id can post to it. Bodies are read as a stream and refused (413) as soon as
they pass ``max_body_bytes`` (or up front from ``Content-Length``); the schemas are in
``/openapi.json``. Each choice of a response carries the calls the
engine resolved internally as ``spectool_resolved_calls`` (``[{content, tool_call, output}]``
in order), so a client can rebuild the exact transcript; a stock client ignores the field.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from spectool.errors import EngineError

from .engine import Engine
from .requests import build_sequences, first_error, parse_chat
from .schemas import ChatCompletionRequest, ErrorBody, ToolOutputItems, ToolOutputPosted
from .sequence import Content, Error, Finish, Resolved

__all__ = ["create_app"]


def _error(status: int, message: str, type_: str = "invalid_request_error", param: str | None = None):
    return JSONResponse(
        {"error": {"message": message, "type": type_, "param": param, "code": status}}, status_code=status
    )


def _owner(request: Request, api_keys: set[str] | None) -> str | JSONResponse:
    auth = request.headers.get("authorization", "")
    token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    if api_keys is not None and token not in api_keys:
        return _error(401, "missing or unknown API key", "authentication_error")
    return token


def create_app(
    engine: Engine,
    *,
    api_keys: set[str] | None = None,
    max_body_bytes: int = 1 << 20,
    max_tokens: int = 32768,
) -> FastAPI:
    app = FastAPI(title="spectool engine")
    app.state.engine = engine
    registry = _metrics_registry(engine)

    @app.exception_handler(EngineError)  # also the store's ToolCacheError (404, 409, 410, 422, 429)
    async def _engine_error(request: Request, exc: EngineError):
        return _error(exc.status_code or 500, str(exc), param=getattr(exc, "param", None))

    @app.get("/health")
    async def health():
        return {"status": "ok" if engine.error is None else f"degraded: {engine.error!r}"}

    @app.get("/v1/models")
    async def models():
        return {
            "object": "list",
            "data": [{"id": engine.model_name, "object": "model", "created": 0, "owned_by": "spectool"}],
        }

    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post(
        "/cache-tool-output/{response_id}",
        response_model=ToolOutputPosted,
        openapi_extra=_body_doc(ToolOutputItems),
        responses=_errors_doc(400, 401, 404, 410, 413, 422),
    )
    async def cache_tool_output(response_id: str, request: Request):
        """Post speculative tool outputs to a live response of yours (Algorithm 5)."""
        owner = _owner(request, api_keys)
        if isinstance(owner, JSONResponse):
            return owner
        if engine.store is None:
            return _error(404, "this server has no tool-output store")
        raw = await read_limited(request, max_body_bytes)
        try:
            items = ToolOutputItems.model_validate_json(raw).root
        except ValidationError as exc:
            bad_json = exc.errors()[0]["type"] == "json_invalid"
            return _error(400 if bad_json else 422, first_error(exc))
        return {"cached": engine.store.post(response_id, owner, items)}

    @app.post(
        "/v1/chat/completions",
        openapi_extra=_capped(_body_doc(ChatCompletionRequest), max_tokens),
        responses={
            200: {
                "description": "a chat.completion, or server-sent events when streamed",
                "content": {"application/json": {}, "text/event-stream": {}},
            },
            **_errors_doc(400, 401, 409, 413, 429),
        },
    )
    async def chat(request: Request):
        """OpenAI Chat Completions (streamed as server-sent events when ``stream`` is true)."""
        owner = _owner(request, api_keys)
        if isinstance(owner, JSONResponse):
            return owner
        body = parse_chat(await read_limited(request, max_body_bytes))
        rid = f"chatcmpl-{uuid.uuid4().hex}"  # minted here: a client can neither choose nor reuse it
        seqs = build_sequences(body, engine, rid, owner, max_tokens_cap=max_tokens)
        if engine.store is not None:
            engine.store.open(rid, owner, seqs[0].tools)
        engine.start()
        meta = {"id": rid, "created": int(time.time()), "model": body.model or engine.model_name}
        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(_sse(engine, seqs, meta, usage, owner), media_type="text/event-stream")
        try:
            return await _complete(engine, seqs, meta)
        finally:
            _close(engine, rid, owner)

    _with_body_defs(app)
    return app


async def read_limited(request: Request, limit: int) -> bytes:
    """The body, refused with 413 before more than ``limit`` bytes are held in memory."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise EngineError(f"body of {declared} bytes exceeds the limit of {limit}", status_code=413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise EngineError(f"body exceeds the limit of {limit} bytes", status_code=413)
        chunks.append(chunk)
    return b"".join(chunks)


_REF = "#/components/schemas/{model}"
_BODY_DEFS: dict[str, Any] = {}  # nested models of the documented bodies, for components


def _body_doc(model: type[BaseModel]) -> dict:
    """The request body in the OpenAPI schema (the route reads the raw stream itself, so
    FastAPI cannot infer it)."""
    schema = model.model_json_schema(ref_template=_REF)
    _BODY_DEFS.update(schema.pop("$defs", {}))
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _capped(doc: dict, max_tokens: int) -> dict:
    """This server's ``max_tokens`` cap in the documented chat body."""
    props = doc["requestBody"]["content"]["application/json"]["schema"]["properties"]
    for name in ("max_tokens", "max_completion_tokens"):
        for alt in props[name].get("anyOf", [props[name]]):
            if alt.get("type") == "integer":
                alt["maximum"] = max_tokens
    return doc


def _with_body_defs(app: FastAPI) -> None:
    base = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = base()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(_BODY_DEFS)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


_WHY = {
    400: "malformed JSON or request",
    401: "missing or unknown API key",
    404: "unknown response id (ids are per tenant)",
    409: "response id already in use",
    410: "the response has finished",
    413: "body over the size limit",
    422: "items that do not match the schema",
    429: "too many open responses",
}


def _errors_doc(*codes: int) -> dict:
    return {c: {"model": ErrorBody, "description": _WHY[c]} for c in codes}


def _close(engine: Engine, rid: str, owner: str) -> None:
    engine.cancel(rid)  # no-op when finished; stops generation when the client went away
    if engine.store is not None:
        engine.store.close(rid, owner)


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _complete(engine: Engine, seqs: list, meta: dict) -> Any:
    finals: dict[int, Finish] = {}
    async for index, ev in engine.stream(seqs):
        if isinstance(ev, Error):
            return _error(500, ev.message, "server_error")
        if isinstance(ev, Finish):
            finals[index] = ev
    choices, prompt, completion = [], 0, 0
    for i in sorted(finals):
        ev = finals[i]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": ev.content if not ev.tool_call else (ev.content or None),
        }
        if ev.tool_call:
            message["tool_calls"] = [ev.tool_call]
        choice = {"index": i, "message": message, "finish_reason": ev.reason, "logprobs": None}
        choices.append({**choice, "spectool_resolved_calls": ev.resolved})
        prompt = max(prompt, ev.usage["prompt_tokens"])
        completion += ev.usage["completion_tokens"]
    return {**meta, "object": "chat.completion", "choices": choices, "usage": _usage(prompt, completion)}


def _chunk(meta: dict, choices: list, **extra: Any) -> str:
    body = {**meta, "object": "chat.completion.chunk", "choices": choices, **extra}
    return "data: " + json.dumps(body) + "\n\n"


def _delta(meta: dict, index: int, delta: dict, finish_reason: str | None = None, **extra: Any) -> str:
    """A chunk of one choice: its ``delta``, ``finish_reason`` and spectool's fields."""
    return _chunk(meta, [{"index": index, "delta": delta, "finish_reason": finish_reason, **extra}])


async def _sse(engine: Engine, seqs: list, meta: dict, include_usage: bool, owner: str) -> AsyncIterator[str]:
    prompt = completion = 0
    try:
        # the first chunk carries the response id before any token: the client posts to it
        first = {"role": "assistant", "content": ""}
        yield _chunk(meta, [{"index": s.index, "delta": first, "finish_reason": None} for s in seqs])
        async for index, ev in engine.stream(seqs):
            if isinstance(ev, Content):
                yield _delta(meta, index, {"content": ev.text})
            elif isinstance(ev, Resolved):
                yield _delta(meta, index, {}, spectool_resolved_call=ev.record)
            elif isinstance(ev, Error):
                yield (
                    "data: " + json.dumps({"error": {"message": ev.message, "type": "server_error"}}) + "\n\n"
                )
                return
            elif isinstance(ev, Finish):
                if ev.tool_call:
                    yield _delta(meta, index, {"tool_calls": [{"index": 0, **ev.tool_call}]})
                yield _delta(meta, index, {}, ev.reason, spectool_resolved_calls=ev.resolved)
                prompt = max(prompt, ev.usage["prompt_tokens"])
                completion += ev.usage["completion_tokens"]
        if include_usage:
            yield _chunk(meta, [], usage=_usage(prompt, completion))
        yield "data: [DONE]\n\n"
    finally:
        _close(engine, meta["id"], owner)


def _decoding_metrics(stats: Any):
    """Text speculation (tree decoding policy): τ, draft size and verify time."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    for family, name, doc, value in (
        (CounterMetricFamily, "steps", "verification steps with a text draft", stats.steps),
        (CounterMetricFamily, "drafted", "text draft tokens verified", stats.drafted),
        (CounterMetricFamily, "accepted", "text draft tokens accepted", stats.accepted),
        (CounterMetricFamily, "verify_seconds", "time in verifying forwards", stats.verify_s),
        (GaugeMetricFamily, "tau", "mean tokens emitted per verification", stats.tau),
        (
            GaugeMetricFamily,
            "mean_draft",
            "mean draft tokens per verification",
            stats.drafted / max(stats.steps, 1),
        ),
    ):
        yield family(f"spectool_engine_tree_{name}", doc, value=value)


def _metrics_registry(engine: Engine):
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class _Collector:
        def collect(self):
            for name, value in engine.counters().items():
                yield CounterMetricFamily(f"spectool_engine_{name}", f"engine counter {name}", value=value)
            yield GaugeMetricFamily(
                "spectool_engine_running", "sequences in the batch", value=len(engine.scheduler.running)
            )
            yield GaugeMetricFamily(
                "spectool_engine_waiting", "sequences queued", value=len(engine.scheduler.waiting)
            )
            for name, value in engine.kv_memory().items():  # bytes flat once warm (soaks read it)
                unit = "bytes" if name in ("reserved", "in_use") else "count"
                yield GaugeMetricFamily(f"spectool_engine_kv_{name}", f"KV pool {name} ({unit})", value=value)
            if engine.decoding is not None and engine.decoding.mode != "off":
                yield from _decoding_metrics(engine.decoding.stats)

    registry = CollectorRegistry()
    registry.register(_Collector())
    return registry
