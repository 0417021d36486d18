"""Serve an ASGI app on a real localhost socket with a minimal HTTP/1.1 server (stdlib + anyio).

Enough HTTP for OpenAI clients: keep-alive, Content-Length request bodies, and responses sent
with Content-Length (one body message) or chunked (streams), so SSE arrives as it is produced.
Also builds SDK clients for either path (in-process ASGI transport or a URL).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import SocketAttribute, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = ["ServerThread", "SocketServer", "asgi_http_client", "openai_client"]

_MAX_HEAD = 64 * 1024


class SocketServer:
    """``async with SocketServer(app) as server:`` serves ``app`` at ``server.url``."""

    def __init__(self, app: Callable, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app, self.host, self.port = app, host, port
        self.url = ""
        self._tg: TaskGroup | None = None

    async def __aenter__(self) -> SocketServer:
        listener = await anyio.create_tcp_listener(local_host=self.host, local_port=self.port)
        self.port = listener.extra(SocketAttribute.local_port)
        self.url = f"http://{self.host}:{self.port}/v1"
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(listener.serve, self._connection)
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        return await self._tg.__aexit__(*exc)

    async def _connection(self, stream: Any) -> None:
        reader = BufferedByteReceiveStream(stream)
        async with stream:
            try:
                while await self._one_request(stream, reader):
                    pass
            except (
                anyio.EndOfStream,
                anyio.IncompleteRead,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
                anyio.DelimiterNotFound,
            ):
                return

    async def _one_request(self, stream: Any, reader: BufferedByteReceiveStream) -> bool:
        head = await reader.receive_until(b"\r\n\r\n", _MAX_HEAD)
        line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, version = line.split(" ", 2)
        headers = [tuple(h.split(":", 1)) for h in header_lines if ":" in h]
        lower = {k.strip().lower(): v.strip() for k, v in headers}
        length = int(lower.get("content-length", "0") or 0)
        body = await reader.receive_exactly(length) if length else b""
        path, _, query = target.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": version[5:],
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(k.strip().lower().encode(), v.strip().encode()) for k, v in headers],
            "server": (self.host, self.port),
            "client": ("127.0.0.1", 0),
        }
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await anyio.sleep_forever()  # pragma: no cover - the app never waits for disconnect
            return {}

        state: dict[str, Any] = {"chunked": None, "status": 500, "headers": []}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["status"], state["headers"] = message["status"], message.get("headers", [])
                return
            data, more = message.get("body", b""), message.get("more_body", False)
            if state["chunked"] is None:
                state["chunked"] = more
                names = {k.lower() for k, _ in state["headers"]}
                extra = (
                    [(b"transfer-encoding", b"chunked")]
                    if more
                    else (
                        [] if b"content-length" in names else [(b"content-length", str(len(data)).encode())]
                    )
                )
                lines = [f"HTTP/1.1 {state['status']} OK".encode()]
                lines += [k + b": " + v for k, v in [*state["headers"], *extra]]
                await stream.send(b"\r\n".join(lines) + b"\r\n\r\n")
            if state["chunked"]:
                if data:
                    await stream.send(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                if not more:
                    await stream.send(b"0\r\n\r\n")
            elif data:
                await stream.send(data)

        await self.app(scope, receive, send)
        return lower.get("connection", "").lower() != "close"


class ServerThread:
    """A :class:`SocketServer` on a background event loop, for sync code and examples::

    with ServerThread(app) as url: ...
    """

    def __init__(self, app: Callable, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = SocketServer(app, host, port)
        self._portal_cm: Any = None
        self._cm: Any = None

    def __enter__(self) -> str:
        from anyio.from_thread import start_blocking_portal

        self._portal_cm = start_blocking_portal()
        portal = self._portal_cm.__enter__()
        self._cm = portal.wrap_async_context_manager(self._server)
        return self._cm.__enter__().url

    def __exit__(self, *exc: Any) -> None:
        try:
            self._cm.__exit__(*exc)
        finally:
            self._portal_cm.__exit__(None, None, None)


def _openai_major() -> int:
    import openai

    return int(openai.__version__.split(".")[0])


def asgi_http_client(app: Callable, base_url: str = "http://scripted.local/v1") -> Any:
    """An async HTTP client that talks to ``app`` in-process: ``httpx2`` for openai >= 3
    (its required client type), ``httpx`` before."""
    http = importlib.import_module("httpx2" if _openai_major() >= 3 else "httpx")
    return http.AsyncClient(transport=http.ASGITransport(app=app), base_url=base_url)


def openai_client(target: Callable | str, **options: Any) -> Any:
    """An ``AsyncOpenAI`` for a scripted server: pass the ASGI app (in-process) or a URL."""
    from openai import AsyncOpenAI

    options.setdefault("api_key", "scripted")
    options.setdefault("max_retries", 0)
    if isinstance(target, str):
        return AsyncOpenAI(base_url=target, **options)
    base_url = "http://scripted.local/v1"
    return AsyncOpenAI(base_url=base_url, http_client=asgi_http_client(target, base_url), **options)
