"""A scripted OpenAI-compatible model server as a plain ASGI app (no web framework).

Speaks Chat Completions and Responses, streamed (SSE) or not, with tool calls, usage and a
configurable latency per generated token. Use it in-process through an ASGI transport
(:meth:`ScriptedModel.client`) or on a real localhost socket (``spectool.testing.SocketServer``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio

from .._wire import responses_input_to_messages
from ._script import Reply, Script, as_reply, digest, reply_index, tokens_of

__all__ = ["ScriptedModel"]

_CREATED = 1_700_000_000  # fixed: equal requests give byte-equal responses


class ScriptedModel:
    """An OpenAI-compatible model that follows a script.

    ``script`` is a list of replies (``say(...)``, ``call(...)``, lists of calls, plain text)
    or a function ``messages -> reply``. Latency: ``first_token_latency`` once, then
    ``token_latency`` per generated token (text words / 4-char pieces of call arguments).
    """

    def __init__(
        self,
        script: Script,
        *,
        token_latency: float = 0.0,
        first_token_latency: float = 0.0,
        model: str = "scripted",
        final: str = "(end of script)",
    ) -> None:
        self.script, self.model, self.final = script, model, final
        self.token_latency, self.first_token_latency = token_latency, first_token_latency
        self.requests: list[dict[str, Any]] = []  # every request body, in arrival order
        self._conversations: dict[str, list[dict[str, Any]]] = {}

    # -- the script -------------------------------------------------------------------------

    def reply_for(self, messages: list[dict[str, Any]]) -> Reply:
        if callable(self.script):
            return as_reply(self.script(messages))
        k = reply_index(messages)
        return as_reply(self.script[k]) if k < len(self.script) else Reply(text=self.final)

    def next_calls(self, messages: list[dict[str, Any]]) -> list[Any]:
        """The calls the model will make next (an oracle for scripted drafters)."""
        return list(self.reply_for(messages).tool_calls)

    def _tokens(self, reply: Reply) -> list[tuple[int, str]]:
        """(slot, piece): slot -1 is text, i >= 0 the arguments of call i."""
        out = [(-1, t) for t in tokens_of(reply.text or "")]
        for i, c in enumerate(reply.tool_calls):
            out.extend((i, t) for t in tokens_of(c.arguments_json))
        return out

    async def _pause(self, n_tokens: int) -> None:
        delay = self.token_latency * n_tokens
        if delay > 0:
            await anyio.sleep(delay)

    # -- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        path = scope["path"].rstrip("/")
        if scope["method"] == "GET" and path.endswith("/models"):
            return await send_json(
                send,
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": self.model, "object": "model", "created": _CREATED, "owned_by": "spectool"}
                    ],
                },
            )
        if scope["method"] != "POST" or not (
            path.endswith("/chat/completions") or path.endswith("/responses")
        ):
            return await send_json(send, 404, {"error": {"message": f"no route {path}", "type": "not_found"}})
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return await send_json(
                send, 400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}}
            )
        self.requests.append(request)
        if path.endswith("/chat/completions"):
            events = self._chat(request)
        else:
            events = self._responses(request)
        if request.get("stream"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
                }
            )
            async for chunk in events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            async for payload in events:
                await send_json(send, 200, payload)

    # -- chat completions -------------------------------------------------------------------

    async def _chat(self, req: dict[str, Any]) -> AsyncIterator[Any]:
        messages = req.get("messages") or []
        reply = self.reply_for(messages)
        rid = "chatcmpl-" + digest(messages)
        calls: list[dict[str, Any]] = [
            {
                "id": f"call_{rid[-8:]}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_json},
            }
            for i, c in enumerate(reply.tool_calls)
        ]
        tokens = self._tokens(reply)
        usage = {
            "prompt_tokens": sum(len(str(m.get("content") or "")) // 4 + 4 for m in messages),
            "completion_tokens": len(tokens),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        finish = "tool_calls" if calls else "stop"
        base = {"id": rid, "created": _CREATED, "model": req.get("model", self.model)}
        if self.first_token_latency:
            await anyio.sleep(self.first_token_latency)
        if not req.get("stream"):
            await self._pause(len(tokens))
            message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
            if calls:
                message["tool_calls"] = calls
            n = max(1, int(req.get("n") or 1))  # λ samples by `n`: the script is deterministic
            yield {
                **base,
                "object": "chat.completion",
                "usage": usage,
                "choices": [
                    {"index": i, "message": message, "finish_reason": finish, "logprobs": None}
                    for i in range(n)
                ],
            }
            return

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            body = {
                **base,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            return _sse(body)

        started: set[int] = set()

        def call_piece(slot: int, piece: str) -> bytes:  # a call's first piece names it
            tc: dict[str, Any] = {"index": slot, "function": {"arguments": piece}}
            if slot not in started:
                started.add(slot)
                tc.update(id=calls[slot]["id"], type="function")
                tc["function"]["name"] = calls[slot]["function"]["name"]
            return chunk({"tool_calls": [tc]})

        yield chunk({"role": "assistant", "content": ""})
        for slot, piece in tokens:
            await self._pause(1)
            yield chunk({"content": piece}) if slot < 0 else call_piece(slot, piece)
        for i in range(len(calls)):  # calls with empty arguments never got a piece
            if i not in started:
                yield call_piece(i, "")
        yield chunk({}, finish)
        if (req.get("stream_options") or {}).get("include_usage"):
            yield _sse({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"

    # -- responses --------------------------------------------------------------------------

    async def _responses(self, req: dict[str, Any]) -> AsyncIterator[Any]:
        prior = self._conversations.get(req.get("previous_response_id") or "", [])
        messages = [*prior, *responses_input_to_messages(req.get("input"), req.get("instructions"))]
        reply = self.reply_for(messages)
        rid = "resp_" + digest(messages)
        items: list[dict[str, Any]] = []
        if reply.text is not None:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_{rid[-8:]}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for i, c in enumerate(reply.tool_calls):
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{rid[-8:]}_{i}",
                    "call_id": f"call_{rid[-8:]}_{i}",
                    "name": c.name,
                    "arguments": c.arguments_json,
                    "status": "completed",
                }
            )
        self._conversations[rid] = [*messages, *responses_input_to_messages(items)]
        tokens = self._tokens(reply)
        n_in = sum(len(str(m.get("content") or "")) // 4 + 4 for m in messages)
        response = {
            "id": rid,
            "object": "response",
            "created_at": _CREATED,
            "status": "completed",
            "model": req.get("model", self.model),
            "output": items,
            "parallel_tool_calls": True,
            "tool_choice": req.get("tool_choice", "auto"),
            "tools": req.get("tools", []),
            "usage": {
                "input_tokens": n_in,
                "output_tokens": len(tokens),
                "total_tokens": n_in + len(tokens),
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
        if self.first_token_latency:
            await anyio.sleep(self.first_token_latency)
        if not req.get("stream"):
            await self._pause(len(tokens))
            yield response
            return
        async for event in self._response_events(response, tokens, reply):
            yield event

    async def _response_events(
        self, response: dict[str, Any], tokens: list[tuple[int, str]], reply: Reply
    ) -> AsyncIterator[bytes]:
        seq = 0

        def event(kind: str, **body: Any) -> bytes:
            nonlocal seq
            seq += 1
            return _sse({"type": kind, "sequence_number": seq, **body}, kind)

        items = response["output"]
        yield event("response.created", response={**response, "status": "in_progress", "output": []})
        text_offset = 1 if reply.text is not None else 0
        for idx, item in enumerate(items):
            opened = {**item, "status": "in_progress"}
            if item["type"] == "message":
                opened["content"] = []
            else:
                opened["arguments"] = ""
            yield event("response.output_item.added", output_index=idx, item=opened)
            slot = -1 if item["type"] == "message" else idx - text_offset
            for s, piece in tokens:
                if s != slot:
                    continue
                await self._pause(1)
                if slot < 0:
                    yield event(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=idx,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    )
                else:
                    yield event(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=idx,
                        delta=piece,
                    )
            yield event("response.output_item.done", output_index=idx, item=item)
        yield event("response.completed", response=response)


def _sse(body: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(body, separators=(',', ':'))}\n\n".encode()


async def read_body(receive: Callable) -> bytes:
    """An ASGI request's whole body, however many messages it came in."""
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            return body


async def send_json(send: Callable, status: int, payload: Any) -> None:
    """An ASGI JSON response: ``payload`` with ``status``."""
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
