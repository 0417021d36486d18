"""Requests and checks shared by the vLLM tests."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable

import httpx

from spectool_bench.vllm import _workload as workload

WEATHER = workload.TOOL


def quick_start(env: dict) -> dict:
    """``env`` for a test server that starts one process fewer per engine: the model runs in the
    engine-core process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, vLLM's single-process executor)
    instead of a worker process of its own, a whole vLLM import less (about 13 s of CPU each) on
    the critical path of start-up. The engine core stays a process of its own (the API server
    always runs it so) and the plugins work as with a worker process (``collective_rpc`` calls
    the in-process worker). One torch thread, as vLLM sets it in a worker process: in the engine
    core the CPU worker blocks vLLM's own lowering to one, and two spinning OpenMP threads on a
    loaded 2-core machine made decoding 5x slower (20 tokens: 13.3 s against 2.6 s)."""
    return env | {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat_body(question: str, **extra) -> dict:
    """The bench workload's request, for the served name ``smollm2`` and at most 40 tokens."""
    return workload.chat_body(question, **{"model": "smollm2", "max_tokens": 40, **extra})


def post_until_known(send: Callable[[], httpx.Response], deadline_s: float = 120) -> tuple[int, dict]:
    """``send()`` (a cache post) again while its response id is unknown (404); the first other
    reply, or the last 404 once ``deadline_s`` passed."""
    deadline = time.monotonic() + deadline_s
    while True:
        r = send()
        if r.status_code != 404 or time.monotonic() > deadline:
            return r.status_code, r.json()
        time.sleep(0.005)


def stream_and_post(
    client: httpx.Client,
    body: dict,
    items: list | None,
    headers: dict | None = None,
    post_headers: dict | None = None,
    attempts: int = 3,
    then: Callable[[str], list] | None = None,
) -> tuple[str, list[dict], list]:
    """Stream a chat and post ``items`` to it while it is live.

    The response id is fixed up front (``X-Request-Id``) and a poster thread retries while the
    id is still unknown (404), so the post lands between the server opening the id and the
    response finishing. Posting after the first chunk instead raced the whole generation on a
    loaded machine: all of a short tool call could stream before the client read a byte (410).

    Returns (response id, parsed chunks, post replies: the one non-404 reply, or the last 404,
    then what ``then(response id)`` returned: more posts, made right after the first landed).

    A 410 means the whole response finished before the poster thread got a turn (CI on two busy
    cores): the server was right and the race was lost, so the exchange is run again under a
    fresh id, up to ``attempts`` times."""
    for _ in range(attempts):
        rid, chunks, replies = _stream_and_post_once(client, body, items, headers, post_headers, then)
        if not replies or all(status != 410 for status, _ in replies):
            break
    return rid, chunks, replies


def _stream_and_post_once(client, body, items, headers, post_headers, then):
    base = uuid.uuid4().hex
    rid = f"chatcmpl-{base}"
    replies: list = []
    poster = None
    if items is not None:

        def post() -> None:
            replies.append(
                post_until_known(
                    lambda: client.post(
                        f"/cache-tool-output/{rid}", json=items, headers=post_headers or headers or {}
                    )
                )
            )
            if then is not None and replies[0][0] != 404:
                replies.extend(then(rid))

        poster = threading.Thread(target=post)
        poster.start()
    chunks = []
    try:
        with client.stream(
            "POST",
            "/v1/chat/completions",
            json={**body, "stream": True},
            headers={**(headers or {}), "X-Request-Id": base},
        ) as resp:
            assert resp.status_code == 200, resp.read()
            for line in resp.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[6:]))
    finally:
        if poster is not None:
            poster.join()
    return rid, chunks, replies


def final_call(message: dict) -> tuple[str, dict] | None:
    calls = message.get("tool_calls") or []
    return (calls[0]["function"]["name"], json.loads(calls[0]["function"]["arguments"])) if calls else None
