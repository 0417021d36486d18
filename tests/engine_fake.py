"""A recording stand-in for the spectool engine's ``/cache-tool-output`` endpoint, in front of
the scripted model server (spectool.testing).

Why a fake: the real engine needs a language model (tests/serving runs it with SmolLM2, too slow
for property runs). This one speaks the same endpoint (a JSON list of ``{name, params, output,
effect?}`` per response id, answered ``{"cached": n}``), never resolves calls in place, and
records every post with the state of the world when that response was created, so a test can
check the client's side of the contract: no read_only output reaches a response created after a
write in its scope.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spectool.testing import ScriptedModel, read_body, send_json
from spectool.testing._script import digest


@dataclass
class Post:
    response_id: str
    item: dict[str, Any]
    state_at_creation: Any


@dataclass
class RecordingEngine:
    model: ScriptedModel
    state: Callable[[], Any] = lambda: None
    posts: list[Post] = field(default_factory=list)
    created: dict[str, Any] = field(default_factory=dict)  # response id -> state when created

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or "/cache-tool-output/" not in scope["path"]:
            if scope["type"] == "http" and scope["path"].rstrip("/").endswith("/chat/completions"):
                return await self.model(scope, self._peek(receive), send)
            return await self.model(scope, receive, send)
        body = await read_body(receive)
        rid = scope["path"].rsplit("/", 1)[-1]
        items = json.loads(body)
        for item in items:
            self.posts.append(Post(rid, item, self.created.get(rid)))
        await send_json(send, 200, {"cached": len(items)})

    def _peek(self, receive: Callable) -> Callable:
        """Note each chat request's response id (the scripted model's digest of the messages)
        and the world's state as it arrives, then pass the body on unchanged."""
        chunks: list[bytes] = []

        async def wrapped() -> dict[str, Any]:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                request = json.loads(b"".join(chunks) or b"{}")
                rid = "chatcmpl-" + digest(request.get("messages") or [])
                self.created.setdefault(rid, self.state())
            return msg

        return wrapped
