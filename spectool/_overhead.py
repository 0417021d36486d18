"""``spectool overhead``: what the middleware costs per turn, and what it saves.

1. Overhead: the same turn (one model request that returns one tool call, then the call) sent
   through the bare ``AsyncOpenAI`` client and through ``SpeculativeOpenAI``, interleaved, on a
   0-latency scripted model in-process. Reported as the p50/p99 difference per turn.
2. Time saved: a scripted agent whose tool latency matches the model's generation time, run
   without and with speculation (drafter hit rate α), next to the performance model's estimate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import anyio

from . import model as perf
from ._loop import run_agent
from ._openai import RequestHook, speculative
from .testing import ScriptedDrafter, ScriptedModel, call, fake_tool, openai_client, say

USER = [{"role": "user", "content": "what is the weather in Paris?"}]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--turns", type=int, default=400, help="measured turns per side (overhead)")
    p.add_argument("--samples", type=int, default=3, help="λ: drafts per request")
    p.add_argument("--latency", type=float, default=0.25, help="tool latency T and generation time G (s)")
    p.add_argument("--agent-turns", type=int, default=4, help="tool turns per agent (time saved)")
    p.add_argument("--repeats", type=int, default=3, help="agent runs per setting (time saved)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class _SdkTimer(RequestHook):
    """Times the SDK call itself, so the wrapper's own time per turn can be separated."""

    def __init__(self) -> None:
        self.last = 0.0

    async def wrap_request(self, request: Any, call_next: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await call_next(request)
        finally:
            self.last = time.perf_counter() - t0


async def measure_overhead(turns: int, samples: int) -> dict[str, Any]:
    """Interleaved turns, bare vs wrapped; total per turn and time outside the SDK call."""
    weather = fake_tool("weather", effect="read_only", result="sunny")
    model = ScriptedModel([call("weather", city="Paris")])
    bare = openai_client(model)
    tools = [weather.openai_chat()]
    timer = _SdkTimer()
    base: list[float] = []
    wrapped: list[float] = []
    base_self: list[float] = []
    wrapped_self: list[float] = []
    drafter = ScriptedDrafter(model)
    async with speculative(openai_client(model), [weather], drafter, samples=samples,
                           hooks=[timer]) as spec:
        for i in range(turns + 50):  # the first 50 of each side warm up
            t0 = time.perf_counter()
            r = await bare.chat.completions.create(model="m", messages=USER, tools=tools)
            sdk = time.perf_counter() - t0
            tc = r.choices[0].message.tool_calls[0]
            out = await weather.invoke(tc.function.arguments)
            _ = {"role": "tool", "tool_call_id": tc.id, "content": out}
            t1 = time.perf_counter()
            r = await spec.chat.completions.create(model="m", messages=USER)
            _ = await spec.run_tool_calls(r)
            t2 = time.perf_counter()
            if i >= 50:
                base.append(t1 - t0)
                wrapped.append(t2 - t1)
                base_self.append(t1 - t0 - sdk)
                wrapped_self.append(t2 - t1 - timer.last)
        stats = spec.stats()
    ms = 1000.0
    out = {
        "turns": turns, "samples": samples,
        "bare_p50_ms": _pct(base, 0.5) * ms, "bare_p99_ms": _pct(base, 0.99) * ms,
        "wrapped_p50_ms": _pct(wrapped, 0.5) * ms, "wrapped_p99_ms": _pct(wrapped, 0.99) * ms,
        "overhead_mean_ms": (statistics.fmean(wrapped) - statistics.fmean(base)) * ms,
        "self_bare_p50_ms": _pct(base_self, 0.5) * ms, "self_bare_p99_ms": _pct(base_self, 0.99) * ms,
        "self_wrapped_p50_ms": _pct(wrapped_self, 0.5) * ms,
        "self_wrapped_p99_ms": _pct(wrapped_self, 0.99) * ms,
        "hits_or_joins": stats["hits"] + stats["joins"],
    }
    out["overhead_p50_ms"] = out["wrapped_p50_ms"] - out["bare_p50_ms"]
    out["overhead_p99_ms"] = out["wrapped_p99_ms"] - out["bare_p99_ms"]
    return out


async def measure_time_saved(latency: float, agent_turns: int, repeats: int, samples: int,
                             hit_rate: float) -> dict[str, Any]:
    """Agent runs with G = T = ``latency`` per turn: baseline vs speculation, same script."""
    script: list[Any] = [[call("lookup", item=f"item{i}")] for i in range(agent_turns)]
    script.append(say("done"))
    lookup = fake_tool("lookup", effect="read_only", latency=latency, result=lambda a: a["item"].upper())
    draft_delay = latency / 10  # g: the drafter is ten times faster than the main model

    async def one(drafter: Any) -> tuple[float, str, dict[str, Any]]:
        model = ScriptedModel(script, first_token_latency=latency)
        async with speculative(openai_client(model), [lookup], drafter, samples=samples) as spec:
            result = await run_agent(spec, model="m", messages=USER, max_turns=agent_turns + 2)
        return result.seconds, result.transcript_json(), result.stats

    base_t, spec_t, hits = [], [], 0
    for seed in range(repeats):
        model = ScriptedModel(script)
        tb, transcript_b, _ = await one(None)
        ts, transcript_s, stats = await one(
            ScriptedDrafter(model, hit_rate=hit_rate, delay=draft_delay, seed=seed))
        if transcript_b != transcript_s:  # the guarantee, checked on every run of the benchmark
            raise AssertionError("speculation changed the transcript")
        base_t.append(tb)
        spec_t.append(ts)
        hits += stats["hits"] + stats["joins"]
    alpha = hits / (agent_turns * repeats)
    # Eq. 1-2 over the tool turns, plus the final answer turn (G, identical on both sides).
    std = perf.client_time_standard(latency, latency, agent_turns) + latency
    spec = perf.client_time_speculative(latency, draft_delay, latency, alpha, agent_turns) + latency
    b, s = statistics.fmean(base_t), statistics.fmean(spec_t)
    return {"latency_s": latency, "hit_rate_setting": hit_rate, "samples": samples,
            "alpha_measured": alpha,
            "baseline_s": b, "speculative_s": s, "time_saved_pct": 100 * (b - s) / b,
            "model_predicted_pct": 100 * (std - spec) / std, "transcripts_identical": True}


def run(args: argparse.Namespace) -> int:
    async def main() -> dict[str, Any]:
        over = await measure_overhead(args.turns, args.samples)
        settings = [(1.0, args.samples), (0.8, 1), (0.8, args.samples)]
        saved = [await measure_time_saved(args.latency, args.agent_turns, args.repeats, lam, p)
                 for p, lam in settings]
        return {"overhead": over, "time_saved": saved}

    result = anyio.run(main)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    o = result["overhead"]
    print(f"Middleware overhead per turn (0-latency scripted model, in-process, λ={o['samples']}, "
          f"{o['turns']} turns each side, interleaved):")
    print(f"  bare AsyncOpenAI   p50 {o['bare_p50_ms']:.3f} ms   p99 {o['bare_p99_ms']:.3f} ms")
    print(f"  SpeculativeOpenAI  p50 {o['wrapped_p50_ms']:.3f} ms   p99 {o['wrapped_p99_ms']:.3f} ms")
    print(f"  overhead           p50 {o['overhead_p50_ms']:+.3f} ms   p99 {o['overhead_p99_ms']:+.3f} ms"
          f"   mean {o['overhead_mean_ms']:+.3f} ms")
    print(f"  time outside the SDK call: bare p50 {o['self_bare_p50_ms']:.3f} ms p99 "
          f"{o['self_bare_p99_ms']:.3f} ms; wrapped p50 {o['self_wrapped_p50_ms']:.3f} ms p99 "
          f"{o['self_wrapped_p99_ms']:.3f} ms (drafting runs during the SDK call)")
    share = 100 * o["overhead_p50_ms"] / o["bare_p50_ms"]
    print(f"  = {share:.1f}% of a 0-latency turn; {o['overhead_p50_ms'] / 10:.2f}% of a 100 ms turn")
    for s in result["time_saved"]:
        print(f"Time saved, G = T = {s['latency_s']:.2f} s, g = G/10, per-sample hit rate "
              f"{s['hit_rate_setting']:.1f}, λ={s['samples']} → α={s['alpha_measured']:.2f}: "
              f"{s['baseline_s']:.3f} s → {s['speculative_s']:.3f} s = {s['time_saved_pct']:.1f}% saved"
              f" (model: {s['model_predicted_pct']:.1f}%; transcripts identical)")
    return 0
