"""What spectool's vLLM plugins cost when nothing hits: stock vLLM against the plugin arm.

Both arms are the same vLLM interpreter, model, dtype and flags; the plugin arm adds what a
spectool user runs (``VLLM_PLUGINS=spectool``: the cache endpoint, the worker extension, the
O2 proposer as vLLM's speculative method), the stock arm loads no plugin at all
(``VLLM_PLUGINS`` set and empty). Both servers stay up and are measured in turns — round r
runs every stream count on one arm, then on the other, the order flipping each round — so
drift on a shared machine lands on both. The requests carry no cache entries: O2 finds nothing
to draft, which is the cost every request pays. Per arm and stream count: aggregate decode
tokens/s and median time to first token (streamed, ``ignore_eos`` so every stream produces
``--tokens``).

    .venv/bin/python -m spectool_bench.vllm._overhead --streams 1,8,32 --rounds 3 --out out/vllm-overhead
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from ._workload import story_body

__all__ = [
    "ARMS",
    "NGRAM",
    "arm_command",
    "free_port",
    "main",
    "measure_streams",
    "sse_chunks",
    "start_arms",
    "summarize",
    "tax_arg",
]

ARMS = ("stock", "spectool")
#: ``--arms`` may add ``no-o2``: spectool's plugins loaded, O2 off (no speculative config), which
#: separates what the plugins cost from what running vLLM's speculative path costs
OPTIONAL_ARMS = ("no-o2",)
#: vLLM's own n-gram proposer (prompt lookup), the speculative decoding a vLLM user already has
NGRAM = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def _say(msg: str) -> None:
    print(f"[vllm-overhead {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def arm_command(arm: str, *, port: int, dtype: str, model: str = "embedded") -> tuple[list[str], dict]:
    """(command, environment) of one arm's server: ``stock``, ``spectool`` (plugins, O2 on),
    ``no-o2`` (plugins, O2 off) or ``ngram`` (stock vLLM with its n-gram proposer, :data:`NGRAM`)."""
    from spectool_serving.vllm.serve import build_command, server_env

    if arm not in (*ARMS, *OPTIONAL_ARMS, "ngram"):
        raise ValueError(f"arm must be one of {(*ARMS, *OPTIONAL_ARMS, 'ngram')}, got {arm!r}")
    plugins = arm in ("spectool", "no-o2")
    extra = ["--speculative-config", json.dumps(NGRAM)] if arm == "ngram" else []
    cmd = build_command(
        model, port=port, dtype=dtype, o2=arm == "spectool", spectool_plugins=plugins, extra=extra
    )
    return cmd, server_env(plugins=plugins)


def start_arms(
    stack: ExitStack, arms: Mapping[str, str], *, dtype: str, out: Path, say: Callable[[str], None]
) -> dict[str, str]:
    """Start a server per arm (``name -> kind`` of :func:`arm_command`), each closed by ``stack``,
    its log in ``out/<name>-server.log``; returns each arm's URL."""
    from spectool_serving.vllm.serve import VllmServer

    urls = {}
    for name, kind in arms.items():  # one after the other: two starts at once would fight for both cores
        port = free_port()
        cmd, env = arm_command(kind, port=port, dtype=dtype)
        say(f"{name}: starting ({' '.join(cmd[3:])})")
        server = VllmServer(
            cmd, port=port, env=env, log_path=str(out / f"{name}-server.log"), start_timeout=900
        )
        urls[name] = stack.enter_context(server).url
    return urls


def sse_chunks(resp: httpx.Response) -> Iterator[dict[str, Any]]:
    """The JSON chunks of a streamed chat completion (``data:`` lines, up to ``[DONE]``)."""
    for line in resp.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


def _one_stream(client: httpx.Client, model: str, i: int, tokens: int) -> tuple[float, int]:
    """(seconds to the first token, tokens generated) of one streamed story request."""
    body = story_body(model, i, tokens, stream=True, stream_options={"include_usage": True})
    start, ttft, generated = time.perf_counter(), None, 0
    with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        for chunk in sse_chunks(resp):
            if ttft is None and any(
                (c.get("delta") or {}).get("content") for c in chunk.get("choices") or ()
            ):
                ttft = time.perf_counter() - start
            if chunk.get("usage"):
                generated = chunk["usage"]["completion_tokens"]
    return (ttft if ttft is not None else time.perf_counter() - start), generated


def measure_streams(url: str, model: str, streams: int, tokens: int) -> dict[str, float]:
    """Aggregate tokens/s and median TTFT of ``streams`` concurrent streamed requests."""
    with httpx.Client(base_url=url, timeout=600) as client:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(streams) as pool:
            results = list(pool.map(lambda i: _one_stream(client, model, i, tokens), range(streams)))
        wall = time.perf_counter() - t0
    return {
        "tok_s": sum(n for _, n in results) / wall,
        "ttft_median_s": statistics.median(t for t, _ in results),
        "tokens": float(sum(n for _, n in results)),
    }


