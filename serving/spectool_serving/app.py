"""FastAPI routes: the OpenAI Chat Completions API, the tool cache endpoint, health, metrics.

``POST /cache-tool-output/{response_id}`` takes a JSON array of ``{name, params?, output,
keep_alive?}`` and answers ``200 {"cached": n}``. The tenant is the bearer token (API key);
only the response's owner may post to it. Each choice of a response carries the calls the
engine resolved internally as ``spectool_resolved_calls`` (``[{content, tool_call, output}]``
in order), so a client can rebuild the exact transcript; a stock client ignores the field.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from spectool.errors import EngineError, ToolCacheError

from .engine import Engine
from .requests import build_sequences

__all__ = ["create_app"]


def _error(status: int, message: str, type_: str = "invalid_request_error", param: str | None = None):
    return JSONResponse({"error": {"message": message, "type": type_, "param": param, "code": status}},
                        status_code=status)


def _owner(request: Request, api_keys: set[str] | None) -> str | JSONResponse:
    auth = request.headers.get("authorization", "")
    token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    if api_keys is not None and token not in api_keys:
        return _error(401, "missing or unknown API key", "authentication_error")
    return token


def create_app(engine: Engine, *, api_keys: set[str] | None = None,
               max_body_bytes: int = 1 << 20) -> FastAPI:
    app = FastAPI(title="spectool engine")
    app.state.engine = engine
    registry = _metrics_registry(engine)

    async def _body(request: Request) -> Any:
        raw = await request.body()
        if len(raw) > max_body_bytes:
            raise EngineError(f"body of {len(raw)} bytes exceeds the limit of {max_body_bytes}", status_code=413)
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise EngineError(f"body is not valid JSON: {exc}", status_code=400) from exc

    @app.exception_handler(EngineError)
    async def _engine_error(request: Request, exc: EngineError):
        return _error(exc.status_code or 500, str(exc), param=getattr(exc, "param", None))

    @app.get("/health")
    async def health():
        return {"status": "ok" if engine.error is None else f"degraded: {engine.error!r}"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": engine.model_name, "object": "model",
                                            "created": 0, "owned_by": "spectool"}]}

    @app.get("/metrics")
    async def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/cache-tool-output/{response_id}")
    async def cache_tool_output(response_id: str, request: Request):
        owner = _owner(request, api_keys)
        if isinstance(owner, JSONResponse):
            return owner
        if engine.toolcache is None:
            return _error(404, "this server has no tool cache")
        items = await _body(request)
        try:
            return {"cached": engine.toolcache.post(response_id, owner, items)}
        except ToolCacheError as exc:
            return _error(exc.status_code or 400, str(exc))

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        owner = _owner(request, api_keys)
        if isinstance(owner, JSONResponse):
            return owner
        body = await _body(request)
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        seqs = build_sequences(body, engine, rid, owner)
        if engine.toolcache is not None:
            engine.toolcache.open(rid, owner, seqs[0].tools)
        engine.start()
        meta = {"id": rid, "created": int(time.time()), "model": body.get("model") or engine.model_name}
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(_sse(engine, seqs, meta, usage), media_type="text/event-stream")
        try:
            return await _complete(engine, seqs, meta)
        finally:
            _close(engine, rid)

    return app


def _close(engine: Engine, rid: str) -> None:
    engine.cancel(rid)  # no-op when finished; stops generation when the client went away
    if engine.toolcache is not None:
        engine.toolcache.close(rid)


def _tool_calls(call: dict | None, stream: bool = False) -> list | None:
    if call is None:
        return None
    return [{"index": 0, **call}] if stream else [call]


async def _complete(engine: Engine, seqs: list, meta: dict) -> Any:
    finals: dict[int, dict] = {}
    async for index, ev in engine.stream(seqs):
        if ev["type"] == "error":
            return _error(500, ev["message"], "server_error")
        if ev["type"] == "finish":
            finals[index] = ev
    choices, prompt, completion = [], 0, 0
    for i in sorted(finals):
        ev = finals[i]
        message = {"role": "assistant", "content": ev["content"] if not ev["tool_call"] else (ev["content"] or None)}
        if ev["tool_call"]:
            message["tool_calls"] = _tool_calls(ev["tool_call"])
        choices.append({"index": i, "message": message, "finish_reason": ev["reason"],
                        "logprobs": None, "spectool_resolved_calls": ev["resolved"]})
        prompt = max(prompt, ev["usage"]["prompt_tokens"])
        completion += ev["usage"]["completion_tokens"]
    return {**meta, "object": "chat.completion", "choices": choices,
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def _chunk(meta: dict, choices: list, **extra: Any) -> str:
    return "data: " + json.dumps({**meta, "object": "chat.completion.chunk", "choices": choices, **extra}) + "\n\n"


async def _sse(engine: Engine, seqs: list, meta: dict, include_usage: bool) -> AsyncIterator[str]:
    prompt = completion = 0
    try:
        # the first chunk carries the response id before any token: the client posts to it
        yield _chunk(meta, [{"index": s.index, "delta": {"role": "assistant", "content": ""},
                             "finish_reason": None} for s in seqs])
        async for index, ev in engine.stream(seqs):
            if ev["type"] == "content":
                yield _chunk(meta, [{"index": index, "delta": {"content": ev["text"]}, "finish_reason": None}])
            elif ev["type"] == "resolved":
                yield _chunk(meta, [{"index": index, "delta": {}, "finish_reason": None,
                                     "spectool_resolved_call": ev["record"]}])
            elif ev["type"] == "error":
                yield "data: " + json.dumps({"error": {"message": ev["message"], "type": "server_error"}}) + "\n\n"
                return
            elif ev["type"] == "finish":
                if ev["tool_call"]:
                    yield _chunk(meta, [{"index": index, "delta": {"tool_calls": _tool_calls(ev["tool_call"], True)},
                                         "finish_reason": None}])
                yield _chunk(meta, [{"index": index, "delta": {}, "finish_reason": ev["reason"],
                                     "spectool_resolved_calls": ev["resolved"]}])
                prompt = max(prompt, ev["usage"]["prompt_tokens"])
                completion += ev["usage"]["completion_tokens"]
        if include_usage:
            yield _chunk(meta, [], usage={"prompt_tokens": prompt, "completion_tokens": completion,
                                          "total_tokens": prompt + completion})
        yield "data: [DONE]\n\n"
    finally:
        _close(engine, meta["id"])


def _decoding_metrics(stats: Any):
    """Text speculation (tree decoding policy): τ, draft size and verify time."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    yield CounterMetricFamily("spectool_engine_tree_steps", "verification steps with a text draft",
                              value=stats.steps)
    yield CounterMetricFamily("spectool_engine_tree_drafted", "text draft tokens verified",
                              value=stats.drafted)
    yield CounterMetricFamily("spectool_engine_tree_accepted", "text draft tokens accepted",
                              value=stats.accepted)
    yield CounterMetricFamily("spectool_engine_tree_verify_seconds", "time in verifying forwards",
                              value=stats.verify_s)
    yield GaugeMetricFamily("spectool_engine_tree_tau", "mean tokens emitted per verification",
                            value=stats.tau)
    steps = max(stats.steps, 1)
    yield GaugeMetricFamily("spectool_engine_tree_mean_draft", "mean draft tokens per verification",
                            value=stats.drafted / steps)


def _metrics_registry(engine: Engine):
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class _Collector:
        def collect(self):
            for name, value in engine.counters().items():
                yield CounterMetricFamily(f"spectool_engine_{name}", f"engine counter {name}", value=value)
            yield GaugeMetricFamily("spectool_engine_running", "sequences in the batch",
                                    value=len(engine.scheduler.running))
            yield GaugeMetricFamily("spectool_engine_waiting", "sequences queued",
                                    value=len(engine.scheduler.waiting))
            if engine.decoding is not None and engine.decoding.mode != "off":
                yield from _decoding_metrics(engine.decoding.stats)

    registry = CollectorRegistry()
    registry.register(_Collector())
    return registry
