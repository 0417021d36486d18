"""The serving workload, over HTTP, identical for both backends (torch engine and vLLM).

An agent turn is: question → forced tool call (``tool_choice="required"``) → the tool, with an
injected latency → a second forced call. Both hops force a call because the torch engine's O3
keeps the request's ``tool_choice`` for the continued hop; forcing it everywhere gives both
backends the same tokens to produce. Three modes:

* baseline: call, run the tool, call again (2 round trips);
* client side (Alg. 2, a drafter that predicted the call): the tool starts with the request;
* engine side (Alg. 4): the response streams, the client posts the speculative output to
  ``/cache-tool-output/{id}``, O2 drafts the call, O3 continues inside the server (1 trip).

Prefill per turn = prompt tokens minus prefix-cache hits (``cached_tokens``; the torch engine
has no prefix cache and reports none). Server counters: ``o2_counts``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

__all__ = [
    "CITIES",
    "MODES",
    "TOOL",
    "chat_body",
    "decode_rate",
    "o2_counts",
    "o2_rejections",
    "story_body",
    "turn",
]

CITIES = ["Paris", "Rome", "Berlin", "Madrid", "Vienna", "Oslo", "Lisbon", "Prague"]
MODES = ("baseline", "client", "engine")
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"],
        },
    },
}
NO_O3 = {"x-spectool-o3": "off"}  # vLLM: no continuation on plain requests (the torch engine needs no header)


def chat_body(question: str, *, model: str = "smollm2", max_tokens: int = 48, **kw: Any) -> dict:
    """A greedy request that forces a :data:`TOOL` call (the vLLM tests send it too)."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "tools": [TOOL],
        "tool_choice": "required",
        "max_tokens": max_tokens,
        "temperature": 0,
        **kw,
    }


def _body(model: str, city: str, **kw: Any) -> dict:
    return chat_body(f"What is the weather in {city}?", model=model, **kw)


def _tool(args: dict, latency: float) -> str:
    time.sleep(latency)
    return f"sunny, 21 C in {args.get('city')}"


def _prefill(usage: dict | None) -> int:
    usage = usage or {}
    return usage.get("prompt_tokens", 0) - (
        (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    )


def story_body(model: str, i: int, tokens: int, **kw: Any) -> dict:
    """Story request ``i``: greedy, exactly ``tokens`` tokens (``ignore_eos``), no tools: a
    decode-rate load."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": f"Tell long story number {i}."}],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        **kw,
    }


def decode_rate(c: httpx.Client, model: str, streams: int, tokens: int = 128) -> float:
    """Aggregate generated tokens/s of ``streams`` concurrent story requests."""

    def one(i: int) -> int:
        r = c.post("/v1/chat/completions", json=story_body(model, i, tokens))
        r.raise_for_status()
        return r.json()["usage"]["completion_tokens"]

    t = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        n = sum(pool.map(one, range(streams)))
    return n / (time.perf_counter() - t)


def _post(c: httpx.Client, body: dict) -> dict:
    r = c.post("/v1/chat/completions", json=body, headers=NO_O3)
    r.raise_for_status()
    return r.json()


def _second(c: httpx.Client, model: str, city: str, call: dict, out: str) -> dict:
    messages = _body(model, city)["messages"] + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": out},
    ]
    return _post(c, _body(model, city, messages=messages))


def _two_hops(c: httpx.Client, model: str, city: str, latency: float, overlap: bool) -> dict:
    t = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(_tool, {"city": city}, latency) if overlap else None
        r1 = _post(c, _body(model, city))
        call = r1["choices"][0]["message"]["tool_calls"][0]
        args = json.loads(call["function"]["arguments"])
        out = fut.result() if fut is not None and args == {"city": city} else _tool(args, latency)
    r2 = _second(c, model, city, call, out)
    return {
        "s": time.perf_counter() - t,
        "prefill": _prefill(r1["usage"]) + _prefill(r2["usage"]),
        "trips": 2,
    }


def _engine(c: httpx.Client, model: str, city: str, latency: float) -> dict:
    t = time.perf_counter()
    body = _body(model, city, stream=True, stream_options={"include_usage": True})
    usage, resolved, calls, poster = None, 0, list[dict[str, Any]](), None
    with c.stream("POST", "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: {"):
                continue
            ch = json.loads(line[6:])
            if poster is None:  # the first chunk names the response: start the tool now

                def post(rid=ch["id"]):
                    out = _tool({"city": city}, latency)
                    c.post(
                        f"/cache-tool-output/{rid}",
                        json=[{"name": "get_weather", "params": {"city": city}, "output": out}],
                    )

                poster = threading.Thread(target=post)
                poster.start()
            usage = ch.get("usage") or usage
            for chc in ch.get("choices", ()):
                resolved += "spectool_resolved_call" in chc
                calls += chc.get("delta", {}).get("tool_calls") or []
    trips, prefill = 1, _prefill(usage)
    if poster is not None:
        poster.join()
    if calls and not resolved:  # a miss: the client finishes the turn itself (Alg. 2 fallback)
        call = {
            "id": calls[0]["id"],
            "type": "function",
            "function": {
                "name": calls[0]["function"]["name"],
                "arguments": "".join(x["function"].get("arguments") or "" for x in calls),
            },
        }
        r2 = _second(c, model, city, call, _tool({"city": city}, 0))
        trips, prefill = 2, prefill + _prefill(r2["usage"])
    return {"s": time.perf_counter() - t, "prefill": prefill, "trips": trips, "hit": bool(resolved)}


def turn(c: httpx.Client, mode: str, model: str, city: str, latency: float) -> dict:
    """One agent turn in ``mode``: {s, prefill, trips[, hit]}."""
    if mode == "engine":
        return _engine(c, model, city, latency)
    return _two_hops(c, model, city, latency, overlap=mode == "client")


_METRIC = re.compile(r"^spectool_engine_(o2_drafted|o2_accepted)(?:_total)?\s+([0-9.e+]+)$", re.M)


def o2_counts(c: httpx.Client) -> dict:
    """Tool-call draft tokens proposed/accepted so far: vLLM's ``/spectool/stats`` or the torch
    engine's Prometheus counters (its O2 drafts only tool calls)."""
    r = c.get("/spectool/stats")
    if r.status_code == 200:
        o2 = r.json()["o2"][0]
        return {"tool_proposed": o2["tool_proposed"], "tool_accepted": o2["tool_accepted"]}
    found = {k: int(float(v)) for k, v in _METRIC.findall(c.get("/metrics").text)}
    return {"tool_proposed": found.get("o2_drafted", 0), "tool_accepted": found.get("o2_accepted", 0)}


def o2_rejections(c: httpx.Client) -> list[dict]:
    """vLLM's last few tool drafts the model did not take in full (drafted vs written text);
    [] on the torch engine, whose grammar makes the model write the cached layout."""
    r = c.get("/spectool/stats")
    return list(r.json()["o2"][0].get("tool_rejections", [])) if r.status_code == 200 else []
