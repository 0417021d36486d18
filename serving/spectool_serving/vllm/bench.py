"""Serving figures on vLLM with spectool's plugins, one server, one run.

    python -m spectool_serving.vllm.bench [--dtype bfloat16] [--tool-latency 0.5] [--turns 4]

Prints: decode tokens/s single-stream and across 8 streams; per agent turn (question → forced
tool call → tool with injected latency → answer) the wall time of the baseline (call, run
the tool, call again), the client side (Alg. 2 with a drafter that predicts the call: the tool
starts with the main call) and the engine side (Alg. 4: the tool starts with the streamed
call, its output is posted, O2 drafts the call and O3 continues in the server); prefill
tokens (prompt minus prefix-cache hits) and client round trips per turn.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from .serve import VllmServer, build_command, server_env

CITIES = ["Paris", "Rome", "Berlin", "Madrid", "Vienna", "Oslo", "Lisbon", "Prague"]
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"]}}}


def _body(city: str, **kw) -> dict:
    return {"model": "smollm2", "messages": [{"role": "user", "content": f"What is the weather in {city}?"}],
            "tools": [TOOL], "tool_choice": "required", "max_tokens": 48, "temperature": 0, **kw}


def _tool(args: dict, latency: float) -> str:
    time.sleep(latency)
    return f"sunny, 21 C in {args.get('city')}"


def _prefill(usage: dict) -> int:
    return usage["prompt_tokens"] - ((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


def decode_rate(c: httpx.Client, streams: int, tokens: int = 128) -> float:
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Tell a long story."}],
            "max_tokens": tokens, "temperature": 0, "ignore_eos": True}

    def one(i: int) -> int:
        b = {**body, "messages": [{"role": "user", "content": f"Tell long story number {i}."}]}
        return c.post("/v1/chat/completions", json=b).json()["usage"]["completion_tokens"]

    t = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        n = sum(pool.map(one, range(streams)))
    return n / (time.perf_counter() - t)


def turn_baseline(c: httpx.Client, city: str, latency: float) -> dict:
    t = time.perf_counter()
    r1 = c.post("/v1/chat/completions", json=_body(city), headers={"x-spectool-o3": "off"}).json()
    call = r1["choices"][0]["message"]["tool_calls"][0]
    out = _tool(json.loads(call["function"]["arguments"]), latency)
    r2 = _second(c, city, r1, out)
    return {"s": time.perf_counter() - t, "prefill": _prefill(r1["usage"]) + _prefill(r2["usage"]), "trips": 2}


def _second(c: httpx.Client, city: str, r1: dict, out: str) -> dict:
    msg = r1["choices"][0]["message"]
    call = msg["tool_calls"][0]
    messages = _body(city)["messages"] + [
        {"role": "assistant", "content": msg.get("content"), "tool_calls": msg["tool_calls"]},
        {"role": "tool", "tool_call_id": call["id"], "content": out}]
    return c.post("/v1/chat/completions", json=_body(city, messages=messages, tool_choice="auto"),
                  headers={"x-spectool-o3": "off"}).json()


def turn_client(c: httpx.Client, city: str, latency: float) -> dict:
    """Alg. 2 with a drafter that predicted get_weather(city) (α = 1): the tool overlaps the call."""
    t = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(_tool, {"city": city}, latency)
        r1 = c.post("/v1/chat/completions", json=_body(city), headers={"x-spectool-o3": "off"}).json()
        call = r1["choices"][0]["message"]["tool_calls"][0]
        args = json.loads(call["function"]["arguments"])
        out = fut.result() if args == {"city": city} else _tool(args, latency)
    r2 = _second(c, city, r1, out)
    return {"s": time.perf_counter() - t, "prefill": _prefill(r1["usage"]) + _prefill(r2["usage"]), "trips": 2}


def turn_engine(c: httpx.Client, city: str, latency: float) -> dict:
    """Alg. 4: stream, learn the id, post the speculative tool's output; O2/O3 in the server."""
    t = time.perf_counter()
    body = _body(city, stream=True, stream_options={"include_usage": True})
    hdr = {"x-spectool-then-tool-choice": "auto"}
    usage, resolved, calls, poster = None, 0, [], None
    with c.stream("POST", "/v1/chat/completions", json=body, headers=hdr) as resp:
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ch = json.loads(line[6:])
            if poster is None:
                rid = ch["id"]

                def post(rid=rid):
                    out = _tool({"city": city}, latency)
                    c.post(f"/cache-tool-output/{rid}",
                           json=[{"name": "get_weather", "params": {"city": city}, "output": out}])
                poster = threading.Thread(target=post)
                poster.start()
            usage = ch.get("usage") or usage
            for chc in ch["choices"]:
                resolved += "spectool_resolved_call" in chc
                calls += chc.get("delta", {}).get("tool_calls") or []
    trips, prefill = 1, _prefill(usage)
    if calls and not resolved:  # a miss: the client finishes the turn itself (Alg. 2 fallback)
        poster.join()
        msg = {"content": None, "tool_calls": [{"id": calls[0]["id"], "type": "function", "function": {
            "name": calls[0]["function"]["name"], "arguments": "".join(
                x["function"].get("arguments") or "" for x in calls)}}]}
        r2 = _second(c, city, {"choices": [{"message": msg}]}, _tool({"city": city}, 0))
        trips, prefill = 2, prefill + _prefill(r2["usage"])
    poster.join()
    return {"s": time.perf_counter() - t, "prefill": prefill, "trips": trips, "hit": bool(resolved)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spectool_serving.vllm.bench")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--tool-latency", type=float, default=0.5)
    p.add_argument("--turns", type=int, default=4, help="agent turns per mode")
    p.add_argument("--url", default=None,
                   help="use a running server (start it with SPECTOOL_VLLM_MAX_HOPS=1 for equal work)")
    a = p.parse_args(argv)
    if a.url:
        return _run(a.url, a)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path("out") / "vllm-bench-server.log"
    log.parent.mkdir(exist_ok=True)
    env = server_env()
    env["SPECTOOL_VLLM_MAX_HOPS"] = "1"  # one continuation: the same two model calls as the baseline
    with VllmServer(build_command("embedded", port=port, dtype=a.dtype), port=port, env=env,
                    log_path=str(log), start_timeout=600) as server:
        return _run(server.url, a)