def summarize(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stream count: median tok/s and TTFT of each arm over the rounds, and their ratios
    (``tok_s_ratio``: spectool / stock; ``no-o2_tok_s_ratio`` where that arm ran)."""
    rows = []
    arms = [a for a in (*ARMS, *OPTIONAL_ARMS) if any(s["arm"] == a for s in samples)]
    for streams in sorted({s["streams"] for s in samples}):
        row: dict[str, Any] = {"streams": streams}
        for arm in arms:
            mine = [s for s in samples if s["streams"] == streams and s["arm"] == arm]
            row[f"{arm}_tok_s"] = statistics.median(s["tok_s"] for s in mine) if mine else None
            row[f"{arm}_ttft_s"] = statistics.median(s["ttft_median_s"] for s in mine) if mine else None
        if row["stock_tok_s"] and row["spectool_tok_s"]:
            row["tok_s_ratio"] = row["spectool_tok_s"] / row["stock_tok_s"]
            row["ttft_ratio"] = row["spectool_ttft_s"] / row["stock_ttft_s"]
        for arm in OPTIONAL_ARMS:
            if row["stock_tok_s"] and row.get(f"{arm}_tok_s"):
                row[f"{arm}_tok_s_ratio"] = row[f"{arm}_tok_s"] / row["stock_tok_s"]
        rows.append(row)
    return rows


def tax_arg(rows: list[dict[str, Any]]) -> str:
    """The measured O2 tax as ``spectool serve --backend vllm --o2-tax`` takes it."""
    return ",".join(f"{r['streams']}:{r['tok_s_ratio']:.3f}" for r in rows if r.get("tok_s_ratio"))


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| streams | stock tok/s | spectool tok/s | ratio | stock TTFT s | spectool TTFT s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['streams']} | {r['stock_tok_s']:.1f} | {r['spectool_tok_s']:.1f} | "
            f"**{r.get('tok_s_ratio', float('nan')):.3f}×** | "
            f"{r['stock_ttft_s']:.2f} | {r['spectool_ttft_s']:.2f} |"
        )
    if any("no-o2_tok_s" in r for r in rows):
        out += ["", "| streams | plugins, O2 off, tok/s | ratio to stock |", "|---|---|---|"]
        for r in rows:
            ratio = r.get("no-o2_tok_s_ratio", float("nan"))
            out.append(f"| {r['streams']} | {r['no-o2_tok_s']:.1f} | **{ratio:.3f}×** |")
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    xs = [r["streams"] for r in rows]
    for arm, style in (("stock", "o-"), ("spectool", "s--"), ("no-o2", "^:")):
        if f"{arm}_tok_s" not in rows[0]:
            continue
        a.plot(xs, [r[f"{arm}_tok_s"] for r in rows], style, label=arm)
        b.plot(xs, [r[f"{arm}_ttft_s"] for r in rows], style, label=arm)
    a.set(xscale="log", xlabel="concurrent streams", ylabel="aggregate tokens/s", title="decode throughput")
    b.set(xscale="log", xlabel="concurrent streams", ylabel="median TTFT (s)", title="time to first token")
    for ax in (a, b):
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.legend()
    fig.suptitle("vLLM (CPU) with and without spectool's plugins, no cache hits")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(a: argparse.Namespace) -> dict[str, Any]:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    streams = [int(s) for s in a.streams.split(",")]
    arms = tuple(a.arms.split(","))
    if not set(ARMS) <= set(arms) or not set(arms) <= {*ARMS, *OPTIONAL_ARMS}:
        raise SystemExit(f"--arms must include {ARMS} and may add {OPTIONAL_ARMS}, got {a.arms!r}")
    samples: list[dict[str, Any]] = []
    with ExitStack() as stack:
        urls = start_arms(stack, {arm: arm for arm in arms}, dtype=a.dtype, out=out, say=_say)
        for arm in arms:  # untimed warm-up: first requests pay one-off allocation
            measure_streams(urls[arm], "smollm2", 2, 8)
        for r in range(a.rounds):
            for arm in arms if r % 2 == 0 else arms[::-1]:
                for n in streams:
                    m = measure_streams(urls[arm], "smollm2", n, a.tokens)
                    samples.append({"round": r, "arm": arm, "streams": n, **m})
                    _say(
                        f"round {r} {arm:8s} {n:3d} streams: {m['tok_s']:.1f} tok/s, "
                        f"TTFT {m['ttft_median_s']:.2f} s"
                    )
    rows = summarize(samples)
    results = {
        "settings": {
            "dtype": a.dtype,
            "tokens": a.tokens,
            "rounds": a.rounds,
            "streams": streams,
            "arms": list(arms),
            "model": "embedded SmolLM2-135M-Instruct",
        },
        "samples": samples,
        "summary": rows,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(table(rows))
    print(f"for --o2 auto on this machine: spectool serve --backend vllm --o2-tax {tax_arg(rows)}")
    if not a.no_plot:
        print(f"wrote {plot(rows, out / 'vllm-overhead.png')}")
    print(f"wrote {out / 'results.json'}")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spectool_bench.vllm._overhead", description=__doc__.split("\n")[0]
    )
    p.add_argument("--streams", default="1,8,32", help="concurrent stream counts")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per arm")
    p.add_argument("--tokens", type=int, default=64, help="tokens per stream")
    p.add_argument("--dtype", default="bfloat16", help="both arms (bfloat16: vLLM's CPU default)")
    p.add_argument("--arms", default="stock,spectool", help="stock,spectool and optionally no-o2")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--out", default="out/vllm-overhead")
    run(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
