"""Torch engine vs vLLM (+ spectool's plugins): the serving figures of both, one run, one workload.

    python -m spectool_bench.backends._compare [--backends torch,vllm] [--dtype bfloat16]
        [--tool-latency 0.5] [--turns 4] [--threads 1] [--out DIR]

Each backend serves the embedded SmolLM2 (``EmbeddedMain``: the torch engine in-process, vLLM
as a subprocess from ``.venv-vllm``) at the same dtype, one at a time, and gets the same
requests (:mod:`.workload`): decode tokens/s single-stream and across 8 streams; per agent turn
the median wall time of baseline / client side / engine side (modes interleaved per turn, after
an untimed warm-up turn per city so no mode meets a colder prefix cache than another); prefill
tokens and client round trips saved per O3 hit; O2 tool-draft acceptance. Writes
``DIR/results.json`` and ``DIR/backends.png``, prints a table, and records the backends' decode
rates in spectool's cache, where ``spectool bench --backend auto`` reads them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from ..vllm._workload import CITIES, MODES, decode_rate, o2_counts, o2_rejections, turn


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def measure(url: str, model: str, turns: int, latency: float, tokens: int = 128) -> dict:
    """Every figure of one running backend (``url`` without ``/v1``)."""
    cities = [CITIES[i % len(CITIES)] for i in range(turns)]
    with httpx.Client(base_url=url, timeout=600) as c:
        decode_rate(c, model, 1, 16)  # warm-up: first-request costs
        for city in cities:  # warm-up: every prompt seen once, by no timed mode
            turn(c, "baseline", model, city, 0.0)
        out: dict = {"decode_tok_s_1": decode_rate(c, model, 1, tokens)}
        _say(f"  decode single stream {out['decode_tok_s_1']:.1f} tok/s")
        out["decode_tok_s_8"] = decode_rate(c, model, 8, tokens)
        _say(f"  decode 8 streams {out['decode_tok_s_8']:.1f} tok/s aggregate")
        o2_before = o2_counts(c)
        rows: dict[str, list] = {m: [] for m in MODES}
        for i, city in enumerate(cities):
            for mode in MODES:  # interleaved: a noisy shared CPU treats the modes alike
                rows[mode].append(turn(c, mode, model, city, latency))
            _say(
                f"  turn {i + 1}/{turns} ({city}): "
                + ", ".join(f"{m} {rows[m][-1]['s']:.2f} s" for m in MODES)
            )
        o2 = {k: v - o2_before[k] for k, v in o2_counts(c).items()}
        rejections = o2_rejections(c)
    return {
        **out,
        **summarize(rows),
        "o2": {
            **o2,
            "rate": o2["tool_accepted"] / o2["tool_proposed"] if o2["tool_proposed"] else None,
            "rejections": rejections,
        },
        "runs": rows,
    }


def summarize(rows: dict[str, list]) -> dict:
    """Medians and means per mode; per-hit savings of the engine side (hits only)."""
    mean = statistics.mean  # never empty: the median above raises first, hits are checked
    turn_s = {m: statistics.median(r["s"] for r in rows[m]) for m in MODES}
    prefill = {m: mean([r["prefill"] for r in rows[m]]) for m in MODES}
    trips = {m: mean([r["trips"] for r in rows[m]]) for m in MODES}
    hits = [r for r in rows["engine"] if r.get("hit")]
    per_hit = None
    if hits:
        hp, ht = mean([r["prefill"] for r in hits]), mean([r["trips"] for r in hits])
        per_hit = {
            "prefill_saved_vs_baseline": prefill["baseline"] - hp,
            "prefill_saved_vs_client": prefill["client"] - hp,
            "round_trips_saved": trips["baseline"] - ht,
        }
    return {
        "turn_s": turn_s,
        "saved_pct": {
            m: 100 * (turn_s["baseline"] - turn_s[m]) / turn_s["baseline"] for m in ("client", "engine")
        },
        "prefill_per_turn": prefill,
        "round_trips_per_turn": trips,
        "o3_hits": len(hits),
        "turns": len(rows["engine"]),
        "per_hit": per_hit,
    }


def run_backend(backend: str, a: argparse.Namespace) -> dict:
    from ._embedded_main import EmbeddedMain

    _say(f"{backend}: starting the embedded SmolLM2 ({a.dtype})")
    log = str(Path(a.out) / f"{backend}-server.log")
    # one continuation per turn: the engine side does the baseline's two model calls
    with EmbeddedMain(backend=backend, dtype=a.dtype, threads=a.threads, max_rounds=1, log_path=log) as main:
        _say(f"{backend}: up in {main.startup_s:.0f} s")
        res = measure(main.base_url.removesuffix("/v1"), main.model_name, a.turns, a.tool_latency, a.tokens)
    return {"startup_s": main.startup_s, **res}


def _per_mode(key: str, mode: str, fmt: str) -> Callable[[dict], str]:
    return lambda b: fmt.format(b[key][mode])


def table(results: dict) -> str:
    names = list(results["backends"])
    rows: list[tuple[str, Callable[[dict], str]]] = [
        ("decode tok/s, 1 stream", lambda b: f"{b['decode_tok_s_1']:.1f}"),
        ("decode tok/s, 8 streams", lambda b: f"{b['decode_tok_s_8']:.1f}"),
    ]
    rows += [(f"turn s, {m} (median)", _per_mode("turn_s", m, "{:.2f}")) for m in MODES]
    rows += [(f"time saved, {m}", _per_mode("saved_pct", m, "{:.1f}%")) for m in ("client", "engine")]
    rows += [
        ("O3 hits", lambda b: f"{b['o3_hits']}/{b['turns']}"),
        ("prefill tok/turn b/c/e", lambda b: "/".join(f"{b['prefill_per_turn'][m]:.0f}" for m in MODES)),
        ("prefill saved/hit vs base", lambda b: _f(b["per_hit"], "prefill_saved_vs_baseline")),
        ("prefill saved/hit vs client", lambda b: _f(b["per_hit"], "prefill_saved_vs_client")),
        ("round trips saved/hit", lambda b: _f(b["per_hit"], "round_trips_saved", "{:.1f}")),
        ("O2 tool drafts accepted", lambda b: f"{b['o2']['tool_accepted']}/{b['o2']['tool_proposed']}"),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'':{width}}  " + "  ".join(f"{n:>10}" for n in names)]
    lines += [
        f"{label:{width}}  " + "  ".join(f"{fn(results['backends'][n]):>10}" for n in names)
        for label, fn in rows
    ]
    return "\n".join(lines)


def _f(d: dict | None, key: str, fmt: str = "{:.0f}") -> str:
    return "-" if not d else fmt.format(d[key])


def plot(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["backends"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        b = results["backends"][n]
        ax1.bar([x + i * width for x in range(2)], [b["decode_tok_s_1"], b["decode_tok_s_8"]], width, label=n)
        ax2.bar([x + i * width for x in range(3)], [b["turn_s"][m] for m in MODES], width, label=n)
    ax1.set(
        xticks=[x + width * (len(names) - 1) / 2 for x in range(2)],
        xticklabels=["1 stream", "8 streams"],
        ylabel="decode tokens/s",
        title=f"decode ({results['settings']['dtype']})",
    )
    ax2.set(
        xticks=[x + width * (len(names) - 1) / 2 for x in range(3)],
        xticklabels=list(MODES),
        ylabel="s per agent turn (median)",
        title=f"agent turn, tool {results['settings']['tool_latency']} s",
    )
    ax1.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spectool_bench.backends._compare")
    p.add_argument("--backends", default="torch,vllm", help="comma-separated: torch, vllm")
    p.add_argument("--dtype", default="bfloat16", help="both backends (bfloat16: vLLM's CPU default)")
    p.add_argument("--tool-latency", type=float, default=0.5)
    p.add_argument("--turns", type=int, default=4, help="agent turns per mode")
    p.add_argument("--tokens", type=int, default=128, help="tokens per decode-rate request")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch engine threads (vLLM's CPU worker binds 1 core of 2, keeping 1 for its API server)",
    )
    p.add_argument("--out", default="out/backends", help="folder for results.json and backends.png")
    p.add_argument(
        "--no-cache", action="store_true", help="do not record the decode rates for --backend auto"
    )
    a = p.parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    names = [b.strip() for b in a.backends.split(",") if b.strip()]
    results = {
        "settings": {
            "dtype": a.dtype,
            "tool_latency": a.tool_latency,
            "turns": a.turns,
            "tokens": a.tokens,
            "torch_threads": a.threads,
        },
        "backends": {},
    }
    for name in names:
        results["backends"][name] = run_backend(name, a)
    from ._choice import record_rates

    rates = {n: b["decode_tok_s_1"] for n, b in results["backends"].items()}
    if not a.no_cache and {"torch", "vllm"} <= set(rates):  # a choice needs both, measured side by side
        results["recorded"] = record_rates(rates, a.dtype, source="spectool_bench.backends._compare")
    path = Path(a.out) / "results.json"
    path.write_text(json.dumps(results, indent=1))
    print(table(results))
    print(f"wrote {path}\nwrote {plot(results, Path(a.out) / 'backends.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
