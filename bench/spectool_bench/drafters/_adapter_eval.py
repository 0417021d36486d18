"""Offline hit rate of the compact-prompt local drafter, base vs tuned adapter, on BFCL traces.

    python -m spectool_bench.drafters._adapter_eval --split test --limit 20 --adapter shipped

For every speculable ground-truth call of the split's tasks (:mod:`spectool_bench.workloads._traces`:
the true history before it), the drafter drafts λ = 3 rows in one batched generate (row 0 greedy,
the others sampled) under the tools' grammar; a hit at λ = 1 is row 0 proposing the call (exact
canonical key, :func:`spectool.keys.canonical_key` with the tool's schema), at λ = 3 any row.
Base and tuned drafters see the same prompt and grammar. Prints one row per drafter ×
category and writes JSON with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import anyio

from spectool import ToolCall, canonical_key
from spectool.drafters import LocalDrafter, LocalDrafterOptions, compact_prompt_ids, tool_schemas

from ..workloads._traces import bfcl_examples

__all__ = ["CompactDrafter", "evaluate", "main"]


class CompactDrafter(LocalDrafter):
    """LocalDrafter drafting from the compact prompt (the format adapters are tuned on)."""

    def prompt_ids(self, loaded: Any, request: Any) -> Any:
        import torch

        return torch.tensor([compact_prompt_ids(loaded.tokenizer, request)])


def _key(call: ToolCall, schemas: dict[str, Any]) -> str | None:
    params = (schemas.get(call.name) or {}).get("parameters")
    try:
        return canonical_key(call.name, dict(call.arguments), params)
    except ValueError:
        return None


def _rows_hit(drafter: CompactDrafter, target: str | None, schemas: dict[str, Any]) -> tuple[bool, bool]:
    from spectool.toolcall_text import salvage_tool_calls

    rows = [{_key(c, schemas) for c in salvage_tool_calls(t)} for t in drafter.last_texts]
    return bool(rows and target in rows[0]), any(target in r for r in rows)


def evaluate(
    drafter: CompactDrafter,
    categories: Sequence[str],
    split: str,
    limit: int,
    samples: int = 3,
    label: str = "",
) -> list[dict[str, Any]]:
    from spectool import DraftRequest

    rows = []
    for cat in categories:
        hits1 = hits3 = n = 0
        times: list[float] = []
        for ex in bfcl_examples([cat], split, speculable_only=True):
            if n >= limit:
                break
            schemas = tool_schemas(ex.request.tools)
            target = _key(ex.calls[0], schemas)
            req = DraftRequest(ex.request.messages, ex.request.tools, samples=samples)
            start = time.perf_counter()
            anyio.run(drafter.propose, req)
            times.append(time.perf_counter() - start)
            h1, h3 = _rows_hit(drafter, target, schemas)
            hits1, hits3, n = hits1 + h1, hits3 + h3, n + 1
        row = {
            "drafter": label,
            "category": cat,
            "split": split,
            "n": n,
            "alpha_speculable_l1": round(hits1 / n, 3) if n else None,
            "alpha_speculable_l3": round(hits3 / n, 3) if n else None,
            "g_median_s": round(statistics.median(times), 3) if times else None,
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spectool_bench.drafters._adapter_eval", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--categories",
        default="simple_python,multiple,live_simple,live_multiple,parallel,"
        "parallel_multiple,multi_turn_base,multi_turn_long_context",
    )
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=20, help="speculable calls per category")
    p.add_argument("--adapter", default="shipped", help="adapter folder, 'shipped', or 'none' (base only)")
    p.add_argument("--drafters", default="base,tuned")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    import torch

    from spectool.drafters import load_adapter
    from spectool.embedded import load_causal_lm

    if args.threads:
        torch.set_num_threads(args.threads)
    cats = [c for c in args.categories.split(",") if c]
    results = []
    for name in args.drafters.split(","):
        model, tok = load_causal_lm(None)
        if name == "tuned":
            model = load_adapter(model, None if args.adapter == "shipped" else args.adapter)
        drafter = CompactDrafter((model, tok), LocalDrafterOptions(max_new_tokens=128))
        results += evaluate(drafter, cats, args.split, args.limit, label=name)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    print(f"{'drafter':8} {'category':26} {'n':>4} {'α@1':>6} {'α@3':>6} {'g med s':>8}", file=sys.stderr)
    for r in results:
        print(
            f"{r['drafter']:8} {r['category']:26} {r['n']:4} {r['alpha_speculable_l1']!s:>6} "
            f"{r['alpha_speculable_l3']!s:>6} {r['g_median_s']!s:>8}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
