"""Engine-side tool cache, end to end in one process (embedded SmolLM2, CPU).

Runs the server on a local port, starts a streamed request that must call ``get_weather``,
posts the tool's output as soon as the response id arrives, and prints the transcript the
engine resolved in place (O3) plus the engine counters.  python examples/engine_side.py
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import uvicorn

from spectool_serving import build_server

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def main() -> None:
    app = build_server()
    app.state.engine.ctx.max_rounds = 1  # resolve one call in place, return the next
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    body = {"model": "m", "stream": True, "temperature": 0, "max_tokens": 40, "tools": [WEATHER],
            "tool_choice": "required", "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    with (
        httpx.Client(base_url=base, timeout=600) as c,
        c.stream("POST", "/v1/chat/completions", json=body) as r,
    ):
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["delta"].get("role"):
                out = {"name": "get_weather", "params": {"city": "Paris"}, "output": "21C, clear"}
                print("posted:", c.post(f"/cache-tool-output/{chunk['id']}", json=[out]).json())
            for ch in chunk["choices"]:
                if ch.get("spectool_resolved_calls"):
                    print("resolved in place:", json.dumps(ch["spectool_resolved_calls"], indent=1))
                if ch["delta"].get("tool_calls"):
                    print("returned call:", ch["delta"]["tool_calls"][0]["function"])
    print(json.dumps(app.state.engine.counters()))
    server.should_exit = True
    thread.join()
    app.state.engine.stop()  # let the engine thread finish its step before the interpreter ends


if __name__ == "__main__":
    main()
