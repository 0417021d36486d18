"""``spectool decode-bench`` and ``spectool calibrate``: tree speculative decoding jobs.

Both drive the serving engine (torch, transformers), imported lazily here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from spectool.errors import ConfigError, missing_extra


def add_arguments(parser: argparse.ArgumentParser) -> None:
    calibrate = parser.prog.split()[-1] == "calibrate"
    parser.set_defaults(_job="calibrate" if calibrate else "bench")
    parser.add_argument(
        "--dtype",
        action="append",
        choices=["float32", "bfloat16"],
        help="dtypes to run (repeatable; default: float32 and bfloat16)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    if calibrate:
        parser.add_argument(
            "--batch", type=int, action="append", help="batch sizes for the cost tables (default: 1 and 4)"
        )
        return
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument(
        "--quick", action="store_true", help="one prompt per category, 48 new tokens (a few minutes)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument(
        "--prompt", action="append", metavar="ID", help="run only these prompt ids (repeatable), e.g. rag-3"
    )
    parser.add_argument(
        "--batch", type=int, action="append", help="batch sizes (repeatable; default: 1 and 4)"
    )
    parser.add_argument(
        "--recalibrate",
        action="store_true",
        help="re-measure cost tables and g* instead of reusing stored ones",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="runs of every method per prompt, interleaved; the median run is kept and the "
        "spread of the per-category ratios against engine_ar reported (default: 1)",
    )
    parser.add_argument(
        "--no-gate",
        action="store_true",
        help="draft every step (the policies' draft gate off), to measure what the gate buys",
    )


def run(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401

        from . import _tree as bench
        from ._summary import category_table
    except ImportError as exc:
        raise missing_extra(getattr(exc, "name", None) or "torch", "serve") from exc
    dtypes = tuple(args.dtype or ("float32", "bfloat16"))
    batches = tuple(sorted(set(args.batch or (1, 4))))
    if any(b < 1 for b in batches):
        raise ConfigError("--batch must be >= 1")
    if getattr(args, "repeat", 1) < 1:
        raise ConfigError("--repeat must be >= 1")
    if args._job == "calibrate":
        return _calibrate(bench, dtypes, batches, args.threads)
    try:
        bench.load_prompts(args.quick, args.prompt)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    res = bench.run_bench(
        args.out,
        quick=args.quick,
        dtypes=dtypes,
        batches=batches,
        max_new_tokens=args.max_new_tokens,
        threads=args.threads,
        refresh=args.recalibrate,
        log=lambda m: print(m, file=sys.stderr),
        prompt_ids=args.prompt,
        gate=not args.no_gate,
        repeat=args.repeat,
    )
    summary = {d: r["summary"] for d, r in res["dtypes"].items()}
    print(json.dumps(summary, indent=1))
    for dtype, s in summary.items():  # the speculation alone, per category (batch 1)
        print(f"\n{dtype}, batch 1, tok/s against engine_ar (spread over --repeat runs):")
        print(category_table(s))
    print(f"wrote {args.out / 'results.json'} and {args.out / 'speedup_vs_draft.png'}")
    return 0


def _calibrate(bench, dtypes, batches, threads) -> int:
    import torch

    from spectool.embedded import load_causal_lm

    if threads:
        torch.set_num_threads(threads)
    for dtype in dtypes:
        model, tok = load_causal_lm(dtype=dtype)
        table = bench.cost_table(model, dtype, list(batches), refresh=True)
        cal = bench.get_calibration(model, tok, dtype, table, refresh=True)  # through the engine
        print(
            f"{dtype}: g* = {cal.g_star} ({cal.method}); s(g) = "
            + ", ".join(f"{g}:{s * 1e3:.0f}ms" for g, s in zip(cal.gs, cal.s))
            + "; tau(g) = "
            + ", ".join(f"{g}:{t:.2f}" for g, t in zip(cal.gs, cal.tau))
        )
    return 0
