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

from spectool import RequestHook, run_agent, speculative
from spectool import model as perf
from spectool.testing import ScriptedDrafter, ScriptedModel, call, fake_tool, openai_client, say

USER: list[Any] = [{"role": "user", "content": "what is the weather in Paris?"}]  # chat messages


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


def _now() -> tuple[float, float]:
    """(wall, CPU of this thread): CPU time is immune to the OS preempting us on a busy box."""
    return time.perf_counter(), time.thread_time()


class _SdkTimer(RequestHook):
    """Times the SDK call itself, so the wrapper's own time per turn can be separated."""

    def __init__(self) -> None:
        self.last = (0.0, 0.0)

    async def wrap_request(self, request: Any, call_next: Any) -> Any:
        t0 = _now()
        try:
            return await call_next(request)
        finally:
            t1 = _now()
            self.last = (t1[0] - t0[0], t1[1] - t0[1])


def _summary(samples: dict[str, list[float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, xs in samples.items():
        out[f"{name}_p50_ms"] = _pct(xs, 0.5) * 1000
        out[f"{name}_p99_ms"] = _pct(xs, 0.99) * 1000
    for clock in ("", "cpu_"):
        for q in ("p50", "p99"):
            out[f"{clock}overhead_{q}_ms"] = out[f"{clock}wrapped_{q}_ms"] - out[f"{clock}bare_{q}_ms"]
    return out


async def measure_overhead(turns: int, samples: int) -> dict[str, Any]:
    """Interleaved turns, bare vs wrapped: wall and CPU time per turn, and outside the SDK call."""
    weather = fake_tool("weather", effect="read_only", result="sunny")
    model = ScriptedModel([call("weather", city="Paris")])
    bare = openai_client(model)
    tools = [weather.openai_chat()]
    timer = _SdkTimer()
    names = (
        "bare",
        "wrapped",
        "cpu_bare",
        "cpu_wrapped",
        "self_bare",
        "self_wrapped",
        "cpu_self_bare",
        "cpu_self_wrapped",
    )
    got: dict[str, list[float]] = {n: [] for n in names}
    async with speculative(
        openai_client(model), [weather], ScriptedDrafter(model), samples=samples, hooks=[timer]
    ) as spec:
        for i in range(turns + 50):  # the first 50 of each side warm up
            t0 = _now()
            r = await bare.chat.completions.create(model="m", messages=USER, tools=tools)
            t_sdk = _now()
            tc = r.choices[0].message.tool_calls[0]
            out = await weather.invoke(tc.function.arguments)
            _ = {"role": "tool", "tool_call_id": tc.id, "content": out}
            t1 = _now()
            r = await spec.chat.completions.create(model="m", messages=USER)
            _ = await spec.run_tool_calls(r)
            t2 = _now()
            if i < 50:
                continue
            for c, prefix in ((0, ""), (1, "cpu_")):
                got[prefix + "bare"].append(t1[c] - t0[c])
                got[prefix + "wrapped"].append(t2[c] - t1[c])
                got[prefix + "self_bare"].append(t1[c] - t_sdk[c])
                got[prefix + "self_wrapped"].append(t2[c] - t1[c] - timer.last[c])
        stats = spec.stats()
    return {
        "turns": turns,
        "samples": samples,
        **_summary(got),
        "overhead_mean_ms": (statistics.fmean(got["wrapped"]) - statistics.fmean(got["bare"])) * 1000,
        "hits_or_joins": stats["hits"] + stats["joins"],
    }


async def measure_time_saved(
    latency: float, agent_turns: int, repeats: int, samples: int, hit_rate: float
) -> dict[str, Any]:
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
            ScriptedDrafter(model, hit_rate=hit_rate, delay=draft_delay, seed=seed)
        )
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
    return {
        "latency_s": latency,
        "hit_rate_setting": hit_rate,
        "samples": samples,
        "alpha_measured": alpha,
        "baseline_s": b,
        "speculative_s": s,
        "time_saved_pct": 100 * (b - s) / b,
        "model_predicted_pct": 100 * (std - spec) / std,
        "transcripts_identical": True,
    }


def run(args: argparse.Namespace) -> int:
    async def main() -> dict[str, Any]:
        over = await measure_overhead(args.turns, args.samples)
        settings = [(1.0, args.samples), (0.8, 1), (0.8, args.samples)]
        saved = [
            await measure_time_saved(args.latency, args.agent_turns, args.repeats, lam, p)
            for p, lam in settings
        ]
        return {"overhead": over, "time_saved": saved}

    result = anyio.run(main)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    o = result["overhead"]
    print(
        f"Middleware overhead per turn (0-latency scripted model, in-process, λ={o['samples']}, "
        f"{o['turns']} turns each side, interleaved), ms:"
    )
    print("                         wall p50  wall p99   CPU p50   CPU p99")
    for label, key in (
        ("bare AsyncOpenAI", "bare"),
        ("SpeculativeOpenAI", "wrapped"),
        ("overhead", "overhead"),
        ("outside SDK, bare", "self_bare"),
        ("outside SDK, wrapped", "self_wrapped"),
    ):
        print(
            f"  {label:<21} {o[key + '_p50_ms']:9.3f} {o[key + '_p99_ms']:9.3f} "
            f"{o['cpu_' + key + '_p50_ms']:9.3f} {o['cpu_' + key + '_p99_ms']:9.3f}"
        )
    share = 100 * o["overhead_p50_ms"] / o["bare_p50_ms"]
    print(
        f"  p50 overhead = {share:.1f}% of a 0-latency turn, "
        f"{o['overhead_p50_ms'] / 10:.2f}% of a 100 ms turn (CPU includes drafting during the call)"
    )
    for s in result["time_saved"]:
        print(
            f"Time saved, G = T = {s['latency_s']:.2f} s, g = G/10, per-sample hit rate "
            f"{s['hit_rate_setting']:.1f}, λ={s['samples']} → α={s['alpha_measured']:.2f}: "
            f"{s['baseline_s']:.3f} s → {s['speculative_s']:.3f} s = {s['time_saved_pct']:.1f}% saved"
            f" (model: {s['model_predicted_pct']:.1f}%; transcripts identical)"
        )
    return 0
