"""Requests and checks shared by the vLLM tests."""

from __future__ import annotations

import json

import httpx

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"]}}}


def chat_body(question: str, **extra) -> dict:
    return {"model": "smollm2", "messages": [{"role": "user", "content": question}], "tools": [WEATHER],
            "tool_choice": "required", "max_tokens": 40, "temperature": 0, **extra}


def stream_and_post(client: httpx.Client, body: dict, items: list | None, headers: dict | None = None,
                    post_headers: dict | None = None) -> tuple[str, list[dict], list]:
    """Stream a chat; right after the first chunk (which names the response) post ``items``.

    Returns (response id, parsed chunks, post replies)."""
    chunks, replies, rid = [], [], None
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True},
                       headers=headers or {}) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            chunks.append(chunk)
            if rid is None:
                rid = chunk["id"]
                if items is not None:
                    r = client.post(f"/cache-tool-output/{rid}", json=items, headers=post_headers or headers or {})
                    replies.append((r.status_code, r.json()))
    return rid, chunks, replies


def final_call(message: dict) -> tuple[str, dict] | None:
    calls = message.get("tool_calls") or []
    return (calls[0]["function"]["name"], json.loads(calls[0]["function"]["arguments"])) if calls else None
