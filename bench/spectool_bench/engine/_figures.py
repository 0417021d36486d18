"""Figures for the engine: ``python -m spectool_bench.engine._figures [--tokens N] [--tool-latency S]``.

1. decode throughput: one stream vs 8 concurrent streams (tokens/s, same engine);
2. per O3 hit: prefill tokens and round trips saved (engine counters, plain vs engine path),
   and model forwards (prefills + batched decode steps: O2 verifies a whole call in one);
3. time per agent turn (2 tool calls): baseline (tool after the response), client-side
   (tool started when the request goes out, result awaited after), engine-side (output
   posted while the model runs; O2/O3 in place).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from typing import Any

from spectool_serving.requests import build_sequences
from spectool_serving.sequence import Finish
from spectool_serving.server import build_engine

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
BODY: dict[str, Any] = {
    "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    "tools": [WEATHER],
    "tool_choice": "required",
    "temperature": 0,
    "max_tokens": 40,
}


def _run(engine, bodies, before=None):
    seqs, finals = [], []
    for body in bodies:
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        s = build_sequences(body, engine, rid, "")[0]
        engine.store.open(rid, "", s.tools)
        if before:
            before(rid)
        s.emit = lambda ev: finals.append(ev) if isinstance(ev, Finish) else None
        seqs.append(s)
    for s in seqs:
        engine.add(s)
    engine.run_until_idle()
    return finals


def throughput(engine, tokens: int) -> dict:
    body = {
        "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "temperature": 0,
        "max_tokens": tokens,
    }
    out = {}
    for n in (1, 8):
        t = time.perf_counter()
        finals = _run(engine, [body] * n)
        out[f"tok_s_{n}"] = sum(f.usage["completion_tokens"] for f in finals) / (time.perf_counter() - t)
    return out


def _tool(args):
    return json.dumps({"city": args.get("city"), "temp_c": 21})


def agent_turns(engine, latency: float, repeats: int = 1) -> dict:
    """Median seconds per agent turn of each mode, runs interleaved (a shared, noisy CPU
    treats all three alike), plus the counters of the last run of each."""
    runs = [_agent_once(engine, latency) for _ in range(repeats)]
    out = {k: v for k, v in runs[-1].items() if k.endswith("counters") or k == "engine_hit"}
    for mode in ("baseline", "client", "engine"):
        out[mode] = statistics.median(r[mode] for r in runs)
        c = out[f"{mode}_counters"]
        out[f"{mode}_forwards"] = c["requests"] + c["decode_steps"]  # prefills + batched steps
    return out


def _agent_once(engine, latency: float) -> dict:
    engine.ctx.max_rounds = 1
    res: dict[str, Any] = {}
    # baseline and client-side: two requests, tool between them
    for mode in ("baseline", "client"):
        c0 = engine.counters()
        t = time.perf_counter()
        messages = list(BODY["messages"])
        for _ in range(2):
            started = time.perf_counter()
            fin = _run(engine, [{**BODY, "messages": messages}])[0]
            call = fin.tool_call
            wait = latency if mode == "baseline" else max(0.0, latency - (time.perf_counter() - started))
            time.sleep(wait)
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": _tool(json.loads(call["function"]["arguments"])),
                },
            ]
        res[mode] = time.perf_counter() - t
        res[f"{mode}_counters"] = {k: engine.counters()[k] - c0[k] for k in c0}
        args = json.loads(call["function"]["arguments"])
    # engine-side: the speculative output lands `latency` after the request starts
    c0 = engine.counters()
    t = time.perf_counter()

    def post_later(rid):
        def go():
            time.sleep(latency)
            engine.store.post(rid, "", [{"name": "get_weather", "params": args, "output": _tool(args)}])

        threading.Thread(target=go, daemon=True).start()

    fin = _run(engine, [BODY], before=post_later)[0]
    res["engine"] = time.perf_counter() - t
    res["engine_counters"] = {k: engine.counters()[k] - c0[k] for k in c0}
    res["engine_hit"] = bool(fin.resolved)
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m spectool_bench.engine._figures")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--tool-latency", type=float, default=0.5)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeats", type=int, default=1, help="interleaved repeats of the agent turn")
    a = p.parse_args(argv)
    engine = build_engine(dtype=a.dtype)
    out = {
        "throughput": throughput(engine, a.tokens),
        "agent": agent_turns(engine, a.tool_latency, a.repeats),
    }
    b, e = out["agent"]["baseline_counters"], out["agent"]["engine_counters"]
    out["per_hit"] = {
        "prefill_tokens_saved": b["prefill_tokens"] - e["prefill_tokens"],
        "reprefilled_history_saved": b["reprefilled_tokens"] - e["reprefilled_tokens"],
        "round_trips_saved": b["left_batch"] - e["left_batch"],
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
