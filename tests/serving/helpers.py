"""Drive an engine in-process without HTTP, one request at a time collecting its events; or
serve an app on a real socket with uvicorn."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from spectool_serving.requests import build_sequences
from spectool_serving.sequence import Content, Finish


def run_request(engine, body: dict, *, owner: str = "", before: Callable[[str], None] | None = None) -> dict:
    """Run one choice to completion on the calling thread; returns its finish event."""
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    seqs = build_sequences(body, engine, rid, owner)
    if engine.store is not None:
        engine.store.open(rid, owner, seqs[0].tools)
    if before is not None:
        before(rid)  # e.g. post speculative outputs, as a client would while the model runs
    events: list = []
    seqs[0].emit = events.append
    engine.add(seqs[0])
    engine.run_until_idle()
    if engine.store is not None:
        engine.store.close(rid, owner)
    finish = [e for e in events if isinstance(e, Finish)][0]
    streamed = "".join(e.text for e in events if isinstance(e, Content))
    return {**dataclasses.asdict(finish), "events": events, "streamed": streamed}


def call_message(content: Any, call: dict) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": [call]}


def transcript_of(finish: dict) -> list[dict]:
    """Messages a client appends after one engine response (resolved calls expanded)."""
    out: list[dict] = []
    for rec in finish["resolved"]:
        out.append(call_message(rec["content"], rec["tool_call"]))
        out.append({"role": "tool", "tool_call_id": rec["tool_call"]["id"], "content": rec["output"]})
    if finish["tool_call"]:
        out.append(call_message(finish["content"] or None, finish["tool_call"]))
    else:
        out.append({"role": "assistant", "content": finish["content"]})
    return out


def normalized(messages: list[dict]) -> list[tuple]:
    """Transcript without call ids (each path mints its own)."""
    out = []
    for m in messages:
        calls = tuple((c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or ())
        out.append((m["role"], m.get("content") or None, calls))
    return out


def agent(
    engine,
    body: dict,
    tool: Callable[[dict], str],
    *,
    turns: int,
    speculate: Callable[[str, list], None] | None = None,
) -> tuple[list[dict], list[dict]]:
    """The client-run loop: request, run the returned call, append, repeat (``turns`` requests
    at most). ``speculate(rid, messages)`` may post outputs before the engine starts."""
    messages = list(body["messages"])
    finishes = []
    for _ in range(turns):
        fin = run_request(
            engine,
            {**body, "messages": messages},
            before=(lambda rid, m=messages: speculate(rid, m)) if speculate else None,
        )
        finishes.append(fin)
        new = transcript_of(fin)
        messages += new
        if not fin["tool_call"]:
            break
        call = fin["tool_call"]
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": tool(json.loads(call["function"]["arguments"])),
            }
        )
    return messages, finishes


@contextlib.contextmanager
def uvicorn_server(app, *, start_timeout: float = 60) -> Iterator[str]:
    """``app`` served by uvicorn (the server ``spectool serve`` runs) in a thread, on a free
    localhost port: yields its base URL (no ``/v1``), stops it on exit."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, name="test-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the server did not start"
    port = server.servers[0].sockets[0].getsockname()[1]  # port 0: the one the OS gave
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
