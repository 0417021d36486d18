"""O3 on vLLM: continue a request whose tool calls all have cached outputs, inside the server.

Each hop resubmits the conversation exactly as a client would send it next (the model's
calls as an assistant message, the cached outputs as tool messages, rendered by the chat
template), through vLLM's own chat handler, so parsing, structured outputs and metrics stay
vLLM's; the prefix cache holds the history, so only the new tail is prefilled. The client
gets one response under the first hop's id; ``spectool_resolved_calls`` on the choice lists
``{content, tool_call, output}`` per resolved call (the torch backend's field), and
``spectool`` carries per-hop prompt/cached token counts and the round trips saved.
``then_tool_choice`` (header ``x-spectool-then-tool-choice``) is the ``tool_choice`` of later
hops, for agents that force the first call and let the model answer after it — the client
sends the same on its own later turns, so the transcripts stay equal.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from ..toolcalls import output_text

__all__ = ["Continuation", "complete", "stream"]

Lookup = Callable[[str, str], Any]  # (name, arguments text) -> entry with .output, or None


@dataclass(frozen=True)
class Continuation:
    """One response's hops: ``run`` a request through vLLM's chat handler, the client's
    ``request``, the response id ``rid`` and ``base`` of hop ids, the cache ``lookup``, at
    most ``max_hops`` hops, and ``then_tool_choice`` for the hops after the first."""

    run: Callable[[Any], Any]
    request: Any
    rid: str
    base: str
    lookup: Lookup
    max_hops: int
    then_tool_choice: str | None = None

    def resolve(self, calls: list[dict], hops: int) -> list[Any] | None:
        """Cached outputs for every call while hops remain, or None when any call misses (the
        client runs it)."""
        if not calls or hops > self.max_hops:
            return None
        outputs = []
        for c in calls:
            entry = self.lookup(c["function"]["name"], c["function"]["arguments"])
            if entry is None:
                return None
            outputs.append(entry.output)
        return outputs

    def next_request(self, messages: list, hop: int) -> Any:
        update: dict = {"messages": messages, "request_id": f"{self.base}.h{hop}"}
        if self.then_tool_choice:
            update["tool_choice"] = self.then_tool_choice
        return self.request.model_copy(update=update)


def _next_messages(messages: list, content: str | None, calls: list[dict], outputs: list) -> list:
    # a copy of each function: vLLM's chat preprocessing parses ``arguments`` to a dict in place,
    # which would leak into the resolved-call records returned to the client
    assistant = {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"id": c["id"], "type": "function", "function": dict(c["function"])} for c in calls],
    }
    tools = [
        {"role": "tool", "tool_call_id": c["id"], "content": output_text(o)} for c, o in zip(calls, outputs)
    ]
    return [*messages, assistant, *tools]


def _hop_info(usage: dict | None) -> dict:
    usage = usage or {}
    details = usage.get("prompt_tokens_details") or {}
    return {
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "cached_tokens": details.get("cached_tokens"),
        "completion_tokens": usage.get("completion_tokens", 0),
    }


async def complete(c: Continuation) -> dict | Any:
    """Non-streamed: returns the final response as a dict (or vLLM's error object)."""
    resolved: list[dict] = []
    hops: list[dict] = []
    messages = list(c.request.messages)
    req = c.request
    while True:
        result = await c.run(req)
        if not hasattr(result, "choices"):
            return result  # an ErrorResponse: hand it back unchanged
        body = result.model_dump()
        hops.append(_hop_info(body.get("usage")))
        choice = body["choices"][0]
        calls = choice["message"].get("tool_calls") or []
        calling = len(body["choices"]) == 1 and choice["finish_reason"] == "tool_calls"
        outputs = c.resolve(calls, len(hops)) if calling else None
        if outputs is None:
            break
        content = choice["message"].get("content")
        for call, o in zip(calls, outputs):
            resolved.append({"content": content, "tool_call": call, "output": o})
            content = None
        messages = _next_messages(messages, choice["message"].get("content"), calls, outputs)
        req = c.next_request(messages, len(hops))
    body["id"] = c.rid
    for ch in body["choices"]:
        ch["spectool_resolved_calls"] = resolved
    body["usage"] = _sum_usage(hops, body.get("usage"))
    body["spectool"] = {"hops": hops, "round_trips_saved": len(hops) - 1}
    return body


def _sum_usage(hops: list[dict], last: dict | None) -> dict:
    prompt = sum(h["prompt_tokens"] for h in hops)
    completion = sum(h["completion_tokens"] for h in hops)
    cached = sum(h["cached_tokens"] or 0 for h in hops)
    out = dict(last or {})
    out.update(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
    if out.get("prompt_tokens_details") is not None:
        out["prompt_tokens_details"] = {**out["prompt_tokens_details"], "cached_tokens": cached}
    return out


def _sse(obj: dict) -> str:
    return "data: " + json.dumps(obj, ensure_ascii=False) + "\n\n"


def _merge_call_delta(calls: dict[int, dict], delta: dict) -> None:
    for tc in delta.get("tool_calls") or ():
        slot = calls.setdefault(
            tc.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if tc.get("id"):
            slot["id"] = tc["id"]
        fn = tc.get("function") or {}
        slot["function"]["name"] += fn.get("name") or ""
        slot["function"]["arguments"] += fn.get("arguments") or ""


async def stream(c: Continuation, first: Any, report: dict | None = None) -> AsyncIterator[str]:
    """Streamed: content passes through at once; a hop's tool-call chunks are held until the
    hop ends, then either replaced by ``spectool_resolved_call`` chunks (all cached: the
    next hop streams on under the same id) or released unchanged (the client runs them)."""
    rid, messages, gen, hops = c.rid, list(c.request.messages), first, 0
    resolved: list[dict[str, Any]] = []
    usage_total: dict | None = None
    while True:
        held: list[dict[str, Any]] = []
        calls: dict[int, dict[str, Any]] = {}
        finish, content, usage = None, "", None
        async for raw in gen:
            for line in raw.splitlines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                chunk["id"] = rid
                if chunk.get("usage") and not chunk.get("choices"):
                    usage = chunk["usage"]
                    continue
                choices = chunk.get("choices") or []
                delta = choices[0].get("delta", {}) if choices else {}
                if choices and choices[0].get("finish_reason"):
                    finish = choices[0]["finish_reason"]
                if delta.get("tool_calls") or finish:
                    _merge_call_delta(calls, delta)
                    held.append(chunk)
                    continue
                if hops and delta.get("role") and not delta.get("content"):
                    continue  # one role chunk per response, not per hop
                content += delta.get("content") or ""
                yield _sse(chunk)
        hops += 1
        if report is not None:
            report["round_trips_saved"] = hops - 1
        usage_total = _add_usage(usage_total, usage)
        ordered = [calls[i] for i in sorted(calls)]
        outputs = c.resolve(ordered, hops) if finish == "tool_calls" else None
        if outputs is None:
            for chunk in held:
                if chunk.get("choices") and chunk["choices"][0].get("finish_reason"):
                    chunk["choices"][0]["spectool_resolved_calls"] = resolved
                yield _sse(chunk)
            break
        hop_content = content or None
        for call, o in zip(ordered, outputs):
            record = {"content": content or None, "tool_call": call, "output": o}
            resolved.append(record)
            if report is not None:
                report["hits"] = report.get("hits", 0) + 1
            content = ""
            yield _sse(
                {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "choices": [
                        {"index": 0, "delta": {}, "finish_reason": None, "spectool_resolved_call": record}
                    ],
                }
            )
        messages = _next_messages(messages, hop_content, ordered, outputs)
        gen = await c.run(c.next_request(messages, hops))
        if not hasattr(gen, "__aiter__"):
            yield _sse({"error": gen.model_dump() if hasattr(gen, "model_dump") else str(gen)})
            break
    if usage_total is not None:
        yield _sse(
            {
                "id": rid,
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": usage_total,
                "spectool": {"round_trips_saved": hops - 1},
            }
        )
    yield "data: [DONE]\n\n"


def _add_usage(total: dict | None, usage: dict | None) -> dict | None:
    if usage is None:
        return total
    if total is None:
        return dict(usage)
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        total[k] = total.get(k, 0) + usage.get(k, 0)
    if total.get("prompt_tokens_details") and usage.get("prompt_tokens_details"):
        a, b = total["prompt_tokens_details"], usage["prompt_tokens_details"]
        total["prompt_tokens_details"] = {
            **a,
            "cached_tokens": (a.get("cached_tokens") or 0) + (b.get("cached_tokens") or 0),
        }
    return total