def _run(url: str, a: argparse.Namespace) -> int:
    with httpx.Client(base_url=url, timeout=600) as c:
        decode_rate(c, 1, 16)  # warm up
        print(f"vLLM {a.dtype}: decode single {decode_rate(c, 1):.1f} tok/s, 8 streams {decode_rate(c, 8):.1f} tok/s")
        stats0 = c.get("/spectool/stats").json()
        rows = {}
        for name, fn in (("baseline", turn_baseline), ("client", turn_client), ("engine", turn_engine)):
            runs = [fn(c, CITIES[i % len(CITIES)], a.tool_latency) for i in range(a.turns)]
            rows[name] = runs
            hits = sum(r.get("hit", False) for r in runs)
            print(f"turn {name:8s}: {statistics.median(r['s'] for r in runs):.3f} s median, "
                  f"prefill {statistics.mean(r['prefill'] for r in runs):.0f} tok, "
                  f"round trips {statistics.mean(r['trips'] for r in runs):.1f}"
                  + (f", O3 hits {hits}/{len(runs)}" if name == "engine" else ""))
        base = statistics.median(r["s"] for r in rows["baseline"])
        for name in ("client", "engine"):
            m = statistics.median(r["s"] for r in rows[name])
            print(f"time saved vs baseline, {name}: {100 * (base - m) / base:.1f}%")
        hits = [r for r in rows["engine"] if r.get("hit")]
        if hits:
            saved = statistics.mean(r["prefill"] for r in rows["baseline"]) - statistics.mean(r["prefill"] for r in hits)
            print(f"per O3 hit: prefill tokens saved {saved:.0f}, client round trips saved 1")
        s = c.get("/spectool/stats").json()
        o2, o20 = s["o2"][0], stats0["o2"][0]
        prop, acc = o2["tool_proposed"] - o20["tool_proposed"], o2["tool_accepted"] - o20["tool_accepted"]
        print(f"O2 tool-call drafts: {acc}/{prop} tokens accepted; text drafts: "
              f"{o2['text_accepted'] - o20['text_accepted']}/{o2['text_proposed'] - o20['text_proposed']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
