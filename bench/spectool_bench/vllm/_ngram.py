"""decode-bench's vLLM arm: speculation alone with vLLM's n-gram proposer, same prompts and dtype.

Two stock vLLM servers (no spectool plugin) serve the embedded SmolLM2: one decodes one token
per step (``ar``), one with vLLM's n-gram proposer (``ngram``, :data:`._vllm_overhead.NGRAM`).
Every decode-bench prompt goes to both at batch 1, greedy, the arm order flipping per prompt,
so ``ngram / ar`` is vLLM's speculation alone, measured as decode-bench measures spectool's
(``both / engine_ar``): generated tokens per second including prefill, and in the decode phase
after the first token (streamed). Outputs of the two arms are compared token for token
(speculation must not change them).

    .venv/bin/python -m spectool_bench.vllm._ngram --dtype float32 --max-new-tokens 128 --out out/vllm-ngram
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from statistics import geometric_mean
from typing import Any

import httpx

from ._overhead import NGRAM, sse_chunks, start_arms

__all__ = ["ARMS", "decode_once", "main", "summarize"]

ARMS = ("ar", "ngram")


def _say(msg: str) -> None:
    print(f"[vllm-ngram {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def decode_once(url: str, messages: list[dict[str, str]], n: int) -> dict[str, Any]:
    """One greedy request, streamed: generated token ids, tokens/s (prefill included), and the
    decode phase after the first token (``decode_tok_s``), where speculation acts."""
    body = {
        "model": "smollm2",
        "messages": messages,
        "max_tokens": n,
        "temperature": 0,
        "logprobs": True,  # the token ids' text pieces: outputs compared token for token
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    tokens: list[str] = []
    generated, first = 0, None
    with httpx.Client(base_url=url, timeout=600) as c:
        t0 = time.perf_counter()
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            r.raise_for_status()
            for chunk in sse_chunks(r):
                for choice in chunk.get("choices") or []:
                    got = (choice.get("logprobs") or {}).get("content") or []
                    if got and first is None:
                        first = time.perf_counter() - t0
                    tokens += [t["token"] for t in got]
                if chunk.get("usage"):
                    generated = chunk["usage"]["completion_tokens"]
        secs = time.perf_counter() - t0
    if first is None or generated < 1:
        raise RuntimeError(f"{url}: a streamed completion without tokens")
    decode_s = max(secs - first, 1e-9)
    return {
        "tokens": tokens,
        "generated": generated,
        "secs": secs,
        "tok_s": generated / secs,
        "ttft_s": first,
        "decode_s": decode_s,
        # the first token came with the prefill; the rest are the decode phase
        "decode_tok_s": (generated - 1) / decode_s,
    }


def _per_category(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    cats: dict[str, list[float]] = {}
    for r in rows:
        cats.setdefault(r["category"], []).append(r["ngram"][key] / r["ar"][key])
    return {c: sum(v) / len(v) for c, v in cats.items()}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per category: mean of per-prompt ``ngram / ar`` speedups; geomean over categories.
    Whole requests, and (where the rows were streamed) the decode phase after the first token."""
    per_cat = _per_category(rows, "tok_s")
    out = {
        "per_category": per_cat,
        "geomean": geometric_mean(per_cat.values()),
        "identical": all(r["identical"] for r in rows),
    }
    if all("decode_tok_s" in r[a] for r in rows for a in ARMS):
        phase = _per_category(rows, "decode_tok_s")
        out["decode_phase_per_category"] = phase
        out["decode_phase_geomean"] = geometric_mean(phase.values())
    return out


def run(a: argparse.Namespace) -> dict[str, Any]:
    from ..decode._tree import load_prompts

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    items = load_prompts(a.quick)
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        urls = start_arms(stack, {"ar": "stock", "ngram": "ngram"}, dtype=a.dtype, out=out, say=_say)
        for arm in ARMS:  # untimed warm-up
            decode_once(urls[arm], items[0]["messages"], 8)
        for k, item in enumerate(items):
            rec: dict[str, Any] = {"id": item["id"], "category": item["category"]}
            for arm in ARMS if k % 2 == 0 else ARMS[::-1]:
                rec[arm] = decode_once(urls[arm], item["messages"], a.max_new_tokens)
            rec["identical"] = rec["ar"]["tokens"] == rec["ngram"]["tokens"]
            rows.append(rec)
            _say(
                f"{item['id']}: ar {rec['ar']['tok_s']:.1f}  ngram {rec['ngram']['tok_s']:.1f} tok/s"
                + ("" if rec["identical"] else "  (outputs differ)")
            )
    summary = summarize(rows)
    results = {
        "settings": {
            "dtype": a.dtype,
            "max_new_tokens": a.max_new_tokens,
            "quick": a.quick,
            "ngram": NGRAM,
            "model": "embedded SmolLM2-135M-Instruct",
        },
        "rows": rows,
        "summary": summary,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print("| category | vLLM n-gram / vLLM one-token |\n|---|---|")
    for c, v in summary["per_category"].items():
        print(f"| {c} | {v:.2f}× |")
    print(f"| geomean | **{summary['geomean']:.2f}×** |  identical outputs: {summary['identical']}")
    phase = summary.get("decode_phase_per_category", {})
    if phase:
        print("\n| category | decode phase (after the first token), n-gram / one-token |\n|---|---|")
        for c, v in phase.items():
            print(f"| {c} | {v:.2f}× |")
        print(f"| geomean | **{summary['decode_phase_geomean']:.2f}×** |")
    print(f"wrote {out / 'results.json'}")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spectool_bench.vllm._ngram", description=__doc__.split("\n")[0]
    )
    p.add_argument("--dtype", default="float32", help="both arms (decode-bench's lossless dtype)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--quick", action="store_true", help="first prompt of each category")
    p.add_argument("--out", default="out/vllm-ngram")
    run(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
